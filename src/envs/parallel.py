"""What the PettingZoo ``ParallelEnv`` views of the environments share.

:class:`CoreParallelEnv` is the view of one copy of a batched core: the core with
``num_envs=1`` and no auto-reset, so a ParallelEnv episode is exactly copy 0 of a vector env
seeded the same way. The grid tasks and the native ``spread`` subclass it; the mpe2-backed
``spread_mpe2`` wraps mpe2 instead and shares only the render-mode check and the return types.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from src.envs.base import StepResult

__all__ = ["CoreParallelEnv", "ParallelReset", "ParallelStep", "check_render_mode"]

ParallelReset: TypeAlias = tuple[dict[str, np.ndarray], dict[str, dict]]
"""What ``ParallelEnv.reset`` returns: observations and infos per agent."""
ParallelStep: TypeAlias = tuple[
    dict[str, np.ndarray],
    dict[str, float],
    dict[str, bool],
    dict[str, bool],
    dict[str, dict],
]
"""What ``ParallelEnv.step`` returns: observations, rewards, terminations, truncations, infos."""


def check_render_mode(render_mode: str | None) -> None:
    """Raise ``ValueError`` unless ``render_mode`` is ``None`` or ``"rgb_array"``."""
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")


class CoreParallelEnv(ParallelEnv):
    """A PettingZoo ParallelEnv over copy 0 of a batched core (``self.core``).

    Subclasses fill ``_observation_spaces``, ``_action_spaces`` and ``state_space``, and set the
    hidden cap as an instance attribute under the name ``infer_episode_cap`` reads. By default
    actions are discrete, rewards are the core's float32 rewards and ``infos[agent]`` holds only
    ``"cost"``, the safety cost of the step (and ``"collision"``, whether that cost includes a
    collision with another agent, where the core tells); :meth:`_joint_actions`,
    :meth:`_rewards` and :meth:`_extra_infos` change that.
    """

    _observation_spaces: dict[str, spaces.Space]
    _action_spaces: dict[str, spaces.Space]
    state_space: spaces.Space

    def __init__(
        self,
        make_core: Callable[..., Any],
        config: Any,
        *,
        render_mode: str | None,
        render_fps: int,
    ) -> None:
        check_render_mode(render_mode)
        self.core = make_core(config, num_envs=1, autoreset=False)
        self.render_mode = render_mode
        self.metadata = {
            "name": self.core.name,
            "render_modes": ["rgb_array"],
            "render_fps": render_fps,
            "is_parallelizable": True,
        }
        self.possible_agents = list(self.core.agents)
        self.agents = []

    def observation_space(self, agent: str) -> spaces.Space:
        """The observation space of ``agent``."""
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The action space of ``agent``."""
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> ParallelReset:
        """Start an episode; ``seed=None`` continues the random stream."""
        obs = self.core.reset(seed)[0]
        self.agents = list(self.possible_agents)
        return (
            {agent: obs[i] for i, agent in enumerate(self.possible_agents)},
            {agent: {} for agent in self.possible_agents},
        )

    def step(self, actions: dict[str, Any]) -> ParallelStep:
        """Step every agent; after the episode has ended, returns empty dicts."""
        if not self.agents:
            return {}, {}, {}, {}, {}
        missing = [agent for agent in self.possible_agents if agent not in actions]
        if missing:
            raise ValueError(f"actions lack the agents {missing}")
        result = self.core.step(self._joint_actions(actions))
        obs, cost = result.final_obs[0], result.cost[0]
        collision = None if result.collision is None else result.collision[0]
        terminated, truncated = bool(result.terminated[0, 0]), bool(result.truncated[0, 0])
        if terminated or truncated:
            self.agents = []
        names = self.possible_agents
        extra = self._extra_infos()
        return (
            {agent: obs[i] for i, agent in enumerate(names)},
            dict(zip(names, self._rewards(result), strict=True)),
            dict.fromkeys(names, terminated),
            dict.fromkeys(names, truncated),
            {
                agent: {**extra[i], "cost": float(cost[i])}
                | ({} if collision is None else {"collision": bool(collision[i])})
                for i, agent in enumerate(names)
            },
        )

    def _joint_actions(self, actions: dict[str, Any]) -> np.ndarray:
        """The core's ``[1, A]`` actions from one discrete action per agent."""
        return np.array([[actions[agent] for agent in self.possible_agents]])

    def _rewards(self, result: StepResult) -> list[float]:
        """The agents' rewards of the step, in agent order."""
        return result.reward[0].tolist()

    def _extra_infos(self) -> list[dict[str, Any]]:
        """Entries of ``infos[agent]`` besides ``"cost"``, in agent order (none by default)."""
        return [{} for _ in self.possible_agents]

    def state(self) -> np.ndarray:
        """The global state of the copy (the core's ``global_state()``)."""
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
