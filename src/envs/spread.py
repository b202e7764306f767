"""``spread_mpe2``: mpe2's ``simple_spread_v3`` itself, with collisions as the safety cost.

This is the reference the native ``spread`` (:mod:`src.envs.spread_core`) is tested against;
both take the same :class:`~src.envs.spread_core.SpreadConfig`. mpe2 is created with
``benchmark_data=True``, which puts ``(reward, collisions, min_dists, occupied_landmarks)`` into
``infos[agent]["benchmark_data"]`` every step; ``collisions`` counts the other agents overlapping
the agent. The cost of an agent is 1 if it collides with at least one other agent at that step,
else 0. The hidden cap is mpe2's ``max_cycles`` (truncation); mpe2 never terminates the task
early here.

The vector interface is a list of ``num_envs`` mpe2 parallel envs stepped in a loop. With
``continuous_actions`` the actions are ``[E, A, 5]`` float arrays, passed to mpe2 per agent as
float32 or float64 arrays as given (mpe2 clips them to [0, 1]).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from gymnasium import spaces
from mpe2 import simple_spread_v3
from pettingzoo import ParallelEnv

from src.envs.base import (
    StepResult,
    VectorEnv,
    check_actions,
    check_config,
    check_int,
    check_snapshot,
    require_reset,
    resolve_seeds,
)
from src.envs.parallel import ParallelReset, ParallelStep, check_render_mode
from src.envs.spread_core import ACTION_WIDTH, SpreadConfig, check_continuous_actions

__all__ = ["SpreadConfig", "SpreadParallelEnv", "SpreadVectorEnv"]

_COLLISIONS = 1  # index of the collision count in mpe2's benchmark_data tuple


def _make_mpe(config: SpreadConfig, render_mode: str | None) -> ParallelEnv:
    return simple_spread_v3.parallel_env(
        N=config.n_agents,
        local_ratio=config.local_ratio,
        max_cycles=config.max_steps,
        continuous_actions=config.continuous_actions,
        render_mode=render_mode,
        benchmark_data=True,
    )


def _cost(info: dict[str, Any]) -> float:
    return 1.0 if info["benchmark_data"][_COLLISIONS] > 0 else 0.0


class SpreadParallelEnv(ParallelEnv):
    """mpe2's ``simple_spread_v3`` parallel env plus ``infos[agent]["cost"]``.

    The wrapped env is ``self.env``; the hidden cap is the instance attribute ``max_cycles``
    (so ``infer_episode_cap`` finds it on this layer as well as inside mpe2).
    """

    def __init__(self, config: SpreadConfig, *, render_mode: str | None = None) -> None:
        check_render_mode(render_mode)
        self.env = _make_mpe(config, render_mode)
        self.max_cycles = config.max_steps
        self.render_mode = render_mode
        self.metadata = {**self.env.metadata, "name": "spread_mpe2"}
        self.possible_agents = list(self.env.possible_agents)
        self.agents = []
        self.state_space = self.env.state_space

    def observation_space(self, agent: str) -> spaces.Space:
        """mpe2's observation space of ``agent``."""
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        """mpe2's action space of ``agent`` (Discrete(5), or Box(0, 1, (5,)) if continuous)."""
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict | None = None) -> ParallelReset:
        """Reset mpe2; ``seed=None`` continues its random stream."""
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return obs, infos

    def step(self, actions: dict[str, Any]) -> ParallelStep:
        """Step mpe2 and add ``infos[agent]["cost"]``."""
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        self.agents = list(self.env.agents)
        infos = {agent: {**info, "cost": _cost(info)} for agent, info in infos.items()}
        return obs, {a: float(r) for a, r in rewards.items()}, terminations, truncations, infos

    def state(self) -> np.ndarray:
        """mpe2's global state (all agents' observations concatenated)."""
        return self.env.state()

    def render(self) -> np.ndarray | None:
        """mpe2's frame (pygame drawing offscreen) in ``rgb_array`` mode."""
        return self.env.render()

    def close(self) -> None:
        """Close mpe2 (releases pygame)."""
        self.env.close()


