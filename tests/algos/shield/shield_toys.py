"""Toy worlds for the shield's tests: a tiny grid and scripted calibration episodes.

Two agents move on a W x H grid (actions: stay, up, down, left, right; walls clip). An agent's
cost is 1 when it ends a step on a hazard cell or on the other agent's cell. Per-agent
observation: [x, y, goal_x, goal_y, other_x, other_y] (integers as floats). `GridVectorEnv` is a
VectorEnv of it (reward: -0.1 per step, +1 and termination when both agents are on their goals;
slip: with probability `slip` an agent's action is replaced by a random one).
`ScriptedCalibrationEnv` plays calibration episodes whose violations are scripted per reset seed
and allowance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from src.config.shield import ShieldConfig
from src.envs.base import StepResult, VectorEnv

if TYPE_CHECKING:
    from src.algos.shield.trainer import ShieldedIPPO

MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]])
N_ACTIONS = 5
N_AGENTS = 2
OBS_DIM = 6


class TinyGrid:
    """Layout of the grid: size, hazard cells, goals."""

    def __init__(
        self,
        width: int = 5,
        height: int = 5,
        hazards: tuple[tuple[int, int], ...] = ((2, 2), (2, 1), (1, 3)),
        goals: tuple[tuple[int, int], ...] = ((4, 4), (0, 4)),
    ) -> None:
        self.width, self.height = width, height
        self.hazard = np.zeros((width, height), dtype=bool)
        for x, y in hazards:
            self.hazard[x, y] = True
        self.goals = np.array(goals, dtype=np.int64)  # [A, 2]

    def move(self, pos: np.ndarray, action: np.ndarray) -> np.ndarray:
        """pos [..., A, 2], action [..., A] -> clipped new positions."""
        new = pos + MOVES[action]
        new[..., 0] = np.clip(new[..., 0], 0, self.width - 1)
        new[..., 1] = np.clip(new[..., 1], 0, self.height - 1)
        return new

    def cost(self, pos: np.ndarray) -> np.ndarray:
        """pos [..., A, 2] after a move -> per-agent cost [..., A] (hazard or collision)."""
        on_hazard = self.hazard[pos[..., 0], pos[..., 1]]
        collide = np.all(pos[..., 0, :] == pos[..., 1, :], axis=-1)
        return (on_hazard | collide[..., None]).astype(np.float32)

    def observe(self, pos: np.ndarray) -> np.ndarray:
        """pos [..., A, 2] -> obs [..., A, 6]."""
        other = pos[..., ::-1, :]
        goals = np.broadcast_to(self.goals, pos.shape)
        return np.concatenate([pos, goals, other], axis=-1).astype(np.float32)


class GridVectorEnv(VectorEnv):
    """E copies of a TinyGrid with random starts, a hidden cap and optional slip."""

    def __init__(self, *, num_envs: int, max_steps: int = 20, slip: float = 0.0) -> None:
        self.name = "tiny_grid"
        self.num_envs = num_envs
        self.n_agents = N_AGENTS
        self.agents = ["agent_0", "agent_1"]
        self.obs_dim = OBS_DIM
        self.n_actions = N_ACTIONS
        self.max_steps = max_steps
        self.grid = TinyGrid()
        self.slip = slip
        self.rngs = [np.random.default_rng(e) for e in range(num_envs)]
        self.pos = np.zeros((num_envs, N_AGENTS, 2), dtype=np.int64)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def _start(self, e: int) -> None:
        free = np.argwhere(~self.grid.hazard)
        pick = self.rngs[e].choice(len(free), size=2, replace=False)
        self.pos[e] = free[pick]
        self.steps[e] = 0

    def reset(self, seed: Any = None) -> np.ndarray:
        if seed is not None:
            seeds = [seed + e for e in range(self.num_envs)] if np.isscalar(seed) else list(seed)
            self.rngs = [np.random.default_rng(s) for s in seeds]
        for e in range(self.num_envs):
            self._start(e)
        return self.grid.observe(self.pos)

    def step(self, actions: np.ndarray) -> StepResult:
        actions = np.asarray(actions, dtype=np.int64).copy()
        for e in range(self.num_envs):
            slipped = self.rngs[e].random(N_AGENTS) < self.slip
            random_actions = self.rngs[e].integers(0, N_ACTIONS, N_AGENTS)
            actions[e] = np.where(slipped, random_actions, actions[e])
        self.pos = self.grid.move(self.pos, actions)
        self.steps += 1
        cost = self.grid.cost(self.pos)
        at_goal = np.all(self.pos == self.grid.goals, axis=-1).all(axis=-1)  # [E]
        reward = np.where(at_goal, 1.0, -0.1)[:, None].repeat(N_AGENTS, 1).astype(np.float32)
        terminated = np.repeat(at_goal[:, None], N_AGENTS, 1)
        truncated = np.repeat(((self.steps >= self.max_steps) & ~at_goal)[:, None], N_AGENTS, 1)
        final_obs = self.grid.observe(self.pos)
        episode_step = self.steps.copy()
        for e in np.flatnonzero(terminated[:, 0] | truncated[:, 0]):
            self._start(e)
        return StepResult(
            obs=self.grid.observe(self.pos),
            reward=reward,
            cost=cost,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episode_step=episode_step,
        )

    def get_state(self) -> dict[str, Any]:
        return {
            "rngs": [r.bit_generator.state for r in self.rngs],
            "pos": self.pos.copy(),
            "steps": self.steps.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        for r, s in zip(self.rngs, state["rngs"], strict=True):
            r.bit_generator.state = s
        self.pos = state["pos"].copy()
        self.steps = state["steps"].copy()

    def render(self, index: int = 0) -> np.ndarray:
        return np.zeros((8, 8, 3), dtype=np.uint8)

    def close(self) -> None:
        return None


def shield_config(**overrides: Any) -> ShieldConfig:
    """A ShieldConfig with the base knobs of the tests (the defaults), overridden."""
    base: dict[str, Any] = {
        "max_risk": 0.1,
        "shield_patience": 0,
        "shield_opponent_mode": "monotone_floor",
        "shield_reward_mode": "bayesian",
        "shield_credible_delta": 0.05,
        "shield_credible_schedule": "summable",
        "wm_version": "v0",
        "om_version": "v0",
        "shield_version": "v0",
    }
    return ShieldConfig(**{**base, **overrides})


# Calibration episodes of a scripted certificate (tests/algos/shield/test_certificate_wiring.py,
# tests/benchmarks/test_certificate_check.py): run r plays the reset seeds 5000 + 8 r + i,
# i < 8; per seed, the allowance from which the episode violates at step 100, and the seeds
# whose episode violates at step 101 (beyond the constraint's horizon) with any allowance.
CALIBRATION_SEED_OFFSET = 5000
VIOLATES_AT_100 = {5000: 0.03, 5005: 0.03, 5006: 0.06, 5009: 0.03, 5014: 0.06}
VIOLATES_AT_101 = {5001, 5004, 5008, 5012}


def scripted_violations(seed: int, allowance: float) -> tuple[int, ...]:
    """The 1-based steps at which the episode of reset seed `seed` violates with `allowance`."""
    steps = [101] if seed in VIOLATES_AT_101 else []
    if allowance >= VIOLATES_AT_100.get(seed, math.inf):
        steps.append(100)
    return tuple(steps)


def scripted_calibration_config(
    *, run_idx: int = 0, updates: int = 1, constraint_horizon: int = 100, family: int = 1
) -> dict[str, Any]:
    """A shield run on the toy grid whose certificate tests the allowances 0.02, 0.04 and
    0.08 (max_risk 0.5 held by adapt_rate 0, times certify_multiples) with delta 0.4 (shared
    by `family` certificates) on 8 calibration episodes from `CALIBRATION_SEED_OFFSET`, over
    `constraint_horizon` steps."""
    from src.config.run import make_run_config

    return make_run_config(
        env_name="tiny_grid",
        algo="shield",
        run_idx=run_idx,
        num_envs=2,
        timesteps=2 * 16 * updates,
        rollouts=16,
        learning_epochs=1,
        mini_batches=2,
        max_risk=0.5,
        shield_patience=1,
        shield_credible_delta=0.4,
        constraint_horizon=constraint_horizon,
        algo_params={
            "ensemble_size": 2,
            "wm_hidden": [32],
            "replay_size": 2000,
            "hidden_sizes": [16],
            "critic_steps": 2,
            "horizon": 5,
            "adapt_rate": 0.0,
            "calibration_episodes": 8,
            "calibration_seed_offset": CALIBRATION_SEED_OFFSET,
            "certify_multiples": [0.04, 0.08, 0.16],
            **({"certificate_family": family} if family != 1 else {}),
        },
    )


class ScriptedCalibrationEnv:
    """Copies with the toy grid's shapes whose episodes run to the cap, violating at the steps
    `script(seed, allowance)` gives for their reset seed, whatever the actions; reward 1 per
    agent and step. `allowance()` is read at every reset; every reset is appended to `plays`
    as {"seeds", "allowance", "cap", "steps"} (steps: taken since that reset)."""

    def __init__(
        self,
        num_envs: int,
        max_steps: int,
        *,
        plays: list[dict[str, Any]],
        allowance: Callable[[], float] = lambda: math.nan,
        script: Callable[[int, float], tuple[int, ...]] = scripted_violations,
    ) -> None:
        self.num_envs, self.max_steps = num_envs, max_steps
        self.n_agents, self.obs_dim, self.n_actions = N_AGENTS, OBS_DIM, N_ACTIONS
        self.plays, self.allowance, self.script = plays, allowance, script
        self.violations: list[tuple[int, ...]] = [()] * num_envs
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.zeros((self.num_envs, N_AGENTS, OBS_DIM), dtype=np.float32)

    def reset(self, seed: Any = None) -> np.ndarray:
        seeds = [int(s) for s in seed]
        allowance = float(self.allowance())
        self.violations = [self.script(s, allowance) for s in seeds]
        self.t = 0
        self.plays.append(
            {"seeds": seeds, "allowance": allowance, "cap": self.max_steps, "steps": 0}
        )
        return self._obs()

    def step(self, actions: np.ndarray) -> StepResult:
        self.t += 1
        self.plays[-1]["steps"] = self.t
        shape = (self.num_envs, N_AGENTS)
        cost = np.zeros(shape, dtype=np.float32)
        cost[:, 0] = [self.t in steps for steps in self.violations]
        truncated = np.full(shape, self.t >= self.max_steps)
        return StepResult(
            obs=self._obs(),
            reward=np.ones(shape, dtype=np.float32),
            cost=cost,
            terminated=np.zeros(shape, dtype=bool),
            truncated=truncated,
            final_obs=self._obs(),
            episode_step=np.full(self.num_envs, self.t, dtype=np.int64),
        )

    def close(self) -> None:
        return None


def scripted_calibration_trainer(
    *, run_idx: int = 0, updates: int = 1, constraint_horizon: int = 100, family: int = 1
) -> tuple[ShieldedIPPO, list[dict[str, Any]]]:
    """A trainer of `scripted_calibration_config` on a 100-step `GridVectorEnv` whose
    calibration episodes are `ScriptedCalibrationEnv`'s at the shield's allowance, and the
    list of their resets."""
    from src.algos.shield.trainer import ShieldedIPPO

    config = scripted_calibration_config(
        run_idx=run_idx, updates=updates, constraint_horizon=constraint_horizon, family=family
    )
    trainer = ShieldedIPPO(config, GridVectorEnv(num_envs=2, max_steps=100))
    plays: list[dict[str, Any]] = []
    trainer.make_calibration_env = lambda copies, steps: ScriptedCalibrationEnv(
        copies, steps, plays=plays, allowance=lambda: trainer.shield.allowance
    )
    return trainer, plays
