"""IPPO against its peer, skrl 2.1.1's IPPO, side by side in one process on the same machine.

On `spread` (3 agents) with the same hyperparameters, networks and loss weights: training
throughput against the bare env loop and the final team return over several seeds, with
Discrete actions (skrl on our native env and on mpe2 through its PettingZoo wrapper) and with
Box actions (both Gaussian policies from log-std `LOG_STD_INIT`); our throughput on
`hazard_grid` with 64 copies.

Run: `python -m benchmarks.algos [--actions discrete|continuous|both]` (or `make bench`);
`--quick` a smoke run. Results go to `benchmarks/out/algos.json` and the algos section of
BENCHMARKS.md; a run of one kind of actions keeps the other kind's saved results (without them
it leaves the section as it is).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    BENCHMARKS_MD,
    OUT,
    Clock,
    CpuSplit,
    arguments,
    dict_loop,
    met,
    positive_int,
    save_results,
    table,
)
from src.algos.train import build_trainer
from src.analysis.files import write_text
from src.config.run import make_run_config
from src.envs.registry import make_vector_env

HYPER = {
    "num_envs": 8,
    "rollouts": 64,
    "learning_epochs": 4,
    "mini_batches": 4,
    "learning_rate": 3e-4,
    "hidden_sizes": (64, 64),
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_coef": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
}
"""The hyperparameters of both implementations."""
TAIL = 0.2  # fraction of the run whose finished episodes give the final return
LOG_STD_INIT = 0.0
"""Initial log-std of both Gaussian policies (std 1): our ActorCritic's zeros, given to skrl's."""
ACTIONS = ("discrete", "continuous")
"""The kinds of actions compared; `--actions both` runs them in this order."""
CONTINUOUS = {"continuous_actions": True}
"""The env parameters of `spread` with Box actions."""
VARIANTS = {"discrete": ("ours", "skrl", "skrl_mpe2"), "continuous": ("ours", "skrl")}
"""The training runs on spread per kind of actions: our IPPO, skrl on the native env, skrl on
mpe2."""
LABELS = {
    "ours": "ours (native spread)",
    "skrl": "skrl (native spread)",
    "skrl_mpe2": "skrl (mpe2, PettingZoo wrapper)",
}
AGENTS = 3
CLOCKS = {"steps_per_cpu_s": "per CPU second", "steps_per_s": "per wall second"}
"""The rates measured: per CPU second of this process (the steadier on a shared machine) and
per wall second."""


class _Episodes:
    """(env step, team return) of every episode that ended, and the returns at both ends."""

    def __init__(self) -> None:
        self.steps = 0
        self.episodes: list[tuple[int, float]] = []

    def returns(self) -> dict[str, float]:
        """Mean team return of the episodes that ended in the last TAIL of the run (the final
        return) and, to show what was learnt, in the first TAIL."""
        last = [ret for step, ret in self.episodes if step > (1.0 - TAIL) * self.steps]
        first = [ret for step, ret in self.episodes if step <= TAIL * self.steps]
        mean = [float(np.mean(part)) if part else float("nan") for part in (last, first)]
        return {"final_return": mean[0], "initial_return": mean[1]}


class EpisodeRecorder(_Episodes):
    """A VectorEnv proxy that records the episodes that end and its CPU time in `env.step`."""

    def __init__(self, env: Any) -> None:
        """Wrap `env`; every other attribute is the env's."""
        super().__init__()
        self.env, self.env_cpu = env, 0.0
        self._returns = np.zeros(env.num_envs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Reset every copy."""
        self._returns[:] = 0.0
        return self.env.reset(seed=seed)

    def step(self, actions: np.ndarray) -> Any:
        """Step and record the team return of the episodes that end."""
        started = time.process_time()
        result = self.env.step(actions)
        self.env_cpu += time.process_time() - started
        self.steps += self.env.num_envs
        self._returns += result.reward.sum(axis=1)
        done = (result.terminated | result.truncated).any(axis=1)
        self.episodes += [(self.steps, float(self._returns[copy])) for copy in np.flatnonzero(done)]
        self._returns[done] = 0.0
        return result


class ParallelEpisodeRecorder(_Episodes):
    """A PettingZoo ParallelEnv proxy that records the episodes that end.

    skrl's `PettingZooWrapper` reads agents and spaces from `unwrapped` (the wrapped env's)
    and calls `reset`, `step`, `state`, `render` and `close` on this layer.
    """

    def __init__(self, env: Any) -> None:
        """Wrap the ParallelEnv `env`."""
        super().__init__()
        self.env, self._return = env, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        """Reset the wrapped env (an episode cut short is not recorded)."""
        self._return = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> Any:
        """Step and record the team return when the episode ends."""
        out = self.env.step(actions)
        self.steps += 1
        self._return += float(sum(out[1].values()))
        if all(out[2][a] or out[3][a] for a in out[2]):
            self.episodes.append((self.steps, self._return))
            self._return = 0.0
        return out


def _skrl_wrapper(env: EpisodeRecorder, *, continuous: bool = False) -> Any:
    """A skrl MultiAgentEnvWrapper over our VectorEnv (dicts of [E, ...] tensors per agent).

    `continuous`: the agents act in the env's Box (`[E, 5]` float tensors per agent, the
    registry's space of the task), else in Discrete(n_actions) (`[E, 1]` integers).
    """
    import gymnasium
    from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper

    from src.algos.actions import agent_action_spaces, shared_action_space

    obs_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    act_space: Any = gymnasium.spaces.Discrete(env.n_actions)
    if continuous:
        if not getattr(env, "continuous_actions", False):
            raise ValueError(f"env {env.name} has Discrete actions; build it continuous_actions")
        act_space = getattr(env, "action_space", None)
        if not isinstance(act_space, gymnasium.spaces.Box):
            spaces = agent_action_spaces(env.name, {"n_agents": env.n_agents, **CONTINUOUS})
            act_space = shared_action_space(spaces, env=env.name)
    agents = list(env.agents)

    def per_agent(array: np.ndarray, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return {
            u: torch.as_tensor(array[:, i], dtype=dtype).view(-1, 1) for i, u in enumerate(agents)
        }

    class VectorEnvWrapper(MultiAgentEnvWrapper):
        num_envs = property(lambda self: env.num_envs)
        possible_agents = property(lambda self: agents)
        agents = property(lambda self: agents)
        observation_spaces = property(lambda self: dict.fromkeys(agents, obs_space))
        action_spaces = property(lambda self: dict.fromkeys(agents, act_space))
        state_spaces = property(lambda self: dict.fromkeys(agents))

        def _split(self, obs: np.ndarray) -> dict[str, torch.Tensor]:
            return {uid: torch.from_numpy(obs[:, i]) for i, uid in enumerate(agents)}

        def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
            return self._split(env.reset(seed=self._seed)), {}

        def step(self, actions: dict[str, torch.Tensor]) -> tuple[Any, Any, Any, Any, Any]:
            if continuous:  # [E, A, *shape] in the Box's dtype (the env clips to the Box)
                joint = torch.stack([actions[uid] for uid in agents], dim=1)
                result = env.step(joint.numpy().astype(act_space.dtype))
            else:
                joint = torch.cat([actions[uid].view(-1, 1) for uid in agents], dim=1)
                result = env.step(joint.numpy().astype(np.int64))
            return (
                self._split(result.obs),
                per_agent(result.reward, torch.float32),
                per_agent(result.terminated, torch.bool),
                per_agent(result.truncated, torch.bool),
                {},
            )

        def state(self) -> dict[str, None]:
            return dict.fromkeys(agents)

        def render(self, *args: Any, **kwargs: Any) -> None:
            return None

        def close(self) -> None:
            env.close()

    wrapper = VectorEnvWrapper(env)
    wrapper._seed = None
    return wrapper


def run_skrl(
    env_name: str,
    *,
    seed: int,
    steps: int,
    n_agents: int,
    backend: str = "native",
    continuous: bool = False,
) -> dict[str, float]:
    """Train skrl's IPPO for `steps` env steps; throughput and returns.

    `backend` "native": skrl over our VectorEnv `env_name` with `num_envs` copies; "mpe2": skrl
    over one mpe2 `simple_spread_v3` parallel env through skrl's PettingZoo wrapper, with
    `rollouts * num_envs` rollout steps per update (the same transitions per update).
    `continuous`: Box actions and a Gaussian policy (`GaussianMixin`, `clip_actions=True`, a
    state-independent log-std starting at LOG_STD_INIT), else a categorical one.
    """
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model
    from skrl.multi_agents.torch.base import ExperimentCfg
    from skrl.multi_agents.torch.ippo import IPPO as SkrlIPPO
    from skrl.multi_agents.torch.ippo import IPPO_CFG
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    set_seed(seed)
    rollouts = HYPER["rollouts"]
    recorder: EpisodeRecorder | ParallelEpisodeRecorder
    if backend == "native":
        e = HYPER["num_envs"]
        params = CONTINUOUS if continuous else {}
        recorder = EpisodeRecorder(
            make_vector_env(env_name, num_envs=e, seed=seed, n_agents=n_agents, **params)
        )
        env = _skrl_wrapper(recorder, continuous=continuous)
        env._seed = seed
    elif backend == "mpe2" and env_name == "spread":
        from mpe2 import simple_spread_v3
        from skrl.envs.wrappers.torch import wrap_env

        e, rollouts = 1, rollouts * HYPER["num_envs"]
        recorder = ParallelEpisodeRecorder(
            simple_spread_v3.parallel_env(N=n_agents, max_cycles=25, continuous_actions=continuous)
        )
        env = wrap_env(recorder, wrapper="pettingzoo")  # resets with skrl's seed (set_seed)
    else:
        raise ValueError(f"backend must be 'native', or 'mpe2' on spread, got {backend!r}")

    def body(in_dim: int, out_dim: int) -> torch.nn.Sequential:
        layers: list[torch.nn.Module] = []
        for width in HYPER["hidden_sizes"]:
            layers += [torch.nn.Linear(in_dim, width), torch.nn.Tanh()]
            in_dim = width
        return torch.nn.Sequential(*layers, torch.nn.Linear(in_dim, out_dim))

    class Policy(CategoricalMixin, Model):
        def __init__(self, obs_space: Any, act_space: Any) -> None:
            Model.__init__(self, observation_space=obs_space, action_space=act_space, device="cpu")
            CategoricalMixin.__init__(self, unnormalized_log_prob=True)
            self.net = body(self.num_observations, act_space.n)

        def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[Any, dict]:
            return self.net(inputs["observations"]), {}

    class GaussianPolicy(GaussianMixin, Model):
        def __init__(self, obs_space: Any, act_space: Any) -> None:
            Model.__init__(self, observation_space=obs_space, action_space=act_space, device="cpu")
            GaussianMixin.__init__(self, clip_actions=True, reduction="sum")
            self.net = body(self.num_observations, self.num_actions)
            self.log_std = torch.nn.Parameter(torch.full((self.num_actions,), LOG_STD_INIT))

        def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[Any, dict]:
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Value(DeterministicMixin, Model):
        def __init__(self, obs_space: Any, act_space: Any) -> None:
            Model.__init__(self, observation_space=obs_space, action_space=act_space, device="cpu")
            DeterministicMixin.__init__(self)
            self.net = body(self.num_observations, 1)

        def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[Any, dict]:
            return self.net(inputs["observations"]), {}

    models, memories = {}, {}
    for uid in env.possible_agents:
        obs_space, act_space = env.observation_spaces[uid], env.action_spaces[uid]
        policy = (GaussianPolicy if continuous else Policy)(obs_space, act_space)
        models[uid] = {"policy": policy, "value": Value(obs_space, act_space)}
        memories[uid] = RandomMemory(memory_size=rollouts, num_envs=e, device="cpu")
    cfg = {
        "rollouts": rollouts,
        "learning_epochs": HYPER["learning_epochs"],
        "mini_batches": HYPER["mini_batches"],
        "learning_rate": HYPER["learning_rate"],
        "discount_factor": HYPER["gamma"],
        "gae_lambda": HYPER["gae_lambda"],
        "ratio_clip": HYPER["clip_coef"],
        "value_clip": 0.0,
        "entropy_loss_scale": HYPER["ent_coef"],
        "value_loss_scale": 0.5 * HYPER["vf_coef"],
        "grad_norm_clip": HYPER["max_grad_norm"],
        "time_limit_bootstrap": True,
    }
    # skrl 2.1.1's config expansion rejects the empty-dict defaults of the *_kwargs fields
    # (an empty key set is a strict subset of the agents), so give them per agent.
    for kind in ("learning_rate_scheduler", "observation_preprocessor", "state_preprocessor"):
        cfg[f"{kind}_kwargs"] = {uid: {} for uid in env.possible_agents}
    cfg["value_preprocessor_kwargs"] = {uid: {} for uid in env.possible_agents}
    with tempfile.TemporaryDirectory() as logdir:
        experiment = ExperimentCfg(directory=logdir, write_interval=0, checkpoint_interval=0)
        agent = SkrlIPPO(
            possible_agents=env.possible_agents,
            models=models,
            memories=memories,
            observation_spaces=env.observation_spaces,
            state_spaces=env.state_spaces,
            action_spaces=env.action_spaces,
            device="cpu",
            cfg=IPPO_CFG(**cfg, experiment=experiment),
        )
        trainer = SequentialTrainer(
            env=env,
            agents=agent,
            cfg={
                "timesteps": steps // e,
                "headless": True,
                "disable_progressbar": True,
                "close_environment_at_exit": False,
            },
        )
        clock = Clock()
        trainer.train()
    return clock.rates(recorder.steps) | recorder.returns()


def run_ours(
    env_name: str, *, seed: int, steps: int, n_agents: int, num_envs: int, continuous: bool = False
) -> dict[str, Any]:
    """Train our IPPO for `steps` env steps; throughput, returns and where the CPU time went.

    `continuous`: `env_name` with CONTINUOUS, so Box actions and our Gaussian policy.
    """
    params = CONTINUOUS if continuous else {}
    algo_params = {k: HYPER[k] for k in ("gamma", "gae_lambda", "clip_coef", "ent_coef")}
    algo_params |= {k: HYPER[k] for k in ("vf_coef", "max_grad_norm")}
    config = make_run_config(
        env_name=env_name,
        algo="ippo",
        num_envs=num_envs,
        n_agents=n_agents,
        timesteps=steps,
        rollouts=HYPER["rollouts"],
        learning_epochs=HYPER["learning_epochs"],
        mini_batches=HYPER["mini_batches"],
        learning_rate=HYPER["learning_rate"],
        seed_offset=seed,
        env_params=params,
        algo_params={**algo_params, "hidden_sizes": list(HYPER["hidden_sizes"])},
    )
    recorder = EpisodeRecorder(
        make_vector_env(env_name, num_envs=num_envs, seed=seed, n_agents=n_agents, **params)
    )
    trainer = build_trainer(config, recorder)
    if continuous and not torch.all(trainer.net.log_std == LOG_STD_INIT):
        raise RuntimeError(f"our Gaussian policy does not start at log-std {LOG_STD_INIT}")
    # CPU time per phase, measured around the trainer's own methods (not changed here).
    split = CpuSplit()
    for name in ("collect_rollout", "compute_advantages", "update_policy"):
        split.wrap(trainer, name)
    clock = Clock()
    trainer.train(progress=False)
    rates = clock.rates(recorder.steps)
    per_step = {name: 1e6 * cpu / recorder.steps for name, cpu in split.snapshot().items()}
    env_us = 1e6 * recorder.env_cpu / recorder.steps
    breakdown = {
        "env step": env_us,
        "acting and bookkeeping": per_step["collect_rollout"] - env_us,
        "advantages": per_step["compute_advantages"],
        "PPO update": per_step["update_policy"],
    }
    breakdown["rest"] = 1e6 / rates["steps_per_cpu_s"] - sum(breakdown.values())
    return rates | recorder.returns() | {"cpu_us_per_step": breakdown}


def run_bare_mpe2(*, steps: int, n_agents: int) -> dict[str, float]:
    """Env-steps/s of one bare mpe2 `simple_spread_v3` parallel env with random actions."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(N=n_agents, max_cycles=25, continuous_actions=False)
    step = dict_loop([env])
    actions = np.random.default_rng(0).integers(0, 5, size=(steps, 1, n_agents)).tolist()
    clock = Clock()
    for row in actions:
        step(row)
    rates = clock.rates(steps)
    env.close()
    return rates


