"""Any PettingZoo ParallelEnv as a task of the pipeline: its cost, its hidden cap, its vector form.

What a task must provide (docs/architecture.md, "Your own task and algorithm"):

- a factory `factory(render_mode=None, **params)` returning a `pettingzoo.ParallelEnv`;
- a Box observation space per agent (flattened; agents may observe different sizes);
- one action space shared by all agents: `Discrete(n)`, or a `Box` (only for algorithms that
  take Box actions);
- every possible agent from `reset` to the episode's end: a step returns an entry for every
  live agent, and the episode ends for all agents at the same step;
- the per-step safety cost in `infos[agent]["cost"]`, or a cost function (`src.envs.costs`);
- same seed, same episode: `reset(seed=s)` seeds everything random in the env.

:class:`CostParallelEnv` wraps one env: it adds `infos[agent]["cost"]`, ends episodes at the
hidden cap `max_steps` and checks the agents at every reset and step, raising a one-line
`TaskError` naming what the env did. :class:`ParallelVectorEnv` is the vector interface over a
list of them (the way `spread_mpe2` wraps mpe2): observations `[E, A, D]` zero-padded to the
largest agent's size (the agent one-hot that the networks append to every observation tells
them which entries are an agent's own), finished copies reset automatically.

Resuming needs the state of every copy. An env with `get_state()` / `set_state(state)` of its
own gives it; otherwise the copy's state is its episode's reset seed and the actions taken
since, replayed on restore (and checked against the observation it had). For that, every
episode of such an env is seeded: an automatic reset seeds the next episode from the last
episode's seed (`next_episode_seed`). `spread_mpe2` keeps mpe2's own continuing random streams
and snapshots mpe2's world instead (`src.envs.spread`).

A task may also bring its own vectorised form (`vector: module:function`, called as
`vector(num_envs=E, seed=seed, **params)` with `max_steps` among the params when the config
gives it), a `VectorEnv` that training and evaluation then use instead of the list;
`probe_task` checks the shapes of what it returns. Its videos still come from the factory's
ParallelEnv.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from src.core.wrappers import infer_episode_cap
from src.custom import ComponentError, EnvEntry, load_entry
from src.envs.base import (
    StepResult,
    VectorEnv,
    check_actions,
    check_int,
    check_snapshot,
    first_reset_seeds,
    require_reset,
    resolve_seeds,
)
from src.envs.costs import CostFunction, resolve_cost
from src.envs.parallel import ParallelReset, ParallelStep

__all__ = [
    "PROBE_STEPS",
    "CostParallelEnv",
    "ParallelVectorEnv",
    "TaskConfig",
    "TaskError",
    "action_kind",
    "agent_actions",
    "check_entry",
    "make_task_env",
    "make_task_vector_env",
    "next_episode_seed",
    "observation_sizes",
    "probe_task",
    "stack_observations",
]

TaskError = ComponentError
"""A task's env breaks the contract above (the message names the env and what it did)."""

PROBE_STEPS = 500
"""Most steps `probe_task` takes to check a task before any job runs."""


def observation_sizes(env: ParallelEnv) -> list[int]:
    """The flat observation size of every possible agent; Box spaces only."""
    sizes = []
    for agent in env.possible_agents:
        space = env.observation_space(agent)
        if not isinstance(space, spaces.Box):
            raise TaskError(
                f"agent {agent!r} observes a {type(space).__name__}; the pipeline needs a Box "
                "observation space (flattened to a vector) for every agent"
            )
        sizes.append(int(np.prod(space.shape, dtype=np.int64)))
    return sizes


def _shared_action_space(env: ParallelEnv) -> spaces.Space:
    """The action space every agent shares: Discrete(n) or one Box shape."""
    agents = list(env.possible_agents)
    first = env.action_space(agents[0])
    for agent in agents[1:]:
        space = env.action_space(agent)
        if space != first:
            raise TaskError(
                f"agents {agents[0]!r} and {agent!r} act in different spaces ({first} and "
                f"{space}); the pipeline needs one action space for all agents"
            )
    if isinstance(first, spaces.Discrete):
        if int(first.start) != 0:
            raise TaskError(f"action space {first} must start at 0")
        return first
    if isinstance(first, spaces.Box):
        return first
    raise TaskError(f"actions are a {type(first).__name__}; the pipeline takes Discrete or Box")


