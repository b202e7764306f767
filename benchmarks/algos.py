"""IPPO vs skrl 2.1.1's IPPO, side by side in one process on the same machine.

Measures, on `spread` (3 agents) with the same hyperparameters and network size:

- env-steps/s of the bare vector-env loop (random actions: the physical limit of the task),
  of our IPPO and of skrl's IPPO (training throughput, updates included);
- the final mean team return of all over several seeds at equal env steps: the mean over
  the episodes that end in the last 20% of each run, recorded by the same bookkeeping around the
  env for every variant, so they are measured identically;

and the training throughput of our IPPO on `hazard_grid` with 64 copies.

`spread` is the native batched env (`src.envs.spread_core`), seed for seed mpe2's
`simple_spread_v3`. skrl runs twice:

- on mpe2 itself, as skrl's users run PettingZoo tasks: one `simple_spread_v3.parallel_env`
  behind skrl's own `PettingZooWrapper` (skrl has no vectorisation of PettingZoo envs), with
  `rollouts * num_envs` rollout steps per update so that every variant learns from the same
  number of transitions per update (same minibatch size, same updates per env step);
- on our native env with `num_envs` copies, fed through a `MultiAgentEnvWrapper` over the
  VectorEnv.

skrl runs its canonical IPPO: one policy and one value MLP per agent (same hidden sizes as
ours). Its loss weights are set to equal ours: entropy 0.01, value loss 0.25 * MSE (= our
0.5 * 0.5 * squared error), no value clipping, ratio clip 0.2, gradient clip 0.5, truncation
bootstrapping on.

Run: `python -m benchmarks.algos` (or `make bench`); `--quick` for a smoke run. Results go to
`benchmarks/out/algos.json` and the section between the algos markers of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import save_results, write_section
from src.algos.train import build_trainer
from src.config.run import make_run_config
from src.envs.registry import make_vector_env

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"

# Shared hyperparameters of both implementations.
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
TAIL = 0.2  # fraction of the run whose finished episodes give the final return


class _Clock:
    """Wall time and this process's CPU time since construction.

    The machine is shared, so wall-clock rates move with other jobs' load; with one torch
    thread, CPU time counts only this process's work and is the steadier comparison.
    """

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, steps: int) -> dict[str, float]:
        """Env-steps per wall second and per CPU second."""
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        return {"steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


class EpisodeRecorder:
    """A VectorEnv proxy that records (global step, team return) of every finished episode."""

    def __init__(self, env: Any) -> None:
        """Wrap `env`; every VectorEnv attribute the trainers use is forwarded explicitly."""
        self.env = env
        self.name, self.num_envs, self.n_agents = env.name, env.num_envs, env.n_agents
        self.agents, self.obs_dim, self.n_actions = env.agents, env.obs_dim, env.n_actions
        self.max_steps = env.max_steps
        self.steps = 0
        self.episodes: list[tuple[int, float]] = []
        self.env_cpu = 0.0  # CPU seconds spent inside env.step
        self._returns = np.zeros(env.num_envs)

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Reset every copy."""
        self._returns[:] = 0.0
        return self.env.reset(seed=seed)

    def step(self, actions: np.ndarray) -> Any:
        """Step and record the team return of the episodes that end."""
        started = time.process_time()
        result = self.env.step(actions)
        self.env_cpu += time.process_time() - started
        self.steps += self.num_envs
        self._returns += result.reward.sum(axis=1)
        done = (result.terminated | result.truncated).any(axis=1)
        for copy in np.flatnonzero(done):
            self.episodes.append((self.steps, float(self._returns[copy])))
        self._returns[done] = 0.0
        return result

    def get_state(self) -> dict[str, Any]:
        """Forwarded."""
        return self.env.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Forwarded."""
        self.env.set_state(state)

    def render(self, index: int = 0) -> np.ndarray:
        """Forwarded."""
        return self.env.render(index)

    def close(self) -> None:
        """Forwarded."""
        self.env.close()

    def final_return(self) -> float:
        """Mean team return of the episodes that ended in the last TAIL of the run."""
        return _final_return(self.episodes, self.steps)


def _final_return(episodes: Sequence[tuple[int, float]], steps: int) -> float:
    """Mean return of the `(end step, return)` episodes that ended in the last TAIL of `steps`."""
    cutoff = (1.0 - TAIL) * steps
    tail = [ret for step, ret in episodes if step > cutoff]
    return float(np.mean(tail)) if tail else float("nan")


class ParallelEpisodeRecorder:
    """A PettingZoo ParallelEnv proxy that records (env step, team return) of every episode.

    skrl's `PettingZooWrapper` reads agents and spaces from `unwrapped` (forwarded to the
    wrapped env) and calls `reset`, `step`, `state`, `render` and `close` on this layer.
    """

    def __init__(self, env: Any) -> None:
        """Wrap the ParallelEnv `env`."""
        self.env = env
        self.steps = 0
        self.episodes: list[tuple[int, float]] = []
        self._return = 0.0

    @property
    def unwrapped(self) -> Any:
        """The wrapped env's base env."""
        return self.env.unwrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        """Reset the wrapped env (an episode cut short is not recorded)."""
        self._return = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> Any:
        """Step and record the team return when the episode ends."""
        out = self.env.step(actions)
        rewards, terminations, truncations = out[1], out[2], out[3]
        self.steps += 1
        self._return += float(sum(rewards.values()))
        if all(terminations[a] or truncations[a] for a in terminations):
            self.episodes.append((self.steps, self._return))
            self._return = 0.0
        return out

    def state(self) -> np.ndarray:
        """Forwarded."""
        return self.env.state()

    def render(self) -> Any:
        """Forwarded."""
        return self.env.render()

    def close(self) -> None:
        """Forwarded."""
        self.env.close()

    def final_return(self) -> float:
        """Mean team return of the episodes that ended in the last TAIL of the run."""
        return _final_return(self.episodes, self.steps)


