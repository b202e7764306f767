"""The PettingZoo ``ParallelEnv`` view of one copy of the native ``spread`` core.

The view is :class:`~src.envs.spread_core.NativeSpreadVectorEnv` with ``num_envs=1`` and no
auto-reset, so a ParallelEnv episode is exactly copy 0 of a vector env seeded the same way, and
it returns what ``simple_spread_v3.parallel_env(..., benchmark_data=True)`` returns: the same
observations, float64 rewards, truncations, spaces, ``state()`` and ``infos[agent]
["benchmark_data"]``, plus ``infos[agent]["cost"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from src.envs.base import StepResult
from src.envs.parallel import CoreParallelEnv
from src.envs.spread_core import ACTION_WIDTH, NativeSpreadVectorEnv, SpreadConfig

__all__ = ["NativeSpreadParallelEnv"]

RENDER_FPS = 10  # mpe2's


class NativeSpreadParallelEnv(CoreParallelEnv):
    """A PettingZoo ParallelEnv over one copy of the native ``spread`` core.

    The hidden cap is the instance attribute ``max_cycles`` (read by ``infer_episode_cap``, and
    mpe2's name for it); agents never observe it. Observations are ``6 N`` unbounded float32
    values; actions are Discrete(5), or Box(0, 1, (5,)) if continuous. ``state()`` is every
    agent's observation in agent order (mpe2's ``state()``), and frames are ``[700, 700, 3]``.
    """

    core: NativeSpreadVectorEnv

    def __init__(self, config: SpreadConfig, *, render_mode: str | None = None) -> None:
        super().__init__(
            NativeSpreadVectorEnv, config, render_mode=render_mode, render_fps=RENDER_FPS
        )
        self.max_cycles = self.core.max_steps
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
        self._action_spaces = {
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

    def _joint_actions(self, actions: dict[str, Any]) -> np.ndarray:
        """The core's ``[1, A]`` discrete or ``[1, A, 5]`` continuous actions."""
        if self._continuous:
            return np.stack([np.asarray(actions[agent]) for agent in self.possible_agents])[None]
        return super()._joint_actions(actions)

    def _rewards(self, result: StepResult) -> list[float]:
        """The float64 rewards of the step, as mpe2 returns them."""
        return self.core.last_reward[0].tolist()

    def _extra_infos(self) -> list[dict[str, Any]]:
        """mpe2's ``benchmark_data`` of every agent."""
        return [{"benchmark_data": row} for row in self.core.benchmark_data(0)]