def action_kind(space: spaces.Space) -> str:
    """`"discrete"` or `"box"`: the name algorithms declare in `AlgorithmSpec.action_kinds`."""
    return "box" if isinstance(space, spaces.Box) else "discrete"


def stack_observations(
    observations: Mapping[str, Any], agents: Sequence[str], obs_dim: int
) -> np.ndarray:
    """`[A, D]` float32: each agent's flattened observation, zero-padded to `obs_dim`."""
    rows = [np.asarray(observations[agent], dtype=np.float32).ravel() for agent in agents]
    if all(row.size == obs_dim for row in rows):
        return np.array(rows, dtype=np.float32)
    out = np.zeros((len(rows), obs_dim), dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, : row.size] = row
    return out


def agent_actions(row: np.ndarray, agents: Sequence[str], live: Sequence[str]) -> dict[str, Any]:
    """The action dict of the `live` agents from one copy's `[A]` (or `[A, ...]` Box) actions,
    in `agents` order: Python ints for discrete actions, arrays for Box actions."""
    index = {agent: i for i, agent in enumerate(agents)}
    array = np.asarray(row)
    if array.ndim == 1:
        return {agent: int(array[index[agent]]) for agent in live}
    return {agent: array[index[agent]] for agent in live}


def next_episode_seed(seed: int) -> int:
    """The reset seed of the episode after one seeded `seed` (a 63-bit hash of it)."""
    state = np.random.SeedSequence([int(seed), 0xE915]).generate_state(1, dtype=np.uint64)
    return int(state[0] >> np.uint64(1))