def _skrl_wrapper(env: EpisodeRecorder) -> Any:
    """A skrl MultiAgentEnvWrapper over our VectorEnv (dicts of [E, ...] tensors per agent)."""
    import gymnasium
    from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper

    obs_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    act_space = gymnasium.spaces.Discrete(env.n_actions)

    class VectorEnvWrapper(MultiAgentEnvWrapper):
        def __init__(self) -> None:
            super().__init__(env)
            self._agents = list(env.agents)

        @property
        def num_envs(self) -> int:
            return env.num_envs

        @property
        def possible_agents(self) -> list[str]:
            return self._agents

        @property
        def agents(self) -> list[str]:
            return self._agents

        @property
        def observation_spaces(self) -> dict[str, Any]:
            return dict.fromkeys(self._agents, obs_space)

        @property
        def action_spaces(self) -> dict[str, Any]:
            return dict.fromkeys(self._agents, act_space)

        @property
        def state_spaces(self) -> dict[str, Any]:
            return dict.fromkeys(self._agents)

        def _split(self, obs: np.ndarray) -> dict[str, torch.Tensor]:
            return {uid: torch.from_numpy(obs[:, i]) for i, uid in enumerate(self._agents)}

        def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
            return self._split(env.reset(seed=self._seed)), {}

        def step(self, actions: dict[str, torch.Tensor]) -> tuple[Any, Any, Any, Any, Any]:
            joint = torch.cat([actions[uid].view(-1, 1) for uid in self._agents], dim=1)
            result = env.step(joint.numpy().astype(np.int64))

            def per_agent(array: np.ndarray, dtype: torch.dtype) -> dict[str, torch.Tensor]:
                return {
                    uid: torch.as_tensor(array[:, i], dtype=dtype).view(-1, 1)
                    for i, uid in enumerate(self._agents)
                }

            return (
                self._split(result.obs),
                per_agent(result.reward, torch.float32),
                per_agent(result.terminated, torch.bool),
                per_agent(result.truncated, torch.bool),
                {},
            )

        def state(self) -> dict[str, None]:
            return dict.fromkeys(self._agents)

        def render(self, *args: Any, **kwargs: Any) -> None:
            return None

        def close(self) -> None:
            env.close()

    wrapper = VectorEnvWrapper()
    wrapper._seed = None
    return wrapper


