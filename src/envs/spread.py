"""``spread_mpe2``: mpe2's ``simple_spread_v3`` itself, with collisions as the safety cost.

This is the reference the native ``spread`` (:mod:`src.envs.spread_core`) is tested against;
both take the same :class:`~src.envs.spread_core.SpreadConfig`. It is mpe2 wrapped the way
every task given by import path is (:mod:`src.envs.task`): a :class:`CostParallelEnv` whose cost
is ``mpe2_collisions`` (:mod:`src.envs.costs`: 1 for an agent overlapping at least one other
agent at that step, else 0, the verdict of mpe2's collision count), and a list of them behind
the vector interface. mpe2 is created with ``benchmark_data=True``, so
``infos[agent]["benchmark_data"]`` holds ``(reward, collisions, min_dists,
occupied_landmarks)`` as in mpe2. The hidden cap is mpe2's ``max_cycles`` (truncation); mpe2
never terminates the task early here.

Unlike a task given by import path, auto-resets continue each copy's own mpe2 random stream
(as native ``spread`` does, seed for seed), and a snapshot is mpe2's world itself. With
``continuous_actions`` the actions are ``[E, A, 5]`` float arrays, passed to mpe2 per agent as
float32 or float64 arrays as given (mpe2 clips them to [0, 1]). Agents spawn as mpe2 spawns
them (``spawn="mpe2"``); ``spawn="separated"`` is the native ``spread``'s alone and is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from mpe2 import simple_spread_v3
from pettingzoo import ParallelEnv

from src.envs.base import check_config, check_snapshot, require_reset
from src.envs.costs import mpe2_collisions
from src.envs.parallel import check_render_mode
from src.envs.spread_core import SpreadConfig, check_continuous_actions
from src.envs.task import CostParallelEnv, ParallelVectorEnv

__all__ = ["SpreadConfig", "SpreadParallelEnv", "SpreadVectorEnv"]

NAME = "spread_mpe2"


def _check_spawn(config: SpreadConfig) -> None:
    """Refuse a spawn mpe2 does not have (mpe2 places every agent uniformly, independently)."""
    if config.spawn != "mpe2":
        raise ValueError(
            f"spawn={config.spawn!r} is native spread's alone: {NAME} spawns as mpe2 does "
            "(spawn='mpe2')"
        )


def _make_mpe(config: SpreadConfig, render_mode: str | None) -> ParallelEnv:
    return simple_spread_v3.parallel_env(
        N=config.n_agents,
        local_ratio=config.local_ratio,
        max_cycles=config.max_steps,
        continuous_actions=config.continuous_actions,
        render_mode=render_mode,
        benchmark_data=True,
    )


class SpreadParallelEnv(CostParallelEnv):
    """mpe2's ``simple_spread_v3`` parallel env plus ``infos[agent]["cost"]``.

    The wrapped env is ``self.env``; the hidden cap is the instance attribute ``max_steps``
    (equal to mpe2's ``max_cycles``, so ``infer_episode_cap`` finds it on both layers).
    """

    def __init__(self, config: SpreadConfig, *, render_mode: str | None = None) -> None:
        check_render_mode(render_mode)
        check_config(config, SpreadConfig)
        _check_spawn(config)
        super().__init__(
            _make_mpe(config, render_mode),
            name=NAME,
            max_steps=config.max_steps,
            cost=mpe2_collisions,
        )


class SpreadVectorEnv(ParallelVectorEnv):
    """``num_envs`` mpe2 ``simple_spread_v3`` envs behind the vector interface.

    Copy ``e`` is seeded with its own seed on a seeded reset; auto-resets continue its own
    mpe2 random stream, so copy ``e`` of a batch equals a single env seeded the same way.
    """

    def __init__(
        self,
        config: SpreadConfig,
        *,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
    ) -> None:
        check_config(config, SpreadConfig)
        _check_spawn(config)
        # rgb_array only matters when render() is called; stepping never draws.
        super().__init__(
            lambda: SpreadParallelEnv(config, render_mode="rgb_array"),
            name=NAME,
            config=config,
            num_envs=num_envs,
            seed=seed,
            reseed_episodes=False,
        )

    def _check_actions(self, actions: np.ndarray) -> list[Any]:
        """Discrete rows, or ``[A, 5]`` continuous rows kept in the dtype given (mpe2 computes
        its controls in that dtype)."""
        if self.continuous_actions:
            return list(check_continuous_actions(actions, self.num_envs, self.n_agents))
        return super()._check_actions(actions)

    def get_state(self) -> dict[str, Any]:
        """Positions, velocities, step counters and mpe2 RNG states of every copy."""
        require_reset(self._was_reset, "get_state")
        copies = []
        for env in self._envs:
            raw = env.env.unwrapped
            copies.append(
                {
                    "p_pos": [entity.state.p_pos.copy() for entity in raw.world.entities],
                    "p_vel": [entity.state.p_vel.copy() for entity in raw.world.entities],
                    "c": [agent.state.c.copy() for agent in raw.world.agents],
                    "mpe_steps": raw.steps,
                    "rng": copy.deepcopy(raw.np_random.bit_generator.state),
                    "cam_range": raw.original_cam_range,
                }
            )
        return {
            "name": self.name,
            "config": asdict(self.config),
            "steps": self._steps.copy(),
            "copies": copies,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot into the live mpe2 envs."""
        check_snapshot(state, name=self.name, config=self.config)
        copies = state.get("copies")
        if not isinstance(copies, list) or len(copies) != self.num_envs:
            raise ValueError(f"state['copies'] must list {self.num_envs} copies")
        if not self._was_reset:
            self.reset()
        steps = np.array(state["steps"], dtype=np.int64)
        for env, saved, count in zip(self._envs, copies, steps, strict=True):
            raw = env.env.unwrapped
            for entity, pos, vel in zip(
                raw.world.entities, saved["p_pos"], saved["p_vel"], strict=True
            ):
                entity.state.p_pos = np.array(pos, dtype=np.float64)
                entity.state.p_vel = np.array(vel, dtype=np.float64)
            for agent, comm in zip(raw.world.agents, saved["c"], strict=True):
                agent.state.c = np.array(comm, dtype=np.float64)
            raw.steps = int(saved["mpe_steps"])
            raw.np_random.bit_generator.state = copy.deepcopy(saved["rng"])
            raw.original_cam_range = saved["cam_range"]
            env.agents, env.steps = list(env.possible_agents), int(count)
        self._steps = steps
