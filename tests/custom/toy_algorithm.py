"""A toy algorithm given by import path, written outside `src/`: all the pipeline needs of one.

`Preferences` learns, for each agent, a distribution over its actions that ignores the
observation: softmax preferences over Discrete actions, or the mean of a Gaussian over Box
actions. REINFORCE pushes it towards actions whose step reward minus cost beats a running
baseline. It shares no code with IPPO: it has the methods of
`src.algos.registry.REQUIRED_METHODS`, declares its capabilities as class attributes, and its
`load_actor` gives the evaluation and the videos an actor with `reset` and `act`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.tracker import EpisodeTracker
from src.config.run import RunConfig
from src.records import EpisodeLog
from src.seeds import copy_seeds

BOX_STD = 0.2
"""Standard deviation of the Gaussian over Box actions, as a fraction of the action range."""


def _bounds(env: Any) -> tuple[np.ndarray, np.ndarray]:
    space = env.action_space
    return np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)


class PreferenceActor:
    """Samples from the learned preferences; no shield."""

    shielded = False
    last_intervened = None

    def __init__(self, prefs: np.ndarray, low: np.ndarray | None, high: np.ndarray | None) -> None:
        self.prefs, self.low, self.high = prefs, low, high
        self.rng = np.random.default_rng(0)

    def reset(self, num_envs: int, seed: int) -> None:
        """Start sampling from a generator seeded with `seed`."""
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        """Actions `[E, A]` (Discrete) or `[E, A, ...]` (Box) for observations `[E, A, D]`."""
        return _sample(self.prefs, self.rng, len(obs), self.low, self.high)[0]


def _sample(
    prefs: np.ndarray,
    rng: np.random.Generator,
    copies: int,
    low: np.ndarray | None,
    high: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Actions for `copies` env copies, and the gradient of their log-probability."""
    if low is None:  # Discrete: prefs [A, n] are logits
        probs = np.exp(prefs - prefs.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        u = rng.random((copies, prefs.shape[0], 1))
        actions = np.minimum((np.cumsum(probs, axis=-1) < u).sum(axis=-1), prefs.shape[1] - 1)
        score = np.eye(prefs.shape[1])[actions] - probs
        return actions.astype(np.int64), score
    std = BOX_STD * (high - low)  # prefs [A, ...] are means
    noise = rng.standard_normal((copies, *prefs.shape))
    actions = np.clip(prefs + std * noise, low, high).astype(np.float32)
    return actions, noise / std


class Preferences:
    """Observation-free action preferences per agent, REINFORCE on reward minus cost."""

    description = "observation-free action preferences, REINFORCE on reward minus cost"
    constrained = True  # it learns from the cost
    shielded = False
    multiplier = False
    sections = ("ppo",)  # num_envs, rollouts, learning_rate
    action_kinds = ("discrete", "box")

    def __init__(self, config: RunConfig, env: Any) -> None:
        self.config, self.env = config, env
        ppo = config.ppo
        self.num_updates, self.steps_per_update = ppo.num_updates, ppo.steps_per_update
        self.rollouts, self.learning_rate = ppo.rollouts, ppo.learning_rate
        self.box = bool(getattr(env, "continuous_actions", False))
        self.low, self.high = _bounds(env) if self.box else (None, None)
        shape = env.action_shape if self.box else (env.n_actions,)
        self.prefs = (
            np.broadcast_to((self.low + self.high) / 2, (env.n_agents, *shape)).copy()
            if self.box
            else np.zeros((env.n_agents, *shape))
        )
        self.rng = np.random.default_rng(config.seed)
        self.baseline = 0.0
        self.tracker = EpisodeTracker(
            num_envs=env.num_envs,
            n_agents=env.n_agents,
            env=config.env_name,
            algo=config.algo,
            run=config.run_idx,
        )
        self.history: list[EpisodeLog] = []
        self.updates: list[dict[str, Any]] = []
        self.update = self.vector_step = 0
        self.wall_time = 0.0
        self._obs: np.ndarray | None = None

    def train(self, *, callbacks: Sequence[Any] = (), progress: bool = True) -> None:
        """Run the remaining updates; each callback's `on_update_end(self)` after each one."""
        env = self.env
        if self._obs is None:
            self._obs = env.reset(seed=copy_seeds(self.config.seed, env.num_envs))
        no_shield = np.zeros((env.num_envs, env.n_agents), dtype=bool)
        while self.update < self.num_updates:
            started, first = time.perf_counter(), len(self.history)
            gradient = np.zeros_like(self.prefs)
            for _ in range(self.rollouts):
                actions, score = _sample(self.prefs, self.rng, env.num_envs, self.low, self.high)
                result = env.step(actions)
                signal = (result.reward - result.cost).astype(np.float64)  # [E, A]
                advantage = signal - self.baseline
                self.baseline += 0.05 * (float(signal.mean()) - self.baseline)
                extra = (1,) * (score.ndim - advantage.ndim)
                gradient += (score * advantage.reshape(*advantage.shape, *extra)).mean(axis=0)
                _, finished = self.tracker.record(result, no_shield, self.vector_step)
                self.history += finished
                self.vector_step += 1
                self._obs = result.obs
            self.prefs += self.learning_rate * gradient / self.rollouts
            if self.box:
                self.prefs = np.clip(self.prefs, self.low, self.high)
            self.wall_time += time.perf_counter() - started
            self.updates.append(self._row(self.history[first:]))
            self.update += 1
            for callback in callbacks:
                callback.on_update_end(self)

    def _row(self, episodes: list[EpisodeLog]) -> dict[str, Any]:
        def mean(values: list[float]) -> float | None:
            return float(np.mean(values)) if values else None

        return {
            "update": self.update,
            "global_step": self.vector_step * self.env.num_envs,
            "wall_time": self.wall_time,
            M.GLOBAL_STEP: self.vector_step * self.env.num_envs,
            M.EPISODE_RETURN: mean([e.team_return for e in episodes]),
            M.EPISODE_LENGTH: mean([e.length for e in episodes]),
            M.EPISODE_COST: mean([e.cost for e in episodes]),
            M.VIOLATION_RATE: mean([float(e.violated) for e in episodes]),
            M.LEARNING_RATE: self.learning_rate,
        }

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs (arrays, numbers and lists: checkpoint formats)."""
        return {
            "prefs": self.prefs.copy(),
            "baseline": self.baseline,
            "rng": self.rng.bit_generator.state,
            "update": self.update,
            "vector_step": self.vector_step,
            "wall_time": self.wall_time,
            "obs": self._obs,
            "env": self.env.get_state(),
            "history": [episode.to_dict() for episode in self.history],
            "updates": list(self.updates),
            "tracker": self.tracker.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state()` returned."""
        self.prefs = np.array(state["prefs"], dtype=np.float64)
        self.baseline = float(state["baseline"])
        self.rng.bit_generator.state = state["rng"]
        self.update, self.vector_step = int(state["update"]), int(state["vector_step"])
        self.wall_time = float(state["wall_time"])
        self._obs = state["obs"]
        self.env.set_state(state["env"])
        self.history = [EpisodeLog.from_dict(entry) for entry in state["history"]]
        self.updates = list(state["updates"])
        self.tracker.load_state_dict(state["tracker"])

    def policy_state(self) -> dict[str, Any]:
        """policy.pt: the preferences (and Box bounds) and the run config."""
        state: dict[str, Any] = {
            "config": self.config.to_dict(),
            "prefs": torch.from_numpy(self.prefs.copy()),
        }
        if self.box:
            state["low"], state["high"] = torch.from_numpy(self.low), torch.from_numpy(self.high)
        return state

    @classmethod
    def load_actor(
        cls, policy_state: dict[str, Any], config: RunConfig, *, shielded: bool = True
    ) -> PreferenceActor:
        """The actor of a policy.pt content (it has no shield to switch)."""
        low, high = policy_state.get("low"), policy_state.get("high")
        return PreferenceActor(
            policy_state["prefs"].numpy(),
            None if low is None else low.numpy(),
            None if high is None else high.numpy(),
        )