def run_skrl(
    env_name: str, *, seed: int, steps: int, n_agents: int, backend: str = "native"
) -> dict[str, float]:
    """Train skrl's IPPO for `steps` env steps; throughput and final return.

    `backend` "native": skrl over our VectorEnv `env_name` with `num_envs` copies; "mpe2": skrl
    over one mpe2 `simple_spread_v3` parallel env through skrl's PettingZoo wrapper, with
    `rollouts * num_envs` rollout steps per update (the same transitions per update).
    """
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
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
        recorder = EpisodeRecorder(
            make_vector_env(env_name, num_envs=e, seed=seed, n_agents=n_agents)
        )
        env = _skrl_wrapper(recorder)
        env._seed = seed
    elif backend == "mpe2":
        from mpe2 import simple_spread_v3
        from skrl.envs.wrappers.torch import wrap_env

        if env_name != "spread":
            raise ValueError(f"backend 'mpe2' runs spread only, got env {env_name!r}")
        e = 1
        rollouts *= HYPER["num_envs"]
        recorder = ParallelEpisodeRecorder(
            simple_spread_v3.parallel_env(N=n_agents, max_cycles=25, continuous_actions=False)
        )
        env = wrap_env(recorder, wrapper="pettingzoo")  # resets with skrl's seed (set_seed)
    else:
        raise ValueError(f"backend must be 'native' or 'mpe2', got {backend!r}")

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
        models[uid] = {"policy": Policy(obs_space, act_space), "value": Value(obs_space, act_space)}
        memories[uid] = RandomMemory(memory_size=rollouts, num_envs=e, device="cpu")
    with tempfile.TemporaryDirectory() as logdir:
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
        for field in (
            "learning_rate_scheduler_kwargs",
            "observation_preprocessor_kwargs",
            "state_preprocessor_kwargs",
            "value_preprocessor_kwargs",
        ):
            cfg[field] = {uid: {} for uid in env.possible_agents}
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
        clock = _Clock()
        trainer.train()
    return clock.rates(recorder.steps) | {"final_return": recorder.final_return()}


def run_ours(env_name: str, *, seed: int, steps: int, n_agents: int, num_envs: int) -> dict:
    """Train our IPPO for `steps` env steps; throughput and final return."""
    algo_params = {k: HYPER[k] for k in ("gamma", "gae_lambda", "clip_coef", "ent_coef")}
    algo_params.update({k: HYPER[k] for k in ("vf_coef", "max_grad_norm")})
    algo_params["hidden_sizes"] = list(HYPER["hidden_sizes"])
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
        algo_params=algo_params,
    )
    recorder = EpisodeRecorder(
        make_vector_env(env_name, num_envs=num_envs, seed=seed, n_agents=n_agents)
    )
    trainer = build_trainer(config, recorder)
    # CPU time per phase, measured around the trainer's own methods (not changed here).
    phases = dict.fromkeys(("collect_rollout", "compute_advantages", "update_policy"), 0.0)
    for name in phases:
        setattr(trainer, name, _timed(getattr(trainer, name), phases, name))
    clock = _Clock()
    trainer.train(progress=False)
    rates = clock.rates(recorder.steps)
    total_us = 1e6 / rates["steps_per_cpu_s"]
    per_step = {name: 1e6 * cpu / recorder.steps for name, cpu in phases.items()}
    env_us = 1e6 * recorder.env_cpu / recorder.steps
    breakdown = {
        "env step": env_us,
        "acting and bookkeeping": per_step["collect_rollout"] - env_us,
        "advantages": per_step["compute_advantages"],
        "PPO update": per_step["update_policy"],
    }
    breakdown["rest"] = total_us - sum(breakdown.values())
    return rates | {"final_return": recorder.final_return(), "cpu_us_per_step": breakdown}


def _timed(method: Callable[..., Any], totals: dict[str, float], key: str) -> Callable[..., Any]:
    """`method`, adding the CPU seconds of each call to `totals[key]`."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            totals[key] += time.process_time() - started

    return timed


def run_bare_mpe2(*, steps: int, n_agents: int) -> dict[str, float]:
    """Env-steps/s of one bare mpe2 `simple_spread_v3` parallel env with random actions."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(N=n_agents, max_cycles=25, continuous_actions=False)
    agents = list(env.possible_agents)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, size=(steps, n_agents)).tolist()
    clock = _Clock()
    for row in actions:
        env.step(dict(zip(agents, row, strict=True)))
        if not env.agents:
            env.reset()
    rates = clock.rates(steps)
    env.close()
    return rates