class CostParallelEnv(ParallelEnv):
    """A ParallelEnv with the safety cost in `infos[agent]["cost"]`, the hidden cap
    `max_steps` (an instance attribute, as `infer_episode_cap` reads it) and the agents checked.

    The wrapped env is `self.env`; `state`, `state_space`, `render` and `close` are its own.
    """

    def __init__(
        self, env: ParallelEnv, *, name: str, max_steps: int, cost: CostFunction | None = None
    ) -> None:
        """Wrap `env` as task `name`; `cost` computes the costs when its infos hold none."""
        if not isinstance(env, ParallelEnv):
            raise TaskError(
                f"the factory returned a {type(env).__module__}.{type(env).__qualname__}, not "
                "a pettingzoo ParallelEnv (an AEC env converts with "
                "pettingzoo.utils.conversions.aec_to_parallel)"
            )
        self.env = env
        self.task = name
        check_int("max_steps", max_steps, low=1)
        self.max_steps = int(max_steps)
        self.cost_function = cost
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = {**getattr(env, "metadata", {}), "name": name}
        self.possible_agents = list(env.possible_agents)
        if not self.possible_agents:
            raise TaskError("the env has no possible_agents")
        if getattr(env, "state_space", None) is not None:
            self.state_space = env.state_space
        self.agents: list[str] = []
        self.steps = 0  # steps of the running episode

    def observation_space(self, agent: str) -> spaces.Space:
        """The wrapped env's observation space of `agent`."""
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        """The wrapped env's action space of `agent`."""
        return self.env.action_space(agent)

    def _fail(self, what: str) -> TaskError:
        return TaskError(f"env {self.task}: {what}")

    def reset(self, seed: int | None = None, options: dict | None = None) -> ParallelReset:
        """Reset the wrapped env; every possible agent must be back."""
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        self.steps = 0
        if set(self.agents) != set(self.possible_agents) or len(self.agents) != len(
            self.possible_agents
        ):
            raise self._fail(
                f"reset() started the agents {self.agents}, not every possible agent "
                f"{self.possible_agents}; the pipeline needs all of them in every episode"
            )
        missing = [agent for agent in self.possible_agents if agent not in obs]
        if missing:
            raise self._fail(f"reset() returned no observation for {missing}")
        return obs, infos

    def step(self, actions: dict[str, Any]) -> ParallelStep:
        """Step the wrapped env, check its agents, add costs, and end the episode at the cap."""
        live = self.agents
        if not live:
            return {}, {}, {}, {}, {}
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        self.steps += 1
        for table, what in (
            (obs, "observations"),
            (rewards, "rewards"),
            (terminations, "terminations"),
            (truncations, "truncations"),
        ):
            missing = [agent for agent in live if agent not in table]
            if missing:
                raise self._fail(
                    f"step {self.steps} returned no {what} for {missing}; the pipeline needs "
                    "an entry for every agent until the episode ends for all of them"
                )
        ended = [agent for agent in live if terminations[agent] or truncations[agent]]
        if ended and len(ended) != len(live):
            going = [agent for agent in live if agent not in ended]
            raise self._fail(
                f"at step {self.steps} the agents {ended} finished while {going} went on; the "
                "pipeline needs the episode to end for all agents at the same step"
            )
        now = list(self.env.agents)
        if not ended and set(now) != set(live):
            raise self._fail(
                f"the agents changed from {live} to {now} at step {self.steps}; the pipeline "
                "needs every agent from reset to the episode's end"
            )
        costs = self._costs(live, infos)
        infos = {agent: {**(infos.get(agent) or {}), "cost": costs[agent]} for agent in live}
        rewards = {agent: float(rewards[agent]) for agent in live}
        if not ended and self.steps >= self.max_steps:
            # The hidden cap ends the episode for everyone; the wrapped env resets next time.
            truncations = {**truncations, **dict.fromkeys(live, True)}
            ended = list(live)
        self.agents = [] if ended else list(live)
        return obs, rewards, terminations, truncations, infos

    def _costs(self, live: list[str], infos: Mapping[str, Any]) -> dict[str, float]:
        if self.cost_function is None:
            missing = [
                agent
                for agent in live
                if not isinstance(infos.get(agent), Mapping) or "cost" not in infos[agent]
            ]
            if missing:
                raise self._fail(
                    f"infos of {missing} hold no 'cost' after step {self.steps}, and no cost "
                    "function is named; put infos[agent]['cost'] in the env or name a cost "
                    "function (custom_envs.<name>.cost)"
                )
            given = {agent: infos[agent]["cost"] for agent in live}
        else:
            given = dict(self.cost_function(self.env, infos))
            missing = [agent for agent in live if agent not in given]
            if missing:
                raise self._fail(f"the cost function returned no cost for {missing}")
        costs = {}
        for agent in live:
            value = given[agent]
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number) or number < 0:
                raise self._fail(
                    f"the cost of {agent!r} at step {self.steps} is {value!r}; costs must be "
                    "finite numbers >= 0 (> 0 is a violation)"
                )
            costs[agent] = number
        return costs

    def state(self) -> np.ndarray:
        """The wrapped env's global state."""
        return self.env.state()

    def render(self) -> Any:
        """The wrapped env's frame (an `[H, W, 3]` uint8 array in `rgb_array` mode)."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()


@dataclass(frozen=True)
class TaskConfig:
    """The parameters of a task given by import path (the registry's config of it)."""

    factory: str
    """`module:function` of the env factory."""
    cost: str | None = None
    """Cost function name or import path; None: the env's `infos[agent]["cost"]`."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the factory (the config's env_params without the keys below)."""
    n_agents: int | None = None
    """Agents the config expects (checked against the env's possible agents)."""
    max_steps: int | None = None
    """Hidden episode cap; None: the cap the env declares (e.g. mpe2's `max_cycles`)."""
    vector: str | None = None
    """`module:function` of the task's own VectorEnv; None: a list of ParallelEnvs."""

    @classmethod
    def from_params(cls, entry: EnvEntry, params: Mapping[str, Any]) -> TaskConfig:
        """Split env_params into the pipeline's keys (`n_agents`, `max_steps`) and the factory's."""
        rest = dict(params)
        n_agents, max_steps = rest.pop("n_agents", None), rest.pop("max_steps", None)
        if n_agents is not None:
            check_int("n_agents", n_agents, low=1)
        if max_steps is not None:
            check_int("max_steps", max_steps, low=1)
        return cls(entry.factory, entry.cost, rest, n_agents, max_steps, entry.vector)


def _callable(entry: str, what: str) -> Callable[..., Any]:
    function = load_entry(entry)
    if not callable(function):
        raise TaskError(f"{what} {entry!r} is a {type(function).__name__}, not callable")
    return function


def check_entry(entry: EnvEntry | TaskConfig) -> tuple[Callable[..., Any], CostFunction | None]:
    """Import a task's factory, cost function and vector factory; a one-line `TaskError` if
    one cannot serve. Returns the factory and the cost function (None when the env gives its
    own costs)."""
    factory = _callable(entry.factory, "factory")
    if entry.vector is not None:
        _callable(entry.vector, "vector")
    return factory, None if entry.cost is None else resolve_cost(entry.cost)


def _build(name: str, config: TaskConfig, render_mode: str | None) -> CostParallelEnv:
    factory, cost = check_entry(config)
    try:
        env = factory(render_mode=render_mode, **config.params)
    except Exception as error:  # the user's factory refuses its parameters in its own way
        message = " ".join(str(error).split()) or "no message"
        raise ValueError(
            f"{config.factory}(**{config.params}) failed: {type(error).__name__}: {message}"
        ) from None
    if not isinstance(env, ParallelEnv):
        raise TaskError(
            f"{config.factory} returned a {type(env).__module__}.{type(env).__qualname__}, not "
            "a pettingzoo ParallelEnv (an AEC env converts with "
            "pettingzoo.utils.conversions.aec_to_parallel)"
        )
    cap = config.max_steps if config.max_steps is not None else infer_episode_cap(env)
    if cap is None:
        raise TaskError(
            "the env declares no episode cap (max_steps, max_cycles or max_episode_steps); "
            f"set env_params.{name}.max_steps"
        )
    wrapped = CostParallelEnv(env, name=name, max_steps=cap, cost=cost)
    count = len(wrapped.possible_agents)
    if config.n_agents is not None and config.n_agents != count:
        raise ValueError(
            f"n_agents={config.n_agents}: env {name} has {count} agents "
            f"({', '.join(wrapped.possible_agents)})"
        )
    return wrapped


def make_task_env(
    name: str, config: TaskConfig, *, render_mode: str | None = None
) -> CostParallelEnv:
    """One env of task `name` (the registry's `make_env` of a task given by import path)."""
    return _build(name, config, render_mode)


class ParallelVectorEnv(VectorEnv):
    """`num_envs` copies of a :class:`CostParallelEnv` behind the vector interface.

    Copy `e` is seeded with its own seed on a seeded reset, so copy `e` of a batch equals a
    single env seeded the same way. With `reseed_episodes`, every later episode of a copy is
    seeded from its last one (`next_episode_seed`) and snapshots replay the running episode;
    without it, auto-resets continue the env's own random stream and a subclass snapshots the
    env (`spread_mpe2`).
    """

    def __init__(
        self,
        make_copy: Callable[[], CostParallelEnv],
        *,
        name: str,
        config: Any,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
        reseed_episodes: bool = True,
    ) -> None:
        """Build `num_envs` copies with `make_copy()`; `config` (a dataclass) names the task's
        parameters in snapshots, so a snapshot is restored only into the same task."""
        check_int("num_envs", num_envs, low=1)
        self.name, self.config, self.num_envs = name, config, num_envs
        self._initial_seeds = resolve_seeds(seed, num_envs)
        self._envs = [make_copy() for _ in range(num_envs)]
        first = self._envs[0]
        self.agents = list(first.possible_agents)
        self.n_agents = len(self.agents)
        self.max_steps = first.max_steps
        self.obs_sizes = observation_sizes(first)
        self.obs_dim = max(self.obs_sizes)
        self.action_space = _shared_action_space(first)
        self.action_kind = action_kind(self.action_space)
        self.continuous_actions = self.action_kind == "box"
        self.action_shape: tuple[int, ...] = tuple(self.action_space.shape or ())
        self.n_actions = (
            int(np.prod(self.action_shape, dtype=np.int64))
            if self.continuous_actions
            else int(self.action_space.n)
        )
        self.reseed_episodes = reseed_episodes
        own = getattr(first.env, "get_state", None), getattr(first.env, "set_state", None)
        # An env that snapshots itself needs no replay.
        self._own_state = all(callable(method) for method in own)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._episode_seeds: list[int | None] = [None] * num_envs
        self._actions: list[list[np.ndarray]] = [[] for _ in range(num_envs)]
        self._last_obs: np.ndarray | None = None
        self._was_reset = False

    @property
    def _replays(self) -> bool:
        return self.reseed_episodes and not self._own_state

    def _reset_copy(self, e: int, seed: int | None) -> np.ndarray:
        observations, _ = self._envs[e].reset(seed=seed)
        self._episode_seeds[e] = seed
        self._actions[e] = []
        self._steps[e] = 0
        return stack_observations(observations, self.agents, self.obs_dim)

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Reset every copy; returns obs `[E, A, D]` float32."""
        if self.reseed_episodes:
            seeds = first_reset_seeds(
                seed, self.num_envs, initial=self._initial_seeds, started=self._was_reset
            )
            if seeds is None:
                # Continue each copy's chain of seeds: every earlier episode had one, since
                # the first reset is always seeded (by the caller, the constructor or fresh
                # entropy).
                seeds = [next_episode_seed(s) for s in self._episode_seeds if s is not None]
        else:
            seeds = resolve_seeds(seed, self.num_envs)
            if seeds is None and not self._was_reset:
                seeds = self._initial_seeds
        obs = np.empty((self.num_envs, self.n_agents, self.obs_dim), dtype=np.float32)
        for e in range(self.num_envs):
            obs[e] = self._reset_copy(e, None if seeds is None else seeds[e])
        self._last_obs = obs.copy()
        self._was_reset = True
        return obs

    def _check_actions(self, actions: np.ndarray) -> list[Any]:
        """One row of actions per copy: `[A]` Python ints, or `[A, ...]` Box arrays."""
        if not self.continuous_actions:
            return check_actions(actions, self.num_envs, self.n_agents, self.n_actions).tolist()
        array = np.asarray(actions)
        shape = (self.num_envs, self.n_agents, *self.action_shape)
        if array.shape != shape:
            raise ValueError(f"actions must have shape [E, A, ...] = {shape}, got {array.shape}")
        if array.dtype.kind != "f" or not np.isfinite(array).all():
            raise ValueError(f"Box actions must be finite floats, got dtype {array.dtype}")
        box = self.action_space
        return list(np.clip(array, box.low, box.high).astype(box.dtype, copy=False))

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every copy once; finished copies reset (see the class docstring for seeds)."""
        require_reset(self._was_reset, "step")
        rows = self._check_actions(actions)
        agents = self.agents
        # Plain lists per copy, converted once at the end: far cheaper than per-copy writes.
        obs_rows, reward_rows, cost_rows = [], [], []
        finished: list[tuple[int, dict[str, bool], dict[str, bool]]] = []
        for e, (env, row) in enumerate(zip(self._envs, rows, strict=True)):
            observations, rewards, terms, truncs, infos = env.step(
                agent_actions(np.asarray(row), agents, agents)
                if self.continuous_actions
                else dict(zip(agents, row, strict=True))
            )
            if self._replays:
                self._actions[e].append(np.asarray(row))
            obs_rows.append(stack_observations(observations, agents, self.obs_dim))
            reward_rows.append([rewards[agent] for agent in agents])
            cost_rows.append([infos[agent]["cost"] for agent in agents])
            if not env.agents:
                finished.append((e, terms, truncs))
        self._steps += 1
        episode_step = self._steps.copy()
        final_obs = np.array(obs_rows, dtype=np.float32)
        obs = final_obs.copy()
        shape = (self.num_envs, self.n_agents)
        terminated = np.zeros(shape, dtype=bool)
        truncated = np.zeros(shape, dtype=bool)
        for e, terms, truncs in finished:
            terminated[e] = [terms[agent] for agent in agents]
            truncated[e] = [truncs[agent] and not terms[agent] for agent in agents]
            seed = self._episode_seeds[e]
            reseed = self.reseed_episodes and seed is not None
            obs[e] = self._reset_copy(e, next_episode_seed(seed) if reseed else None)
        reward = np.array(reward_rows, dtype=np.float32)
        cost = np.array(cost_rows, dtype=np.float32)
        self._last_obs = obs.copy()
        return StepResult(obs, reward, cost, terminated, truncated, final_obs, episode_step)

    def get_state(self) -> dict[str, Any]:
        """The copies' own snapshots, or their episodes' seeds and actions (class docstring)."""
        require_reset(self._was_reset, "get_state")
        state: dict[str, Any] = {
            "name": self.name,
            "config": dataclasses.asdict(self.config),
            "steps": self._steps.copy(),
            "obs": self._last_obs.copy(),
            # The running episodes' seeds: the next episodes' seeds follow from them.
            "seeds": list(self._episode_seeds),
        }
        if self._own_state:
            state["copies"] = [env.env.get_state() for env in self._envs]
        else:
            empty = np.zeros((0, self.n_agents, *self.action_shape), dtype=self._action_dtype)
            state["actions"] = [
                np.array(actions) if actions else empty.copy() for actions in self._actions
            ]
        return state

    @property
    def _action_dtype(self) -> type:
        return self.action_space.dtype.type if self.continuous_actions else np.int64

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot (replaying the running episodes if needed)."""
        check_snapshot(
            state,
            name=self.name,
            config=self.config,
            shapes={"steps": (self.num_envs,), "obs": (self.num_envs, self.n_agents, self.obs_dim)},
        )
        if not self._was_reset:
            self.reset()
        steps = np.array(state["steps"], dtype=np.int64)
        seeds = state.get("seeds")
        if not isinstance(seeds, list) or len(seeds) != self.num_envs:
            raise ValueError(f"state['seeds'] must list {self.num_envs} episode seeds")
        if self._own_state:
            for env, saved, count in zip(self._envs, state["copies"], steps, strict=True):
                env.env.set_state(saved)
                env.agents, env.steps = list(env.possible_agents), int(count)
        else:
            self._replay(state, steps)
        self._episode_seeds = [None if seed is None else int(seed) for seed in seeds]
        self._steps = steps
        self._last_obs = np.array(state["obs"], dtype=np.float32)

    def _replay(self, state: dict[str, Any], steps: np.ndarray) -> None:
        seeds, actions = state["seeds"], state.get("actions")
        if not isinstance(actions, list) or len(actions) != self.num_envs:
            raise ValueError(f"state['actions'] must list the actions of {self.num_envs} copies")
        for e in range(self.num_envs):
            seed = None if seeds[e] is None else int(seeds[e])
            taken = np.asarray(actions[e])
            if seed is None or len(taken) != steps[e]:
                raise ValueError(
                    f"state of copy {e}: {len(taken)} actions for {steps[e]} steps from seed "
                    f"{seed}; cannot replay it"
                )
            obs = self._reset_copy(e, seed)
            for row in taken:
                observations, *_ = self._envs[e].step(agent_actions(row, self.agents, self.agents))
                self._actions[e].append(np.asarray(row))
                obs = stack_observations(observations, self.agents, self.obs_dim)
            self._steps[e] = steps[e]
            if not np.array_equal(obs, np.asarray(state["obs"])[e]):
                raise TaskError(
                    f"env {self.name}: replaying copy {e} from its reset seed and actions "
                    "reached another observation; the env must be deterministic given "
                    "reset(seed=...) and the actions, or provide get_state()/set_state()"
                )

    def render(self, index: int = 0) -> np.ndarray:
        """The `rgb_array` frame of copy `index`."""
        check_int("index", index, low=0, high=self.num_envs - 1)
        frame = self._envs[index].render()
        if frame is None:
            raise RuntimeError(f"env {self.name} returned no frame in rgb_array mode")
        return np.asarray(frame)

    def close(self) -> None:
        """Close every copy."""
        for env in self._envs:
            env.close()


def make_task_vector_env(
    name: str, config: TaskConfig, *, num_envs: int, seed: int | Sequence[int] | None = None
) -> VectorEnv:
    """`num_envs` copies of task `name` (the registry's `make_vector_env` of a custom task):
    the task's own VectorEnv if it gives one, else a `ParallelVectorEnv`."""
    if config.vector is None:
        return ParallelVectorEnv(
            lambda: _build(name, config, "rgb_array"),
            name=name,
            config=config,
            num_envs=num_envs,
            seed=seed,
        )
    vector = _callable(config.vector, "vector")
    cap = {} if config.max_steps is None else {"max_steps": config.max_steps}
    try:
        env = vector(num_envs=num_envs, seed=seed, **config.params, **cap)
    except Exception as error:  # the user's constructor refuses its parameters in its own way
        message = " ".join(str(error).split()) or "no message"
        raise ValueError(
            f"{config.vector}(num_envs={num_envs}, **{config.params | cap}) failed: "
            f"{type(error).__name__}: {message}"
        ) from None
    if not isinstance(env, VectorEnv):
        raise TaskError(
            f"{config.vector} returned a {type(env).__module__}.{type(env).__qualname__}, not "
            "a src.envs.base.VectorEnv"
        )
    for attribute, expected in (("num_envs", num_envs), ("n_agents", config.n_agents)):
        if expected is not None and getattr(env, attribute, None) != expected:
            raise TaskError(
                f"{config.vector} returned a VectorEnv with {attribute}="
                f"{getattr(env, attribute, None)!r}, not {expected}"
            )
    return env


def probe_task(env: VectorEnv, *, seed: int = 0, steps: int | None = None) -> None:
    """Run `env` with random actions through an episode end (at most `PROBE_STEPS` steps), so
    that a task breaking the contract fails before any job, with its one-line `TaskError`.

    A `ParallelVectorEnv` checks its env at every step; any other VectorEnv (a task's own)
    has the shapes and types of what it returns checked here.
    """
    rng = np.random.default_rng(seed)
    count = min(int(env.max_steps) + 1, PROBE_STEPS) if steps is None else steps
    e, a = env.num_envs, env.n_agents
    obs = env.reset(seed=seed)
    _check_array(env, "reset() observations", obs, (e, a, env.obs_dim), np.float32)
    for _ in range(count):
        if getattr(env, "continuous_actions", False):
            box = env.action_space
            low = np.broadcast_to(np.nan_to_num(box.low, neginf=-1.0), box.shape)
            high = np.broadcast_to(np.nan_to_num(box.high, posinf=1.0), box.shape)
            shape = (e, a, *env.action_shape)
            actions = rng.uniform(low, high, size=shape).astype(box.dtype)
        else:
            actions = rng.integers(0, env.n_actions, size=(e, a))
        result = env.step(actions)
        if isinstance(env, ParallelVectorEnv):
            continue
        if not isinstance(result, StepResult):
            raise TaskError(f"env {env.name}: step() returned a {type(result).__name__}")
        for name, dtype in (
            ("obs", np.float32),
            ("final_obs", np.float32),
            ("reward", np.float32),
            ("cost", np.float32),
            ("terminated", np.bool_),
            ("truncated", np.bool_),
        ):
            shape = (e, a, env.obs_dim) if name.endswith("obs") else (e, a)
            _check_array(env, f"step() {name}", getattr(result, name), shape, dtype)
        _check_array(env, "step() episode_step", result.episode_step, (e,), np.int64)


def _check_array(env: Any, what: str, value: Any, shape: tuple[int, ...], dtype: type) -> None:
    array = np.asarray(value)
    if array.shape != shape or array.dtype != dtype:
        raise TaskError(
            f"env {getattr(env, 'name', '?')}: {what} has shape {array.shape} and dtype "
            f"{array.dtype}; the VectorEnv interface needs {shape} {np.dtype(dtype).name}"
        )
