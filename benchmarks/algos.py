"""IPPO vs skrl 2.1.1's IPPO, side by side in one process on the same machine.

Measures, on `spread` (3 agents) with the same hyperparameters and network size:

- env-steps/s of the bare vector-env loop (random actions: the physical limit of the task),
  of our IPPO and of skrl's IPPO (training throughput, updates included);
- the final mean team return of all over several seeds at equal env steps: the mean over
  the episodes that end in the last 20% of each run, recorded by the same bookkeeping around the
  env for every variant, so they are measured identically;

and the training throughput of our IPPO on `hazard_grid` with 64 copies.

With `--actions continuous` (or `both`, the default) the same comparison runs with Box actions:
`spread` with `continuous_actions: true` (actions [E, A, 5] in [0, 1]), our IPPO's Gaussian
policy (docs/design.md, section 6.1: state-independent log-std, raw samples learned from and
clipped at the env) against skrl's IPPO with a `GaussianMixin` policy (a state-independent
log-std parameter, `clip_actions=True`: skrl clips its samples to the Box and learns from the
clipped ones), both starting from log-std `LOG_STD_INIT`, on the native env through the same
VectorEnv wrapper, with the same hyperparameters, env steps and seeds.

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
`benchmarks/out/algos.json` and the section between the algos markers of BENCHMARKS.md. A run
of one kind of actions (`--actions discrete` or `continuous`) keeps the other kind's results
saved in `algos.json` and rewrites the section from both; without saved results of the other
kind it saves its own and leaves the section as it is.
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

from benchmarks.common import BENCHMARKS_MD, positive_int, save_results, write_section
from src.algos.train import build_trainer
from src.analysis.files import write_text
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
LOG_STD_INIT = 0.0
"""Initial log-std of both Gaussian policies (std 1): our ActorCritic's zeros, given to skrl's."""
ACTIONS = ("discrete", "continuous")
"""The kinds of actions compared; `--actions both` runs them in this order."""
CONTINUOUS = {"continuous_actions": True}
"""The env parameters of `spread` with Box actions."""


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
        # Box actions: the trainer reads the flag, and the space when the env has one.
        self.continuous_actions = bool(getattr(env, "continuous_actions", False))
        self.action_space = getattr(env, "action_space", None)
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

    def initial_return(self) -> float:
        """Mean team return of the episodes that ended in the first TAIL of the run."""
        return _final_return(self.episodes, self.steps, first=True)


def _final_return(
    episodes: Sequence[tuple[int, float]], steps: int, *, first: bool = False
) -> float:
    """Mean return of the `(end step, return)` episodes that ended in the last TAIL of `steps`
    (`first`: in the first TAIL)."""
    if first:
        part = [ret for step, ret in episodes if step <= TAIL * steps]
    else:
        part = [ret for step, ret in episodes if step > (1.0 - TAIL) * steps]
    return float(np.mean(part)) if part else float("nan")


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

    def initial_return(self) -> float:
        """Mean team return of the episodes that ended in the first TAIL of the run."""
        return _final_return(self.episodes, self.steps, first=True)


def _returns(recorder: EpisodeRecorder | ParallelEpisodeRecorder) -> dict[str, float]:
    """The final return and, to show what was learnt, the return at the start of the run."""
    return {"final_return": recorder.final_return(), "initial_return": recorder.initial_return()}


def _skrl_wrapper(env: EpisodeRecorder, *, continuous: bool = False) -> Any:
    """A skrl MultiAgentEnvWrapper over our VectorEnv (dicts of [E, ...] tensors per agent).

    `continuous`: the agents act in the env's Box (`[E, 5]` float tensors per agent, the
    registry's space of the task), else in Discrete(n_actions) (`[E, 1]` integers).
    """
    import gymnasium
    from skrl.envs.wrappers.torch.base import MultiAgentEnvWrapper

    from src.algos.actions import agent_action_spaces, shared_action_space

    obs_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    if continuous:
        if not env.continuous_actions:
            raise ValueError(f"env {env.name} has Discrete actions; build it continuous_actions")
        act_space = env.action_space
        if not isinstance(act_space, gymnasium.spaces.Box):
            spaces = agent_action_spaces(env.name, {"n_agents": env.n_agents, **CONTINUOUS})
            act_space = shared_action_space(spaces, env=env.name)
    else:
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
            if continuous:  # [E, A, *shape] in the Box's dtype (the env clips to the Box)
                joint = torch.stack([actions[uid] for uid in self._agents], dim=1)
                result = env.step(joint.numpy().astype(act_space.dtype))
            else:
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
    env_name: str,
    *,
    seed: int,
    steps: int,
    n_agents: int,
    backend: str = "native",
    continuous: bool = False,
) -> dict[str, float]:
    """Train skrl's IPPO for `steps` env steps; throughput and final return.

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
    elif backend == "mpe2":
        from mpe2 import simple_spread_v3
        from skrl.envs.wrappers.torch import wrap_env

        if env_name != "spread":
            raise ValueError(f"backend 'mpe2' runs spread only, got env {env_name!r}")
        e = 1
        rollouts *= HYPER["num_envs"]
        recorder = ParallelEpisodeRecorder(
            simple_spread_v3.parallel_env(N=n_agents, max_cycles=25, continuous_actions=continuous)
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
    return clock.rates(recorder.steps) | _returns(recorder)


def run_ours(
    env_name: str,
    *,
    seed: int,
    steps: int,
    n_agents: int,
    num_envs: int,
    continuous: bool = False,
) -> dict:
    """Train our IPPO for `steps` env steps; throughput and final return.

    `continuous`: `env_name` with CONTINUOUS, so Box actions and our Gaussian policy.
    """
    params = CONTINUOUS if continuous else {}
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
        env_params=params,
        algo_params=algo_params,
    )
    recorder = EpisodeRecorder(
        make_vector_env(env_name, num_envs=num_envs, seed=seed, n_agents=n_agents, **params)
    )
    trainer = build_trainer(config, recorder)
    if continuous and not torch.all(trainer.net.log_std == LOG_STD_INIT):
        raise RuntimeError(f"our Gaussian policy does not start at log-std {LOG_STD_INIT}")
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
    return rates | _returns(recorder) | {"cpu_us_per_step": breakdown}


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