def run_bare(env_name: str, *, steps: int, n_agents: int, num_envs: int) -> dict[str, float]:
    """Env-steps/s of the vector env alone, stepping uniformly random actions."""
    env = make_vector_env(env_name, num_envs=num_envs, seed=0, n_agents=n_agents)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.n_actions, size=(steps // num_envs, num_envs, n_agents))
    clock = _Clock()
    for row in actions:
        env.step(row)
    rates = clock.rates(len(actions) * num_envs)
    env.close()
    return rates


def _mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t interval."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float("nan")
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def _difference_ci(ours: Sequence[float], skrl: Sequence[float]) -> tuple[float, float, float]:
    """Welch 95% interval of mean(ours) - mean(skrl)."""
    from scipy import stats

    a, b = np.asarray(ours, float), np.asarray(skrl, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = float(a.mean() - b.mean())
    se = float(np.sqrt(va + vb))
    if se == 0.0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df) * se)
    return diff, diff - half, diff + half


VARIANTS = ("ours", "skrl", "skrl_mpe2")
"""Training runs on spread: our IPPO, skrl on the native env, skrl on mpe2."""
LABELS = {
    "ours": "ours (native spread)",
    "skrl": "skrl (native spread)",
    "skrl_mpe2": "skrl (mpe2, PettingZoo wrapper)",
}


def _run_variant(variant: str, *, seed: int, steps: int, n_agents: int) -> dict[str, Any]:
    """One training run of `variant` on spread."""
    if variant == "ours":
        return run_ours(
            "spread", seed=seed, steps=steps, n_agents=n_agents, num_envs=HYPER["num_envs"]
        )
    backend = "mpe2" if variant == "skrl_mpe2" else "native"
    return run_skrl("spread", seed=seed, steps=steps, n_agents=n_agents, backend=backend)


