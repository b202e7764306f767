"""The PettingZoo ``ParallelEnv`` view of one copy of a batched grid core.

The view is the batched core with ``num_envs=1`` and no auto-reset, so a ParallelEnv episode
is exactly copy 0 of a vector env seeded the same way.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from src.envs.grid_core import GridConfig, GridVectorEnv

__all__ = ["GridParallelEnv"]

RENDER_FPS = 5


class GridParallelEnv(ParallelEnv):
    """A PettingZoo ParallelEnv over one copy of a :class:`GridVectorEnv` subclass.

    ``infos[agent]["cost"]`` carries the safety cost of every step. The hidden cap is the
    instance attribute ``max_steps`` (read by ``infer_episode_cap``); agents never observe it.
    """

    def __init__(
        self,
        core_class: type[GridVectorEnv],
        config: GridConfig,
        *,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.core = core_class(config, num_envs=1, autoreset=False)
        self.max_steps = self.core.max_steps
        self.render_mode = render_mode
        self.metadata = {
            "name": self.core.name,
            "render_modes": ["rgb_array"],
            "render_fps": RENDER_FPS,
            "is_parallelizable": True,
        }
        self.possible_agents = list(self.core.agents)
        self.agents = []
        box = spaces.Box(low=-1.0, high=1.0, shape=(self.core.obs_dim,), dtype=np.float32)
        self._observation_spaces = {agent: box for agent in self.possible_agents}
        self._action_spaces = {
            agent: spaces.Discrete(self.core.n_actions) for agent in self.possible_agents
        }
        self.state_space = spaces.Box(
            low=-1.0, high=1.0, shape=(self.core.state_dim,), dtype=np.float32
        )

    def observation_space(self, agent: str) -> spaces.Space:
        """The (shared) observation space of ``agent``."""
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The action space of ``agent``: Discrete(5), stay/up/down/left/right."""
        return self._action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Start an episode; ``seed=None`` continues the random stream."""
        obs = self.core.reset(seed)[0]
        self.agents = list(self.possible_agents)
        return (
            {agent: obs[i] for i, agent in enumerate(self.possible_agents)},
            {agent: {} for agent in self.possible_agents},
        )

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[
        dict[str, np.ndarray],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict],
    ]:
        """Step every agent; after the episode has ended, returns empty dicts."""
        if not self.agents:
            return {}, {}, {}, {}, {}
        missing = [agent for agent in self.possible_agents if agent not in actions]
        if missing:
            raise ValueError(f"actions lack the agents {missing}")
        joint = np.array([[actions[agent] for agent in self.possible_agents]])
        result = self.core.step(joint)
        obs, reward, cost = result.final_obs[0], result.reward[0], result.cost[0]
        terminated, truncated = bool(result.terminated[0, 0]), bool(result.truncated[0, 0])
        if terminated or truncated:
            self.agents = []
        names = self.possible_agents
        return (
            {agent: obs[i] for i, agent in enumerate(names)},
            {agent: float(reward[i]) for i, agent in enumerate(names)},
            dict.fromkeys(names, terminated),
            dict.fromkeys(names, truncated),
            {agent: {"cost": float(cost[i])} for i, agent in enumerate(names)},
        )

    def state(self) -> np.ndarray:
        """Global state: positions, goals, on-goal flags (and moves), full hazard map."""
        return self.core.global_state()[0]

    def render(self) -> np.ndarray | None:
        """An ``[H, W, 3]`` uint8 frame in ``rgb_array`` mode, else ``None`` with a warning."""
        if self.render_mode is None:
            warnings.warn(
                "render() called without render_mode; make the env with render_mode='rgb_array'",
                stacklevel=2,
            )
            return None
        return self.core.render(0)

    def close(self) -> None:
        """Nothing to release: the core holds only arrays."""