def run_bare(
    env_name: str, *, steps: int, n_agents: int, num_envs: int, continuous: bool = False
) -> dict[str, float]:
    """Env-steps/s of the vector env alone, stepping uniformly random actions (`continuous`:
    `env_name` with CONTINUOUS, actions uniform in [0, 1])."""
    params = CONTINUOUS if continuous else {}
    env = make_vector_env(env_name, num_envs=num_envs, seed=0, n_agents=n_agents, **params)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    shape = (steps // num_envs, num_envs, n_agents)
    if continuous:
        actions = rng.random(size=(*shape, env.n_actions), dtype=np.float32)
    else:
        actions = rng.integers(0, env.n_actions, size=shape)
    clock = Clock()
    for row in actions:
        env.step(row)
    rates = clock.rates(len(actions) * num_envs)
    env.close()
    return rates


# ------------------------------------------------------------------ the comparison


def _mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t interval."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def _difference_ci(ours: Sequence[float], skrl: Sequence[float]) -> tuple[float, float, float]:
    """Welch 95% interval of mean(ours) - mean(skrl)."""
    from scipy import stats

    a, b = np.asarray(ours, float), np.asarray(skrl, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff, se = float(a.mean() - b.mean()), float(np.sqrt(va + vb))
    if se == 0.0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df) * se)
    return diff, diff - half, diff + half