def benchmark(*, steps: int, seeds: int, grid_steps: int) -> dict[str, Any]:
    """Run every measurement; returns the results as a plain dict."""
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    e, a = HYPER["num_envs"], 3
    # Warm-up (imports, allocator, first-call costs), discarded.
    warm = HYPER["num_envs"] * HYPER["rollouts"]
    for variant in VARIANTS:
        _run_variant(variant, seed=99, steps=warm, n_agents=a)
    bare = run_bare("spread", steps=steps, n_agents=a, num_envs=e)
    bare_mpe2 = run_bare_mpe2(steps=max(steps // 8, 1), n_agents=a)
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for seed in range(seeds):
        # Rotate the order so a change in machine load hits every variant alike.
        shift = seed % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            runs[variant].append(_run_variant(variant, seed=seed, steps=steps, n_agents=a))
    grid_bare = run_bare("hazard_grid", steps=grid_steps, n_agents=2, num_envs=64)
    grid = run_ours("hazard_grid", seed=0, steps=grid_steps, n_agents=2, num_envs=64)
    spread: dict[str, Any] = {"env_steps_per_run": steps, "seeds": seeds}
    for clock in ("steps_per_s", "steps_per_cpu_s"):
        rates = {variant: [r[clock] for r in runs[variant]] for variant in VARIANTS}
        means = {variant: float(np.mean(values)) for variant, values in rates.items()}
        fastest_skrl = max(("skrl", "skrl_mpe2"), key=lambda v: means[v])
        spread[clock] = {
            "bare": bare[clock],
            "bare_mpe2": bare_mpe2[clock],
            **rates,
            "fastest_skrl": fastest_skrl,
            "speedup_vs_fastest_skrl": means["ours"] / means[fastest_skrl],
            "speedup_vs": {v: means["ours"] / means[v] for v in ("skrl", "skrl_mpe2")},
            "ours_fraction_of_bare": means["ours"] / bare[clock],
            # Learning cost per env step on top of the env itself (microseconds).
            "overhead_us": {
                "ours": 1e6 * (1 / means["ours"] - 1 / bare[clock]),
                "skrl": 1e6 * (1 / means["skrl"] - 1 / bare[clock]),
                "skrl_mpe2": 1e6 * (1 / means["skrl_mpe2"] - 1 / bare_mpe2[clock]),
            },
        }
    returns = {variant: [r["final_return"] for r in runs[variant]] for variant in VARIANTS}
    spread["final_return"] = returns
    spread["return_vs"] = {}
    for other in ("skrl", "skrl_mpe2"):
        diff, low, high = _difference_ci(returns["ours"], returns[other])
        spread["return_vs"][other] = {
            "difference": diff,
            "ci95": [low, high],
            "ours_not_worse": bool(high >= 0.0),
        }
    breakdowns = [r["cpu_us_per_step"] for r in runs["ours"]]
    spread["ours_cpu_us_per_step"] = {
        key: float(np.mean([b[key] for b in breakdowns])) for key in breakdowns[0]
    }
    return {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "torch_threads": 1,
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
        },
        "hyperparameters": {**HYPER, "hidden_sizes": list(HYPER["hidden_sizes"])},
        "spread": spread,
        "hazard_grid": {
            "num_envs": 64,
            "env_steps": grid_steps,
            "bare": grid_bare,
            "ours": {k: grid[k] for k in ("steps_per_s", "steps_per_cpu_s")},
        },
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The `## IPPO vs skrl` section of BENCHMARKS.md."""
    s, g, m = results["spread"], results["hazard_grid"], results["machine"]
    h = results["hyperparameters"]
    cpu = s["steps_per_cpu_s"]
    lines = [
        "## IPPO vs skrl",
        "",
        "`python -m benchmarks.algos` (part of `make bench`): our IPPO and skrl 2.1.1's IPPO "
        f"on `spread` (3 agents), same hyperparameters (rollouts {h['rollouts']} x "
        f"{h['num_envs']} copies per update, {h['learning_epochs']} epochs, "
        f"{h['mini_batches']} minibatches, lr {h['learning_rate']}, hidden "
        f"{tuple(h['hidden_sizes'])}, entropy {h['ent_coef']}), one process, torch threads 1, "
        f"{s['seeds']} seeds of {s['env_steps_per_run']} env steps each. `spread` is the native "
        "batched env (seed for seed mpe2's `simple_spread_v3`). skrl runs on it through a "
        "VectorEnv wrapper, and on mpe2 itself as its users run PettingZoo tasks: one "
        "`simple_spread_v3.parallel_env` behind skrl's `PettingZooWrapper` (skrl does not "
        f"vectorise PettingZoo envs), with {h['rollouts'] * h['num_envs']} rollout steps per "
        "update so that every variant learns from the same transitions per update. Throughput "
        "counts whole training (collection and updates); skrl uses its canonical per-agent "
        "networks, ours one shared network with an agent-id one-hot.",
        "",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}; load average "
        f"{m['loadavg_before'][0]:.2f} before, {m['loadavg_after'][0]:.2f} after (shared with "
        "other jobs, so per-CPU-second rates, which count only this process's work, are the "
        "steadier comparison; wall-clock rates are given too).",
        "",
        "| measure | " + " | ".join(LABELS[v] for v in VARIANTS) + " |",
        "|---|---:|---:|---:|",
    ]
    for clock, label in (("steps_per_cpu_s", "per CPU second"), ("steps_per_s", "per wall second")):
        c = s[clock]
        cells = []
        for variant in VARIANTS:
            mean, half = _mean_ci(c[variant])
            cells.append(f"{mean:,.0f} ± {half:,.0f}")
        lines.append(f"| env-steps {label} (mean ± 95% CI) | " + " | ".join(cells) + " |")
        lines.append(
            f"| ours / this variant, {label} | 1.00x | {c['speedup_vs']['skrl']:.2f}x | "
            f"{c['speedup_vs']['skrl_mpe2']:.2f}x |"
        )
        lines.append(
            f"| bare env loop (random actions), env-steps {label} | {c['bare']:,.0f} | "
            f"{c['bare']:,.0f} | {c['bare_mpe2']:,.0f} |"
        )
    overhead = cpu["overhead_us"]
    lines.append(
        "| learning cost beyond the env, µs of CPU per env step | "
        + " | ".join(f"{overhead[v]:,.0f}" for v in VARIANTS)
        + " |"
    )
    returns = []
    for variant in VARIANTS:
        mean, half = _mean_ci(s["final_return"][variant])
        returns.append(f"{mean:.1f} ± {half:.1f}")
    lines.append("| final team return (mean ± 95% CI) | " + " | ".join(returns) + " |")
    vs = s["return_vs"]
    lines.append(
        "| ours - this variant, final return (Welch 95% CI) | | "
        + " | ".join(
            f"{vs[v]['difference']:.1f} [{vs[v]['ci95'][0]:.1f}, {vs[v]['ci95'][1]:.1f}]"
            for v in ("skrl", "skrl_mpe2")
        )
        + " |"
    )
    breakdown = s["ours_cpu_us_per_step"]
    total = sum(breakdown.values())
    fastest = cpu["fastest_skrl"]
    speedup = cpu["speedup_vs_fastest_skrl"]
    fraction = cpu["ours_fraction_of_bare"]
    not_worse = all(vs[v]["ours_not_worse"] for v in ("skrl", "skrl_mpe2"))
    update_us = breakdown["PPO update"]
    lines += [
        "",
        f"Where our CPU time goes, µs per env step (mean over the seeds; {total:.0f} in total): "
        + ", ".join(f"{key} {value:.1f}" for key, value in breakdown.items())
        + ". The PPO update alone costs "
        f"{update_us / (1e6 / cpu['bare']):.1f}x the bare env's time per env step.",
        "",
        "| hazard_grid, 64 copies | ours | bare env loop |",
        "|---|---:|---:|",
        f"| env-steps per CPU second | {g['ours']['steps_per_cpu_s']:,.0f} | "
        f"{g['bare']['steps_per_cpu_s']:,.0f} |",
        f"| env-steps per wall second | {g['ours']['steps_per_s']:,.0f} | "
        f"{g['bare']['steps_per_s']:,.0f} |",
        "",
        "Targets (CPU-second rates):",
        "",
        f"- throughput >= 3x the faster skrl variant ({LABELS[fastest]}): {speedup:.2f}x, "
        f"{'met' if speedup >= 3 else 'not met'}.",
        f"- >= 0.5x the bare native env loop: {fraction:.2f}x, "
        f"{'met' if fraction >= 0.5 else 'not met'}"
        + (
            ""
            if fraction >= 0.5
            else (
                f": the native env steps {h['num_envs']} copies in "
                f"{1e6 / cpu['bare']:.1f} µs of CPU per env step, so the {update_us:.0f} µs of "
                f"the PPO update alone ({h['learning_epochs']} x {h['mini_batches']} Adam "
                f"steps of {tuple(h['hidden_sizes'])} MLPs per "
                f"{h['rollouts'] * h['num_envs']} env steps) exceed that budget"
            )
        )
        + ".",
        f"- final return not worse than skrl's (Welch 95% interval of ours - skrl reaches 0, "
        f"against both variants): {'yes' if not_worse else 'no'}. Final return = mean team "
        f"return of the episodes ending in the last {TAIL:.0%} of each run, recorded "
        "identically for all.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, save JSON, update BENCHMARKS.md; `argv` None means defaults.

    `benchmarks.run_all` calls `main()` without arguments, so sys.argv (its own benchmark
    names) is never parsed here.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8 * 64 * 80, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--grid-steps", type=int, default=64 * 64 * 8)
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the section from the saved JSON"
    )
    args = parser.parse_args(list(argv) if argv is not None else [])
    if args.render_only:
        write_section("algos", render_markdown(json.loads((OUT / "algos.json").read_text())))
        return 0
    if args.quick:
        args.steps, args.seeds, args.grid_steps = 8 * 64 * 2, 2, 64 * 64 * 2
    results = benchmark(steps=args.steps, seeds=args.seeds, grid_steps=args.grid_steps)
    markdown = render_markdown(results)
    save_results("algos", results, markdown, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