class SpreadVectorEnv(VectorEnv):
    """``num_envs`` mpe2 ``simple_spread_v3`` envs behind the vector interface.

    Copy ``e`` is seeded with its own seed on a seeded reset; auto-resets continue its own
    mpe2 random stream, so copy ``e`` of a batch equals a single env seeded the same way.
    """

    name = "spread_mpe2"
    n_actions = ACTION_WIDTH

    def __init__(
        self,
        config: SpreadConfig,
        *,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
    ) -> None:
        check_config(config, SpreadConfig)
        check_int("num_envs", num_envs, low=1)
        self.config = config
        self.num_envs = num_envs
        self.n_agents = config.n_agents
        self.max_steps = config.max_steps
        self.continuous_actions = bool(config.continuous_actions)
        self.action_shape: tuple[int, ...] = (ACTION_WIDTH,) if self.continuous_actions else ()
        self._initial_seeds = resolve_seeds(seed, num_envs)
        # rgb_array only matters when render() is called; stepping never draws.
        self._envs = [_make_mpe(config, "rgb_array") for _ in range(num_envs)]
        self.agents = list(self._envs[0].possible_agents)
        self.obs_dim = int(self._envs[0].observation_space(self.agents[0]).shape[0])
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._was_reset = False

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Reset every copy; returns obs ``[E, A, D]`` float32."""
        seeds = resolve_seeds(seed, self.num_envs)
        if seeds is None and not self._was_reset:
            seeds = self._initial_seeds
        obs = np.empty((self.num_envs, self.n_agents, self.obs_dim), dtype=np.float32)
        for e, env in enumerate(self._envs):
            observations, _ = env.reset(seed=None if seeds is None else seeds[e])
            obs[e] = [observations[agent] for agent in self.agents]
        self._steps[:] = 0
        self._was_reset = True
        return obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every copy once; finished copies reset (continuing their stream)."""
        require_reset(self._was_reset, "step")
        if self.continuous_actions:
            act = check_continuous_actions(actions, self.num_envs, self.n_agents)
            rows = list(act)  # [A, 5] arrays: mpe2 takes one array per agent
        else:
            rows = check_actions(actions, self.num_envs, self.n_agents, self.n_actions).tolist()
        agents = self.agents
        # Plain lists per copy, converted once at the end: far cheaper than per-copy array writes.
        obs_rows, reward_rows, cost_rows = [], [], []
        finished: list[tuple[int, dict[str, bool], dict[str, bool]]] = []
        for e, (env, row) in enumerate(zip(self._envs, rows, strict=True)):
            observations, rewards, terms, truncs, infos = env.step(
                dict(zip(agents, row, strict=True))
            )
            obs_rows.append([observations[agent] for agent in agents])
            reward_rows.append([rewards[agent] for agent in agents])
            cost_rows.append([infos[agent]["benchmark_data"][_COLLISIONS] > 0 for agent in agents])
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
            observations, _ = self._envs[e].reset()
            obs[e] = [observations[agent] for agent in agents]
            self._steps[e] = 0
        reward = np.array(reward_rows, dtype=np.float32)
        cost = np.array(cost_rows, dtype=np.float32)
        return StepResult(
            obs, reward, cost, terminated, truncated, final_obs, episode_step, collision=cost > 0
        )

    def get_state(self) -> dict[str, Any]:
        """Positions, velocities, step counters and mpe2 RNG states of every copy."""
        require_reset(self._was_reset, "get_state")
        copies = []
        for env in self._envs:
            raw = env.unwrapped
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
        for env, saved in zip(self._envs, copies, strict=True):
            raw = env.unwrapped
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
        self._steps = np.array(state["steps"], dtype=np.int64)

    def render(self, index: int = 0) -> np.ndarray:
        """mpe2's ``rgb_array`` frame of copy ``index``."""
        check_int("index", index, low=0, high=self.num_envs - 1)
        frame = self._envs[index].render()
        assert frame is not None
        return frame

    def close(self) -> None:
        """Close every mpe2 env."""
        for env in self._envs:
            env.close()