def _ratio_ci(ours: Sequence[float], skrl: Sequence[float]) -> tuple[float, float]:
    """95% interval of ours / skrl from the runs of each seed (run back to back): the Student-t
    interval of the mean log ratio, exponentiated."""
    mean, half = _mean_ci(np.log(np.asarray(ours, float) / np.asarray(skrl, float)))
    return float(np.exp(mean - half)), float(np.exp(mean + half))


def _training_runs(
    variants: Sequence[str], *, steps: int, seeds: int, continuous: bool
) -> dict[str, list[dict[str, Any]]]:
    """`seeds` runs of every variant of `steps` env steps on spread, after a discarded warm-up
    run each (imports, allocator, first-call costs); the order rotates with the seed, so that a
    change in machine load hits every variant alike."""

    def run(variant: str, seed: int, steps: int) -> dict[str, Any]:
        kwargs = {"seed": seed, "steps": steps, "n_agents": AGENTS, "continuous": continuous}
        if variant == "ours":
            return run_ours("spread", num_envs=HYPER["num_envs"], **kwargs)
        return run_skrl("spread", backend="mpe2" if variant == "skrl_mpe2" else "native", **kwargs)

    for variant in variants:
        run(variant, 99, HYPER["num_envs"] * HYPER["rollouts"])
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    for seed in range(seeds):
        shift = seed % len(variants)
        for variant in (*variants[shift:], *variants[:shift]):
            runs[variant].append(run(variant, seed, steps))
    return runs


