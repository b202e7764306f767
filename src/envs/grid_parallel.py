"""The PettingZoo ``ParallelEnv`` view of one copy of a batched grid core.

The view is the batched core with ``num_envs=1`` and no auto-reset, so a ParallelEnv episode
is exactly copy 0 of a vector env seeded the same way.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from src.envs.grid_core import GridConfig, GridVectorEnv
from src.envs.parallel import CoreParallelEnv

__all__ = ["GridParallelEnv"]

RENDER_FPS = 5


class GridParallelEnv(CoreParallelEnv):
    """A PettingZoo ParallelEnv over one copy of a :class:`GridVectorEnv` subclass.

    ``infos[agent]["cost"]`` carries the safety cost of every step. The hidden cap is the
    instance attribute ``max_steps`` (read by ``infer_episode_cap``); agents never observe it.
    Every agent has the same observation space object and the action space Discrete(5),
    stay/up/down/left/right. ``state()`` is positions, goals, on-goal flags (and moves) and the
    full hazard map.
    """

    core: GridVectorEnv

    def __init__(
        self,
        core_class: type[GridVectorEnv],
        config: GridConfig,
        *,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(core_class, config, render_mode=render_mode, render_fps=RENDER_FPS)
        self.max_steps = self.core.max_steps
        box = spaces.Box(low=-1.0, high=1.0, shape=(self.core.obs_dim,), dtype=np.float32)
        self._observation_spaces = {agent: box for agent in self.possible_agents}
        self._action_spaces = {
            agent: spaces.Discrete(self.core.n_actions) for agent in self.possible_agents
        }
        self.state_space = spaces.Box(
            low=-1.0, high=1.0, shape=(self.core.state_dim,), dtype=np.float32
        )
