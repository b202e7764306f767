"""Tasks given by import path for the Box-action tests: a team mixing Discrete and Box agents.

`MixedSpread` is `spread` with continuous actions whose first agent says it has Discrete(5)
actions: only the spaces matter, as the pipeline refuses the team before it steps. `mixed_team`
is its factory; `continuous_spread` (the batched `spread`, whose agents' spaces the trainer reads
from the factory) and `continuous_spread_with_space` (the same with the `action_space` a task's
own VectorEnv of Box actions gives) are VectorEnvs of its own for the task given with `vector:`,
which no `ParallelVectorEnv` checks agent by agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from src.envs.spread_core import ACTION_WIDTH, NativeSpreadVectorEnv, SpreadConfig
from src.envs.spread_parallel import NativeSpreadParallelEnv


class MixedSpread(NativeSpreadParallelEnv):
    """`spread` with Box actions, but agent_0 declares Discrete ones."""

    def action_space(self, agent: str) -> spaces.Space:
        """Discrete(5) for the first agent, the Box of continuous spread for the others."""
        if agent == self.possible_agents[0]:
            return spaces.Discrete(ACTION_WIDTH)
        return super().action_space(agent)


def mixed_team(render_mode: str | None = None, **params: Any) -> MixedSpread:
    """The factory of the mixed team (`params`: spread's, `continuous_actions` set)."""
    config = SpreadConfig(**{**params, "continuous_actions": True})
    return MixedSpread(config, render_mode=render_mode)


def continuous_spread(
    *, num_envs: int, seed: int | Sequence[int] | None = None, **params: Any
) -> NativeSpreadVectorEnv:
    """The mixed team's own VectorEnv: batched `spread` with Box actions."""
    config = SpreadConfig(**{**params, "continuous_actions": True})
    return NativeSpreadVectorEnv(config, num_envs=num_envs, seed=seed)


def continuous_spread_with_space(
    *, num_envs: int, seed: int | Sequence[int] | None = None, **params: Any
) -> NativeSpreadVectorEnv:
    """`continuous_spread` with the `action_space` of its Box actions."""
    env = continuous_spread(num_envs=num_envs, seed=seed, **params)
    env.action_space = spaces.Box(0.0, 1.0, (ACTION_WIDTH,), np.float32)
    return env
