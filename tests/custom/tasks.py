"""Tasks and algorithm classes for the tests, importable by path as a config names them: a
small valid ParallelEnv (`Walk`), its own vectorised form (`WalkVector`), and factories and
classes that break the contracts of src/envs/task.py and src/algos/registry.py one way each."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from src.algos.shield.trainer import ShieldedIPPO
from src.envs.base import StepResult, VectorEnv, check_actions, first_reset_seeds
from src.envs.task import next_episode_seed


class Walk(ParallelEnv):
    """Two agents step along a line for `length` steps; an agent at an odd position costs 1.

    The keyword flags break one rule each: `cost=False` leaves the cost out of the infos,
    `leaves_at` ends agent_1's episode alone at that step, `partial_reset` starts only
    agent_0, `mixed_actions` gives agent_1 a third action, `discrete_obs` observes a Discrete,
    `negative_cost` reports cost -1, `unseeded` draws from NumPy's global generator.
    """

    def __init__(
        self,
        render_mode: str | None = None,
        length: int = 6,
        *,
        cost: bool = True,
        leaves_at: int | None = None,
        partial_reset: bool = False,
        mixed_actions: bool = False,
        discrete_obs: bool = False,
        negative_cost: bool = False,
        unseeded: bool = False,
    ) -> None:
        self.render_mode, self.length = render_mode, length
        self.flags = {
            "cost": cost,
            "leaves_at": leaves_at,
            "partial_reset": partial_reset,
            "negative_cost": negative_cost,
            "unseeded": unseeded,
        }
        self.mixed_actions, self.discrete_obs = mixed_actions, discrete_obs
        self.metadata = {"name": "walk", "render_modes": ["rgb_array"], "render_fps": 4}
        self.possible_agents = ["agent_0", "agent_1"]
        self.rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space:
        if self.discrete_obs:
            return spaces.Discrete(4)
        return spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3 if self.mixed_actions and agent == "agent_1" else 2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.array([self.pos[a], self.t], dtype=np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = (
            self.possible_agents[:1] if self.flags["partial_reset"] else list(self.possible_agents)
        )
        self.t = 0
        self.pos = {a: int(self.rng.integers(0, 3)) for a in self.possible_agents}
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple:
        self.t += 1
        for agent in self.agents:
            noise = np.random.random() if self.flags["unseeded"] else self.rng.random()
            self.pos[agent] += int(actions[agent]) + int(noise < 0.3)
        obs = self._obs()
        rewards = {a: float(actions[a]) for a in self.agents}
        sign = -1.0 if self.flags["negative_cost"] else 1.0
        infos = {
            a: ({"cost": sign * (self.pos[a] % 2)} if self.flags["cost"] else {})
            for a in self.agents
        }
        done = self.t >= self.length
        ends = dict.fromkeys(self.agents, done)
        if self.flags["leaves_at"] == self.t:
            ends["agent_1"] = True
        truncations = dict.fromkeys(self.agents, False)
        self.agents = [] if done else [a for a in self.agents if not ends[a]]
        return obs, rewards, ends, truncations, infos

    def render(self) -> np.ndarray:
        return np.zeros((16, 16, 3), dtype=np.uint8)


class StatefulWalk(Walk):
    """The valid task, snapshotting itself (the vector env then needs no replay)."""

    def get_state(self) -> dict[str, Any]:
        return {"t": self.t, "pos": dict(self.pos), "rng": self.rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        self.agents = list(self.possible_agents)
        self.t, self.pos = int(state["t"]), {a: int(p) for a, p in state["pos"].items()}
        self.rng.bit_generator.state = state["rng"]


class WalkVector(VectorEnv):
    """`Walk` vectorised by hand, step for step what a list of `Walk`s gives (its episodes
    seeded like a task's: `next_episode_seed`); a task's own VectorEnv."""

    def __init__(
        self, *, num_envs: int, seed: Any = None, length: int = 6, max_steps: int = 50
    ) -> None:
        self.name, self.num_envs, self.length, self.max_steps = "walk", num_envs, length, max_steps
        self.agents, self.n_agents, self.obs_dim, self.n_actions = ["agent_0", "agent_1"], 2, 2, 2
        self._initial = None if seed is None else [seed + e for e in range(num_envs)]
        self._started = False
        self.seeds = [0] * num_envs
        self.rngs = [np.random.default_rng(0) for _ in range(num_envs)]
        self.pos = np.zeros((num_envs, 2), dtype=np.int64)
        self.t = np.zeros(num_envs, dtype=np.int64)

    def _reset_copy(self, e: int, seed: int) -> None:
        self.seeds[e], self.rngs[e], self.t[e] = seed, np.random.default_rng(seed), 0
        self.pos[e] = [int(self.rngs[e].integers(0, 3)) for _ in self.agents]

    def _obs(self) -> np.ndarray:
        return np.stack([self.pos, np.repeat(self.t[:, None], 2, axis=1)], -1).astype(np.float32)

    def reset(self, seed: Any = None) -> np.ndarray:
        seeds = first_reset_seeds(
            seed, self.num_envs, initial=self._initial, started=self._started
        ) or [next_episode_seed(s) for s in self.seeds]
        for e, value in enumerate(seeds):
            self._reset_copy(e, value)
        self._started = True
        return self._obs()

    def step(self, actions: np.ndarray) -> StepResult:
        actions = check_actions(actions, self.num_envs, 2, 2)
        for e in range(self.num_envs):
            for i in range(2):
                self.pos[e, i] += int(actions[e, i]) + int(self.rngs[e].random() < 0.3)
        self.t += 1
        final = self._obs()
        cost = (self.pos % 2).astype(np.float32)
        terminated = np.repeat((self.t >= self.length)[:, None], 2, axis=1)
        truncated = np.repeat((self.t >= self.max_steps)[:, None], 2, axis=1) & ~terminated
        steps = self.t.copy()
        for e in np.flatnonzero(terminated[:, 0] | truncated[:, 0]):
            self._reset_copy(e, next_episode_seed(self.seeds[e]))
        reward = actions.astype(np.float32)
        return StepResult(self._obs(), reward, cost, terminated, truncated, final, steps)

    def get_state(self) -> dict[str, Any]:
        return {"seeds": list(self.seeds), "pos": self.pos.copy(), "t": self.t.copy(),
                "rngs": [rng.bit_generator.state for rng in self.rngs]}  # fmt: skip

    def set_state(self, state: dict[str, Any]) -> None:
        self.seeds, self.pos, self.t = list(state["seeds"]), state["pos"].copy(), state["t"].copy()
        for rng, saved in zip(self.rngs, state["rngs"], strict=True):
            rng.bit_generator.state = saved
        self._started = True

    def render(self, index: int = 0) -> np.ndarray:
        return np.zeros((16, 16, 3), dtype=np.uint8)


def walk(render_mode: str | None = None, **params: Any) -> Walk:
    """The valid task."""
    return Walk(render_mode, **params)


def stateful_walk(render_mode: str | None = None, **params: Any) -> StatefulWalk:
    """The valid task with get_state() and set_state()."""
    return StatefulWalk(render_mode, **params)


def without_cost(render_mode: str | None = None) -> Walk:
    """No cost in its infos (and the config names no cost function)."""
    return Walk(render_mode, cost=False)


def agent_leaves(render_mode: str | None = None) -> Walk:
    """agent_1's episode ends at step 2 while agent_0 goes on."""
    return Walk(render_mode, leaves_at=2)


def partial_reset(render_mode: str | None = None) -> Walk:
    """reset() starts agent_0 only."""
    return Walk(render_mode, partial_reset=True)


def mixed_actions(render_mode: str | None = None) -> Walk:
    """agent_1 has three actions, agent_0 two."""
    return Walk(render_mode, mixed_actions=True)


def discrete_observations(render_mode: str | None = None) -> Walk:
    """Observations are a Discrete space."""
    return Walk(render_mode, discrete_obs=True)


def negative_cost(render_mode: str | None = None) -> Walk:
    """Reports a cost of -1."""
    return Walk(render_mode, negative_cost=True)


def unseeded(render_mode: str | None = None) -> Walk:
    """Draws from NumPy's global generator: not reproducible from its reset seed."""
    return Walk(render_mode, unseeded=True)


NOT_A_FACTORY = 3
"""An import path that names something other than a callable."""


class NoMethods:
    """An algorithm class without the methods the pipeline calls."""

    def __init__(self, config: Any, env: Any) -> None:
        self.config = config


class _AllMethods:
    """An algorithm class with every required method (they are never called here)."""

    def __init__(self, config: Any, env: Any) -> None:
        self.config = config

    def train(self, *, callbacks: Any = (), progress: bool = True) -> None: ...

    def state(self) -> dict: ...

    def load_state(self, state: dict) -> None: ...

    def policy_state(self) -> dict: ...

    @classmethod
    def load_actor(cls, policy_state: dict, config: Any, *, shielded: bool = True) -> None: ...


class WithoutPPO(_AllMethods):
    """Declares run-config sections without `ppo`."""

    sections = ("shield",)


class PixelActions(_AllMethods):
    """Declares an action kind the pipeline does not know."""

    action_kinds = ("pixels",)


class NotABool(_AllMethods):
    """Declares `shielded` as a string."""

    shielded = "yes"


def not_vector(*, num_envs: int, seed: Any = None, **params: Any) -> Walk:
    """A vector factory returning a ParallelEnv instead of a VectorEnv."""
    return Walk(None)


class ShieldedPenalty(ShieldedIPPO):
    """The built-in shielded IPPO learning from reward minus the cost: a shielded algorithm
    given by import path."""

    constrained = True
    shielded = True
    sections = ("ppo", "shield")

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        super().observe(obs, executed, result)
        self._cost = result.cost

    def shaped_reward(self, reward: np.ndarray, intervened: np.ndarray) -> np.ndarray:
        return super().shaped_reward(reward, intervened) - self._cost