def _ci_cell(values: Sequence[float], spec: str) -> str:
    """`mean ± half-width` of the 95% interval, both formatted with `spec`."""
    mean, half = _mean_ci(values)
    return f"{mean:{spec}} ± {half:{spec}}"


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


def _ratio_ci(ours: Sequence[float], skrl: Sequence[float]) -> tuple[float, float]:
    """95% interval of ours / skrl from the runs of each seed (run back to back): the Student-t
    interval of the mean log ratio, exponentiated."""
    logs = np.log(np.asarray(ours, float) / np.asarray(skrl, float))
    mean, half = _mean_ci(logs)
    return float(np.exp(mean - half)), float(np.exp(mean + half))


VARIANTS = ("ours", "skrl", "skrl_mpe2")
"""Training runs on spread: our IPPO, skrl on the native env, skrl on mpe2."""
CONTINUOUS_VARIANTS = ("ours", "skrl")
"""Training runs on spread with Box actions: our IPPO and skrl, both on the native env."""
LABELS = {
    "ours": "ours (native spread)",
    "skrl": "skrl (native spread)",
    "skrl_mpe2": "skrl (mpe2, PettingZoo wrapper)",
}


def _run_variant(
    variant: str, *, seed: int, steps: int, n_agents: int, continuous: bool = False
) -> dict[str, Any]:
    """One training run of `variant` on spread (`continuous`: with Box actions)."""
    if variant == "ours":
        return run_ours(
            "spread",
            seed=seed,
            steps=steps,
            n_agents=n_agents,
            num_envs=HYPER["num_envs"],
            continuous=continuous,
        )
    backend = "mpe2" if variant == "skrl_mpe2" else "native"
    return run_skrl(
        "spread", seed=seed, steps=steps, n_agents=n_agents, backend=backend, continuous=continuous
    )


def _training_runs(
    variants: Sequence[str], *, steps: int, seeds: int, n_agents: int, continuous: bool
) -> dict[str, list[dict[str, Any]]]:
    """`seeds` runs of every variant of `steps` env steps, after a discarded warm-up run each."""
    # Warm-up (imports, allocator, first-call costs), discarded.
    warm = HYPER["num_envs"] * HYPER["rollouts"]
    for variant in variants:
        _run_variant(variant, seed=99, steps=warm, n_agents=n_agents, continuous=continuous)
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    for seed in range(seeds):
        # Rotate the order so a change in machine load hits every variant alike.
        shift = seed % len(variants)
        for variant in (*variants[shift:], *variants[:shift]):
            runs[variant].append(
                _run_variant(
                    variant, seed=seed, steps=steps, n_agents=n_agents, continuous=continuous
                )
            )
    return runs