def compare(actions: str, *, steps: int, seeds: int, grid_steps: int) -> dict[str, Any]:
    """Every measurement of one kind of `actions` ("discrete": also skrl on mpe2 and our IPPO
    on hazard_grid); the results as a plain dict."""
    torch.set_num_threads(1)
    clock = Clock()
    continuous = actions == "continuous"
    variants = VARIANTS[actions]
    runs = _training_runs(variants, steps=steps, seeds=seeds, continuous=continuous)
    native = run_bare(
        "spread", steps=steps, n_agents=AGENTS, num_envs=HYPER["num_envs"], continuous=continuous
    )
    bare = dict.fromkeys(variants, native)
    result: dict[str, Any] = {"env_steps_per_run": steps, "seeds": seeds}
    if continuous:
        result["log_std_init"] = LOG_STD_INIT
    else:
        bare["skrl_mpe2"] = run_bare_mpe2(steps=max(steps // 8, 1), n_agents=AGENTS)
        grid = {"steps": grid_steps, "n_agents": 2, "num_envs": 64}
        ours = run_ours("hazard_grid", seed=0, **grid)
        result["hazard_grid"] = {
            "bare": run_bare("hazard_grid", **grid),
            "ours": {k: ours[k] for k in ("steps_per_s", "steps_per_cpu_s")},
        }
    others = variants[1:]
    for rate in CLOCKS:
        rates = {v: [r[rate] for r in runs[v]] for v in variants}
        means = {v: float(np.mean(values)) for v, values in rates.items()}
        result[rate] = {
            **rates,
            "bare": {v: bare[v][rate] for v in variants},
            "speedup_vs": {v: means["ours"] / means[v] for v in others},
            "speedup_ci95": {v: list(_ratio_ci(rates["ours"], rates[v])) for v in others},
            # Learning cost per env step on top of the env itself (microseconds).
            "overhead_us": {v: 1e6 * (1 / means[v] - 1 / bare[v][rate]) for v in variants},
        }
    for key in ("final_return", "initial_return"):
        result[key] = {v: [r[key] for r in runs[v]] for v in variants}
    result["return_vs"] = {}
    for other in others:
        diff, low, high = _difference_ci(
            result["final_return"]["ours"], result["final_return"][other]
        )
        result["return_vs"][other] = {
            "difference": diff,
            "ci95": [low, high],
            "ours_not_worse": high >= 0.0,
        }
    breakdowns = [r["cpu_us_per_step"] for r in runs["ours"]]
    result["ours_cpu_us_per_step"] = {
        k: float(np.mean([b[k] for b in breakdowns])) for k in breakdowns[0]
    }
    hyper = {**HYPER, "hidden_sizes": list(HYPER["hidden_sizes"])}
    return result | {"hyperparameters": hyper, "machine": clock.machine()}


# ------------------------------------------------------------------ the section


def _ci(values: Sequence[float], spec: str) -> str:
    """`mean ± half-width` of the 95% interval, both formatted with `spec`."""
    mean, half = _mean_ci(values)
    return f"{mean:{spec}} ± {half:{spec}}"


def _setting(c: dict[str, Any]) -> str:
    """The shared settings and the budget of a comparison `c`, in words."""
    h = c["hyperparameters"]
    return (
        f"(rollouts {h['rollouts']} x {h['num_envs']} copies per update, {h['learning_epochs']} "
        f"epochs, {h['mini_batches']} minibatches, lr {h['learning_rate']}, hidden "
        f"{tuple(h['hidden_sizes'])}, entropy {h['ent_coef']}), one process, torch threads 1, "
        f"{c['seeds']} seeds of {c['env_steps_per_run']} env steps each."
    )


def _machine(m: dict[str, Any]) -> str:
    return (
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}; load average "
        f"{m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after (shared with other "
        "jobs, so per-CPU-second rates, which count only this process's work, are the "
        "steadier comparison; wall-clock rates are given too)."
    )


def _rate_rows(c: dict[str, Any], variants: Sequence[str], rate: str) -> list[list[str]]:
    """The rows of one clock's rates: every variant's, then ours over the others'."""
    r, label = c[rate], CLOCKS[rate]
    rows = [[f"env-steps {label} (mean ± 95% CI)", *(_ci(r[v], ",.0f") for v in variants)]]
    if len(variants) > 2:
        speedups = (f"{r['speedup_vs'][v]:.2f}x" for v in variants[1:])
        return [*rows, [f"ours / this variant, {label}", "1.00x", *speedups]]
    low, high = r["speedup_ci95"]["skrl"]
    ratio = f"{r['speedup_vs']['skrl']:.2f}x [{low:.2f}, {high:.2f}]"
    label += " (ratio of means [95% CI from the seeds' ratios])"
    return [*rows, [f"ours / skrl, {label}", "", ratio]]


def _bare_row(c: dict[str, Any], variants: Sequence[str], rate: str) -> list[str]:
    """The bare env loop's rate under each variant."""
    bare = (f"{c[rate]['bare'][v]:,.0f}" for v in variants)
    return [f"bare env loop (random actions), env-steps {CLOCKS[rate]}", *bare]


def _overhead_row(c: dict[str, Any], variants: Sequence[str]) -> list[str]:
    overhead = c["steps_per_cpu_s"]["overhead_us"]
    label = "learning cost beyond the env, µs of CPU per env step"
    return [label, *(f"{overhead[v]:,.0f}" for v in variants)]


def _breakdown(c: dict[str, Any]) -> str:
    breakdown = c["ours_cpu_us_per_step"]
    return (
        f"Where our CPU time goes, µs per env step (mean over the seeds; "
        f"{sum(breakdown.values()):.0f} in total): "
        + ", ".join(f"{key} {value:.1f}" for key, value in breakdown.items())
        + "."
    )


def _welch(vs: dict[str, Any]) -> str:
    return f"{vs['difference']:.1f} [{vs['ci95'][0]:.1f}, {vs['ci95'][1]:.1f}]"


def render_discrete(c: dict[str, Any]) -> str:
    """The Discrete comparison: skrl on the native env and on mpe2, and hazard_grid."""
    variants, cpu, g = VARIANTS["discrete"], c["steps_per_cpu_s"], c["hazard_grid"]
    h = c["hyperparameters"]
    rows = [
        row
        for rate in CLOCKS
        for row in [*_rate_rows(c, variants, rate), _bare_row(c, variants, rate)]
    ]
    rows.append(_overhead_row(c, variants))
    rows.append(
        ["final team return (mean ± 95% CI)", *(_ci(c["final_return"][v], ".1f") for v in variants)]
    )
    rows.append(
        ["ours - this variant, final return (Welch 95% CI)", ""]
        + [_welch(c["return_vs"][v]) for v in variants[1:]]
    )
    fastest = min(variants[1:], key=lambda v: cpu["speedup_vs"][v])
    speedup = cpu["speedup_vs"][fastest]
    bare_us = 1e6 / cpu["bare"]["ours"]
    fraction = float(np.mean(cpu["ours"])) / cpu["bare"]["ours"]
    update_us = c["ours_cpu_us_per_step"]["PPO update"]
    not_worse = all(vs["ours_not_worse"] for vs in c["return_vs"].values())
    why = (
        f": the native env steps {h['num_envs']} copies in {bare_us:.1f} µs of CPU per env step, "
        f"so the {update_us:.0f} µs of the PPO update alone ({h['learning_epochs']} x "
        f"{h['mini_batches']} Adam steps of {tuple(h['hidden_sizes'])} MLPs per "
        f"{h['rollouts'] * h['num_envs']} env steps) exceed that budget"
    )
    return "\n".join(
        [
            "`python -m benchmarks.algos` (part of `make bench`): our IPPO and skrl 2.1.1's IPPO "
            f"on `spread` (3 agents), same hyperparameters {_setting(c)} `spread` is the native "
            "batched env (seed for seed mpe2's `simple_spread_v3`). skrl runs on it through a "
            "VectorEnv wrapper, and on mpe2 itself as its users run PettingZoo tasks: one "
            "`simple_spread_v3.parallel_env` behind skrl's `PettingZooWrapper` (skrl does not "
            f"vectorise PettingZoo envs), with {h['rollouts'] * h['num_envs']} rollout steps per "
            "update so that every variant learns from the same transitions per update. "
            "Throughput counts whole training (collection and updates); skrl uses its canonical "
            "per-agent networks, ours one shared network with an agent-id one-hot.",
            "",
            _machine(c["machine"]),
            "",
            *table("measure | " + " | ".join(LABELS[v] for v in variants), "lrrr", rows),
            "",
            _breakdown(c) + f" The PPO update alone costs {update_us / bare_us:.1f}x the bare "
            "env's time per env step.",
            "",
            *table(
                "hazard_grid, 64 copies | ours | bare env loop",
                "lrr",
                [
                    [f"env-steps {label}", f"{g['ours'][rate]:,.0f}", f"{g['bare'][rate]:,.0f}"]
                    for rate, label in CLOCKS.items()
                ],
            ),
            "",
            "Targets (CPU-second rates):",
            "",
            f"- throughput >= 3x the faster skrl variant ({LABELS[fastest]}): {speedup:.2f}x, "
            f"{met(speedup >= 3, 'not met')}.",
            f"- >= 0.5x the bare native env loop: {fraction:.2f}x, "
            f"{met(fraction >= 0.5, 'not met')}{'' if fraction >= 0.5 else why}.",
            "- final return not worse than skrl's (Welch 95% interval of ours - skrl reaches 0, "
            f"against both variants): {'yes' if not_worse else 'no'}. Final return = mean team "
            f"return of the episodes ending in the last {TAIL:.0%} of each run, recorded "
            "identically for all.",
        ]
    )


def render_continuous(c: dict[str, Any]) -> str:
    """The Box-action comparison: ours and skrl's Gaussian policies on the native env."""
    variants = VARIANTS["continuous"]
    rows = [row for rate in CLOCKS for row in _rate_rows(c, variants, rate)]
    rows += [_bare_row(c, variants, "steps_per_cpu_s"), _overhead_row(c, variants)]
    for key, label in (
        ("initial_return", f"team return, first {TAIL:.0%} of each run"),
        ("final_return", f"final team return, last {TAIL:.0%} of each run"),
    ):
        rows.append([f"{label} (mean ± 95% CI)", *(_ci(c[key][v], ".1f") for v in variants)])
    rows.append(["ours - skrl, final return (Welch 95% CI)", "", _welch(c["return_vs"]["skrl"])])
    speedup = c["steps_per_cpu_s"]["speedup_vs"]["skrl"]
    wall = c["steps_per_s"]["speedup_vs"]["skrl"]
    learnt = (
        f"{v} {np.mean(c['final_return'][v]) - np.mean(c['initial_return'][v]):+.1f}"
        for v in variants
    )
    return "\n".join(
        [
            "### Box actions (Gaussian policies)",
            "",
            "`python -m benchmarks.algos --actions continuous` (part of `make bench`): our IPPO "
            "and skrl 2.1.1's IPPO on `spread` with `continuous_actions: true` (3 agents, actions "
            "[E, A, 5] in [0, 1]), both on the native env (skrl through the same VectorEnv "
            f"wrapper), same hyperparameters as above {_setting(c)} Both policies are diagonal "
            "Gaussians with a state-independent log-std, "
            f"{c['log_std_init']:g} at first on both sides (std {np.exp(c['log_std_init']):g}). "
            "Ours learns from its raw samples and clips them to the Box at the env "
            "(docs/design.md, section 6.1); skrl's `GaussianMixin` with `clip_actions=True` clips "
            "its samples to the Box and learns from the clipped ones, as skrl does. skrl uses its "
            "canonical per-agent networks, ours one shared network with an agent-id one-hot.",
            "",
            _machine(c["machine"]),
            "",
            *table("measure | ours (native spread, Box) | skrl (native spread, Box)", "lrr", rows),
            "",
            _breakdown(c),
            "",
            f"Learning over the run (final team return minus that of the first {TAIL:.0%}, mean "
            f"over the seeds): {', '.join(learnt)}.",
            "",
            "Targets (CPU-second rates; wall-second rates in parentheses):",
            "",
            f"- throughput >= 1x skrl's at equal settings: {speedup:.2f}x ({wall:.2f}x), "
            f"{met(speedup >= 1, 'not met')}.",
            "- final return not worse than skrl's (Welch 95% interval of ours - skrl reaches 0): "
            f"{'yes' if c['return_vs']['skrl']['ours_not_worse'] else 'no'}.",
        ]
    )


def render_markdown(results: dict[str, Any]) -> str:
    """The `## IPPO vs skrl` section: the Discrete comparison, then the Box one (each when
    `results` holds it)."""
    parts = ["## IPPO vs skrl"]
    if "discrete" in results:
        parts.append(render_discrete(results["discrete"]))
    if "continuous" in results:
        parts.append(render_continuous(results["continuous"]))
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None, *, out: Path = OUT, path: Path = BENCHMARKS_MD) -> int:
    """Run the comparisons, save JSON, update BENCHMARKS.md; `argv` None means defaults
    (`benchmarks.run_all` calls `main()`). `out` and `path`: where the results and section go."""
    parser = arguments(__doc__, quick=True)
    parser.add_argument("--actions", choices=(*ACTIONS, "both"), default="both")
    parser.add_argument("--steps", type=positive_int, default=8 * 64 * 80, help="per Discrete run")
    parser.add_argument(
        "--continuous-steps", type=positive_int, default=8 * 64 * 160, help="per Box run"
    )
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--grid-steps", type=positive_int, default=64 * 64 * 8)
    args = parser.parse_args(list(argv) if argv is not None else [])
    if args.quick:
        args.steps = args.continuous_steps = 8 * 64 * 2
        args.seeds, args.grid_steps = 2, 64 * 64 * 2
    budget = {"discrete": args.steps, "continuous": args.continuous_steps}
    saved_path = out / f"algos{'_quick' if args.quick else ''}.json"
    results = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    for actions in ACTIONS if args.actions == "both" else (args.actions,):
        results[actions] = compare(
            actions, steps=budget[actions], seeds=args.seeds, grid_steps=args.grid_steps
        )
    if args.quick or set(ACTIONS) <= set(results):
        save_results(
            "algos", results, render_markdown(results), quick=args.quick, out=out, path=path
        )
        return 0
    # Results of one kind of actions alone leave the section as it is (it would lose the other
    # kind's figures).
    print(render_markdown(results))
    write_text(json.dumps(results, indent=2, default=float) + "\n", out / "algos.json")
    missing = next(kind for kind in ACTIONS if kind not in results)
    print(f"{path.name} left as it is: {saved_path} has no results of {missing} actions yet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
