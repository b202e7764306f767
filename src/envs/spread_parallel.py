"""The PettingZoo ``ParallelEnv`` view of one copy of the native ``spread`` core.

The view is :class:`~src.envs.spread_core.NativeSpreadVectorEnv` with ``num_envs=1`` and no
auto-reset, so a ParallelEnv episode is exactly copy 0 of a vector env seeded the same way, and
it returns what ``simple_spread_v3.parallel_env(..., benchmark_data=True)`` returns: the same
observations, float64 rewards, truncations, spaces, ``state()`` and ``infos[agent]
["benchmark_data"]``, plus ``infos[agent]["cost"]``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from src.envs.spread_core import ACTION_WIDTH, NativeSpreadVectorEnv, SpreadConfig

__all__ = ["NativeSpreadParallelEnv"]

RENDER_FPS = 10  # mpe2's


class NativeSpreadParallelEnv(ParallelEnv):
    """A PettingZoo ParallelEnv over one copy of the native ``spread`` core.

    The hidden cap is the instance attribute ``max_cycles`` (read by ``infer_episode_cap``, and
    mpe2's name for it); agents never observe it.
    """

    def __init__(self, config: SpreadConfig, *, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.core = NativeSpreadVectorEnv(config, num_envs=1, autoreset=False)
        self.max_cycles = self.core.max_steps
        self.render_mode = render_mode
        self.metadata = {
            "name": self.core.name,
            "render_modes": ["rgb_array"],
            "render_fps": RENDER_FPS,
            "is_parallelizable": True,
        }
        self.possible_agents = list(self.core.agents)
        self.agents = []
        self._continuous = self.core.continuous_actions
        # One space object per agent (as mpe2 has), so seeding one never moves another.
        self._observation_spaces = {
            agent: spaces.Box(
                low=-np.float32(np.inf),
                high=np.float32(np.inf),
                shape=(self.core.obs_dim,),
                dtype=np.float32,
            )
            for agent in self.possible_agents
        }
        self._action_spaces: dict[str, spaces.Space] = {
            agent: (
                spaces.Box(low=0.0, high=1.0, shape=(ACTION_WIDTH,), dtype=np.float32)
                if self._continuous
                else spaces.Discrete(ACTION_WIDTH)
            )
            for agent in self.possible_agents
        }
        self.state_space = spaces.Box(
            low=-np.float32(np.inf),
            high=np.float32(np.inf),
            shape=(self.core.state_dim,),
            dtype=np.float32,
        )

    def observation_space(self, agent: str) -> spaces.Space:
        """The observation space of ``agent``: ``6 N`` unbounded float32 values."""
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The action space of ``agent``: Discrete(5), or Box(0, 1, (5,)) if continuous."""
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
        if self._continuous:
            joint = np.stack([np.asarray(actions[agent]) for agent in self.possible_agents])[None]
        else:
            joint = np.array([[actions[agent] for agent in self.possible_agents]])
        result = self.core.step(joint)
        obs, cost = result.final_obs[0], result.cost[0]
        rewards = self.core.last_reward[0].tolist()  # float64, as mpe2 returns them
        truncated = bool(result.truncated[0, 0])
        if truncated:
            self.agents = []
        names = self.possible_agents
        benchmark = self.core.benchmark_data(0)
        return (
            {agent: obs[i] for i, agent in enumerate(names)},
            dict(zip(names, rewards, strict=True)),
            dict.fromkeys(names, False),
            dict.fromkeys(names, truncated),
            {
                agent: {"benchmark_data": benchmark[i], "cost": float(cost[i])}
                for i, agent in enumerate(names)
            },
        )

    def state(self) -> np.ndarray:
        """Global state: every agent's observation in agent order (mpe2's ``state()``)."""
        return self.core.global_state()[0]

    def render(self) -> np.ndarray | None:
        """A ``[700, 700, 3]`` uint8 frame in ``rgb_array`` mode, else ``None`` with a warning."""
        if self.render_mode is None:
            warnings.warn(
                "render() called without render_mode; make the env with render_mode='rgb_array'",
                stacklevel=2,
            )
            return None
        return self.core.render(0)

    def close(self) -> None:
        """Nothing to release: the core holds only arrays."""
