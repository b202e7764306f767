"""A tiny VectorEnv with a reward/safety trade-off, for testing the trainers quickly.

Each step every agent sees a random context (one-hot of 2) and picks one of 3 actions:
the action equal to its context pays 1; action 2 ("risky") pays 1.5 but costs 1 with
probability `risk`; anything else pays 0. A copy terminates with probability `p_terminate`
per step and is truncated by the hidden cap `max_steps`, so both episode ends occur.
Unconstrained PPO learns the risky action; a policy meeting a small `max_risk` must not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from src.config.run import RunConfig
from src.envs.base import StepResult, VectorEnv, check_actions, resolve_seeds


class RiskyContextEnv(VectorEnv):
    """`num_envs` copies of the risky-context task; copy e has its own NumPy generator."""

    def __init__(
        self,
        *,
        num_envs: int,
        n_agents: int = 2,
        max_steps: int = 8,
        risk: float = 0.3,
        p_terminate: float = 0.05,
        seed: int | None = None,
    ) -> None:
        self.name = "risky_context"
        self.num_envs, self.n_agents, self.max_steps = num_envs, n_agents, max_steps
        self.agents = [f"agent_{i}" for i in range(n_agents)]
        self.obs_dim, self.n_actions = 3, 3
        self.risk, self.p_terminate = risk, p_terminate
        self._seed = seed
        self._rngs: list[np.random.Generator] = []
        self._context = np.zeros((num_envs, n_agents), dtype=np.int64)
        self._steps = np.zeros(num_envs, dtype=np.int64)

    def _observe(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, self.n_agents, 3), dtype=np.float32)
        np.put_along_axis(obs, self._context[..., None], 1.0, axis=2)
        obs[..., 2] = 1.0
        return obs

    def _new_context(self, copy: int) -> None:
        self._context[copy] = self._rngs[copy].integers(0, 2, size=self.n_agents)

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        seeds = resolve_seeds(seed if seed is not None else self._seed, self.num_envs)
        if seeds is not None:
            self._rngs = [np.random.default_rng(s) for s in seeds]
        elif not self._rngs:
            self._rngs = [np.random.default_rng() for _ in range(self.num_envs)]
        self._steps[:] = 0
        for copy in range(self.num_envs):
            self._new_context(copy)
        return self._observe()

    def step(self, actions: np.ndarray) -> StepResult:
        actions = check_actions(actions, self.num_envs, self.n_agents, self.n_actions)
        reward = np.where(actions == self._context, 1.0, 0.0).astype(np.float32)
        risky = actions == 2
        reward[risky] = 1.5
        cost = np.zeros((self.num_envs, self.n_agents), dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        for copy in range(self.num_envs):
            rng = self._rngs[copy]
            cost[copy] = (rng.random(self.n_agents) < self.risk) & risky[copy]
            terminated[copy] = rng.random() < self.p_terminate
        self._steps += 1
        episode_step = self._steps.copy()
        truncated = (self._steps >= self.max_steps) & ~terminated
        for copy in range(self.num_envs):
            self._new_context(copy)
        final_obs = self._observe()
        done = terminated | truncated
        for copy in np.flatnonzero(done):
            self._steps[copy] = 0
            self._new_context(copy)
        obs = self._observe()
        a = self.n_agents
        return StepResult(
            obs=obs,
            reward=reward,
            cost=cost,
            terminated=np.repeat(terminated[:, None], a, axis=1),
            truncated=np.repeat(truncated[:, None], a, axis=1),
            final_obs=final_obs,
            episode_step=episode_step,
        )

    def get_state(self) -> dict[str, Any]:
        return {
            "rngs": [rng.bit_generator.state for rng in self._rngs],
            "context": self._context.copy(),
            "steps": self._steps.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._rngs = []
        for rng_state in state["rngs"]:
            rng = np.random.default_rng()
            rng.bit_generator.state = rng_state
            self._rngs.append(rng)
        self._context = state["context"].copy()
        self._steps = state["steps"].copy()

    def render(self, index: int = 0) -> np.ndarray:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = 40 * int(self._steps[index])
        return frame


def make_toy_env(config: RunConfig | dict) -> RiskyContextEnv:
    """`make_env` for train_run: the toy env sized by the run config."""
    config = RunConfig.from_dict(config)
    return RiskyContextEnv(
        num_envs=config.ppo.num_envs,
        n_agents=config.env.n_agents,
        seed=config.seed,
        **config.env.params,
    )