def _returns_vs(
    runs: dict[str, list[dict[str, Any]]], others: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Welch 95% interval of ours - `other` final return for each of `others`."""
    ours = [r["final_return"] for r in runs["ours"]]
    compared = {}
    for other in others:
        diff, low, high = _difference_ci(ours, [r["final_return"] for r in runs[other]])
        compared[other] = {"difference": diff, "ci95": [low, high], "ours_not_worse": high >= 0.0}
    return compared


def _mean_breakdown(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Our CPU µs per env step by phase, averaged over `runs`."""
    breakdowns = [r["cpu_us_per_step"] for r in runs]
    return {key: float(np.mean([b[key] for b in breakdowns])) for key in breakdowns[0]}


def _machine(load_before: Sequence[float]) -> dict[str, Any]:
    """The machine, with the load average before a measurement and now."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
    }


def _hyperparameters() -> dict[str, Any]:
    """HYPER as plain JSON values."""
    return {**HYPER, "hidden_sizes": list(HYPER["hidden_sizes"])}


def benchmark(*, steps: int, seeds: int, grid_steps: int) -> dict[str, Any]:
    """Run every measurement of the Discrete comparison; returns the results as a plain dict."""
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    e, a = HYPER["num_envs"], 3
    runs = _training_runs(VARIANTS, steps=steps, seeds=seeds, n_agents=a, continuous=False)
    bare = run_bare("spread", steps=steps, n_agents=a, num_envs=e)
    bare_mpe2 = run_bare_mpe2(steps=max(steps // 8, 1), n_agents=a)
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
    spread["final_return"] = {v: [r["final_return"] for r in runs[v]] for v in VARIANTS}
    spread["initial_return"] = {v: [r["initial_return"] for r in runs[v]] for v in VARIANTS}
    spread["return_vs"] = _returns_vs(runs, ("skrl", "skrl_mpe2"))
    spread["ours_cpu_us_per_step"] = _mean_breakdown(runs["ours"])
    return {
        "machine": _machine(load_before),
        "hyperparameters": _hyperparameters(),
        "spread": spread,
        "hazard_grid": {
            "num_envs": 64,
            "env_steps": grid_steps,
            "bare": grid_bare,
            "ours": {k: grid[k] for k in ("steps_per_s", "steps_per_cpu_s")},
        },
    }


def benchmark_continuous(*, steps: int, seeds: int) -> dict[str, Any]:
    """Run the Box-action comparison on spread (ours and skrl, native env); a plain dict."""
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    e, a = HYPER["num_envs"], 3
    runs = _training_runs(
        CONTINUOUS_VARIANTS, steps=steps, seeds=seeds, n_agents=a, continuous=True
    )
    bare = run_bare("spread", steps=steps, n_agents=a, num_envs=e, continuous=True)
    result: dict[str, Any] = {
        "env_steps_per_run": steps,
        "seeds": seeds,
        "env_params": dict(CONTINUOUS),
        "log_std_init": LOG_STD_INIT,
    }
    for clock in ("steps_per_s", "steps_per_cpu_s"):
        rates = {v: [r[clock] for r in runs[v]] for v in CONTINUOUS_VARIANTS}
        means = {v: float(np.mean(values)) for v, values in rates.items()}
        result[clock] = {
            "bare": bare[clock],
            **rates,
            "speedup_vs_skrl": means["ours"] / means["skrl"],
            "speedup_vs_skrl_ci95": list(_ratio_ci(rates["ours"], rates["skrl"])),
            "overhead_us": {v: 1e6 * (1 / means[v] - 1 / bare[clock]) for v in means},
        }
    result["final_return"] = {v: [r["final_return"] for r in runs[v]] for v in CONTINUOUS_VARIANTS}
    result["initial_return"] = {
        v: [r["initial_return"] for r in runs[v]] for v in CONTINUOUS_VARIANTS
    }
    result["return_vs"] = _returns_vs(runs, ("skrl",))
    result["ours_cpu_us_per_step"] = _mean_breakdown(runs["ours"])
    return {"machine": _machine(load_before), "hyperparameters": _hyperparameters()} | result


def render_markdown(results: dict[str, Any]) -> str:
    """The `## IPPO vs skrl` section of BENCHMARKS.md: the Discrete comparison, then the Box one
    (each when `results` holds it)."""
    parts = ["## IPPO vs skrl"]
    if "spread" in results:
        parts.append(_render_discrete(results))
    if "continuous" in results:
        parts.append(_render_continuous(results["continuous"]))
    return "\n\n".join(parts)


def _machine_line(m: dict[str, Any]) -> str:
    return (
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}; load average "
        f"{m['loadavg_before'][0]:.2f} before, {m['loadavg_after'][0]:.2f} after (shared with "
        "other jobs, so per-CPU-second rates, which count only this process's work, are the "
        "steadier comparison; wall-clock rates are given too)."
    )


def _render_discrete(results: dict[str, Any]) -> str:
    """The Discrete comparison: skrl on the native env and on mpe2, and hazard_grid."""
    s, g, m = results["spread"], results["hazard_grid"], results["machine"]
    h = results["hyperparameters"]
    cpu = s["steps_per_cpu_s"]
    lines = [
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
        _machine_line(m),
        "",
        "| measure | " + " | ".join(LABELS[v] for v in VARIANTS) + " |",
        "|---|---:|---:|---:|",
    ]
    for clock, label in (("steps_per_cpu_s", "per CPU second"), ("steps_per_s", "per wall second")):
        c = s[clock]
        cells = [_ci_cell(c[variant], ",.0f") for variant in VARIANTS]
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
    returns = [_ci_cell(s["final_return"][variant], ".1f") for variant in VARIANTS]
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


def _render_continuous(c: dict[str, Any]) -> str:
    """The Box-action comparison: ours and skrl's Gaussian policies on the native env."""
    h, cpu = c["hyperparameters"], c["steps_per_cpu_s"]
    names = CONTINUOUS_VARIANTS
    lines = [
        "### Box actions (Gaussian policies)",
        "",
        "`python -m benchmarks.algos --actions continuous` (part of `make bench`): our IPPO "
        "and skrl 2.1.1's IPPO on `spread` with `continuous_actions: true` (3 agents, actions "
        "[E, A, 5] in [0, 1]), both on the native env (skrl through the same VectorEnv "
        f"wrapper), same hyperparameters as above (rollouts {h['rollouts']} x {h['num_envs']} "
        f"copies per update, {h['learning_epochs']} epochs, {h['mini_batches']} minibatches, "
        f"lr {h['learning_rate']}, hidden {tuple(h['hidden_sizes'])}, entropy {h['ent_coef']}), "
        f"one process, torch threads 1, {c['seeds']} seeds of {c['env_steps_per_run']} env "
        "steps each. Both policies are diagonal Gaussians with a state-independent log-std, "
        f"{c['log_std_init']:g} at first on both sides (std {np.exp(c['log_std_init']):g}). "
        "Ours learns from its raw samples and clips them to the Box at the env "
        "(docs/design.md, section 6.1); skrl's `GaussianMixin` with `clip_actions=True` clips "
        "its samples to the Box and learns from the clipped ones, as skrl does. skrl uses its "
        "canonical per-agent networks, ours one shared network with an agent-id one-hot.",
        "",
        _machine_line(c["machine"]),
        "",
        "| measure | ours (native spread, Box) | skrl (native spread, Box) |",
        "|---|---:|---:|",
    ]
    for clock, label in (("steps_per_cpu_s", "per CPU second"), ("steps_per_s", "per wall second")):
        rates = c[clock]
        cells = [_ci_cell(rates[variant], ",.0f") for variant in names]
        low, high = rates["speedup_vs_skrl_ci95"]
        lines += [
            f"| env-steps {label} (mean ± 95% CI) | " + " | ".join(cells) + " |",
            f"| ours / skrl, {label} (ratio of means [95% CI from the seeds' ratios]) | | "
            f"{rates['speedup_vs_skrl']:.2f}x [{low:.2f}, {high:.2f}] |",
        ]
    lines.append(
        "| bare env loop (random actions), env-steps per CPU second | "
        + " | ".join(f"{cpu['bare']:,.0f}" for _ in names)
        + " |"
    )
    lines.append(
        "| learning cost beyond the env, µs of CPU per env step | "
        + " | ".join(f"{cpu['overhead_us'][v]:,.0f}" for v in names)
        + " |"
    )
    for key, label in (
        ("initial_return", f"team return, first {TAIL:.0%} of each run"),
        ("final_return", f"final team return, last {TAIL:.0%} of each run"),
    ):
        cells = [_ci_cell(c[key][v], ".1f") for v in names]
        lines.append(f"| {label} (mean ± 95% CI) | " + " | ".join(cells) + " |")
    vs = c["return_vs"]["skrl"]
    lines.append(
        f"| ours - skrl, final return (Welch 95% CI) | | {vs['difference']:.1f} "
        f"[{vs['ci95'][0]:.1f}, {vs['ci95'][1]:.1f}] |"
    )
    breakdown = c["ours_cpu_us_per_step"]
    speedup, wall = cpu["speedup_vs_skrl"], c["steps_per_s"]["speedup_vs_skrl"]
    lines += [
        "",
        f"Where our CPU time goes, µs per env step (mean over the seeds; "
        f"{sum(breakdown.values()):.0f} in total): "
        + ", ".join(f"{key} {value:.1f}" for key, value in breakdown.items())
        + ".",
        "",
        f"Learning over the run (final team return minus that of the first {TAIL:.0%}, mean "
        "over the seeds): "
        + ", ".join(
            f"{v} {np.mean(c['final_return'][v]) - np.mean(c['initial_return'][v]):+.1f}"
            for v in names
        )
        + ".",
        "",
        "Targets (CPU-second rates; wall-second rates in parentheses):",
        "",
        f"- throughput >= 1x skrl's at equal settings: {speedup:.2f}x ({wall:.2f}x), "
        f"{'met' if speedup >= 1 else 'not met'}.",
        "- final return not worse than skrl's (Welch 95% interval of ours - skrl reaches 0): "
        f"{'yes' if vs['ours_not_worse'] else 'no'}.",
    ]
    return "\n".join(lines)


DISCRETE_KEYS = ("machine", "hyperparameters", "spread", "hazard_grid")
"""The entries of the results that the Discrete comparison writes (`continuous` the Box one's)."""


def merge_results(
    fresh: dict[str, Any], saved: dict[str, Any] | None, actions: str
) -> dict[str, Any]:
    """`fresh` results of `actions` ("discrete", "continuous" or "both") over `saved` ones: the
    saved results of the kind of actions not run are kept, those of the kind run replaced."""
    if actions not in (*ACTIONS, "both"):
        raise ValueError(f"actions must be discrete, continuous or both, got {actions!r}")
    merged = dict(saved or {})
    if actions in ("discrete", "both"):
        for key in DISCRETE_KEYS:
            merged.pop(key, None)
    if actions in ("continuous", "both"):
        merged.pop("continuous", None)
    return merged | fresh


def save(
    results: dict[str, Any], *, quick: bool, out: Path = OUT, path: Path = BENCHMARKS_MD
) -> bool:
    """Save `results` as `<out>/algos.json` (`algos_quick.json` for a smoke run) and, unless
    `quick`, make their markdown the algos section of `path` when they hold both comparisons.

    Results of one kind of actions alone leave the section as it is (it would lose the other
    kind's figures); returns whether the section was rewritten.
    """
    markdown = render_markdown(results)
    complete = "spread" in results and "continuous" in results
    if quick or complete:
        save_results("algos", results, markdown, quick=quick, out=out, path=path)
        return not quick
    print(markdown)
    out.mkdir(parents=True, exist_ok=True)
    write_text(json.dumps(results, indent=2, default=float) + "\n", out / "algos.json")
    missing = "discrete" if "spread" not in results else "continuous"
    print(
        f"{path.name} left as it is: {out / 'algos.json'} has no results of {missing} actions "
        f"yet (run `python -m benchmarks.algos --actions {missing}`)"
    )
    return False


def main(argv: Sequence[str] | None = None, *, out: Path = OUT, path: Path = BENCHMARKS_MD) -> int:
    """Run the benchmark, save JSON, update BENCHMARKS.md; `argv` None means defaults.

    `benchmarks.run_all` calls `main()` without arguments, so sys.argv (its own benchmark
    names) is never parsed here. `out` and `path`: where the results and the section go.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--actions",
        choices=(*ACTIONS, "both"),
        default="both",
        help="which comparison to run (the other kind's saved results are kept)",
    )
    parser.add_argument(
        "--steps", type=positive_int, default=8 * 64 * 80, help="env steps per Discrete run"
    )
    parser.add_argument(
        "--continuous-steps",
        type=positive_int,
        default=8 * 64 * 160,
        help="env steps per Box-action run",
    )
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--grid-steps", type=positive_int, default=64 * 64 * 8)
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the section from the saved JSON"
    )
    args = parser.parse_args(list(argv) if argv is not None else [])
    if args.render_only:
        saved = json.loads((out / "algos.json").read_text())
        write_section("algos", render_markdown(saved), path=path)
        return 0
    if args.quick:
        args.steps, args.seeds, args.grid_steps = 8 * 64 * 2, 2, 64 * 64 * 2
        args.continuous_steps = args.steps
    fresh: dict[str, Any] = {}
    if args.actions in ("discrete", "both"):
        fresh |= benchmark(steps=args.steps, seeds=args.seeds, grid_steps=args.grid_steps)
    if args.actions in ("continuous", "both"):
        fresh["continuous"] = benchmark_continuous(steps=args.continuous_steps, seeds=args.seeds)
    saved_path = out / f"algos{'_quick' if args.quick else ''}.json"
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else None
    save(merge_results(fresh, saved, args.actions), quick=args.quick, out=out, path=path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
