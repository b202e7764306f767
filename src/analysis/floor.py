"""The risk floor of a task: how low a team that still works can keep its risk.

A constraint P(violation within H) <= `max_risk` that no team can meet cannot tell a method's
failure from the task's, so every results page shows, per env, the floor next to `max_risk`.
The floor is the least P(violation within H) of a team that keeps at least half of unconstrained
`ippo`'s goal rate. On the continuing grid tasks the joint state (cells and goals of every
agent) is too large for the exact dynamic programme of `src.analysis.exact_floor`, so the floor
is bounded from above by a *witness*: the centralised, fully observing careful team of
`src.envs.witness` rolled out on the evaluation layouts of every run (reset seeds
`final_policy_eval_seed_offset + i`, i < num_runs * N), for H steps. Its violation rate, with a
one-sided Clopper-Pearson upper bound, is an upper bound of the floor; its goals per episode say
what the careful team still earns. The task is *well posed* ("feasible") when that upper bound
is <= `max_risk` / 4 and the witness keeps at least half of ippo's goals (of the greedy team's
when ippo was not trained).

On `spread` the witness is the careful team of `src.envs.witness.SpreadTeam` (agents head for
their landmarks and keep their coasting paths apart), its "goals" are the landmarks it covers
per step summed over the episode, and the reference is the careless team's (spread reports no
arrivals, so ippo has no goals to compare with). With `continuous_actions` the teams act on the
same task with Discrete actions: the Box action of one-hot entry k moves an agent exactly as
Discrete action k does (`spread_core`: the control is 5 (a[2] - a[1], a[4] - a[3])), so the
witness's actions are actions of the Box task too. Tasks without a witness (the terminating grid
tasks, `spread_mpe2`, tasks given by import path) get a record that says so, with NaN numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from src.analysis.files import read_json, write_text
from src.config.base import create_base_config, recorded_constraint_horizon
from src.config.evaluation import EvalConfig
from src.envs.grid_core import GridVectorEnv
from src.envs.registry import make_vector_env
from src.envs.spread_core import NativeSpreadVectorEnv
from src.envs.witness import CarefulTeam, SpreadTeam, greedy_actions, rollout_team
from src.stats import clopper_pearson_upper

__all__ = [
    "FEASIBLE_FRACTION",
    "MIN_GOAL_SHARE",
    "Floor",
    "feasible",
    "floor_settings",
    "load_floor",
    "task_floor",
    "write_floor",
]

FEASIBLE_FRACTION = 0.25
"""A task is well posed when its floor is at most this fraction of `max_risk`."""
MIN_GOAL_SHARE = 0.5
"""The witness must keep at least this share of ippo's goals per episode."""


@dataclass(frozen=True)
class Floor:
    """The floor record of one env (the JSON of `results/{tag}/floors/{env}.json`)."""

    env: str
    """Env name."""
    method: str
    """`witness` (centralised careful team) or `none` (the task has no witness)."""
    horizon: int
    """H of P(violation within H): the constraint horizon of the env's runs."""
    first_seed: int
    """Reset seed of the first layout; layouts are `first_seed + i`, i < episodes."""
    episodes: int
    """Layouts rolled out (the evaluation layouts of every run)."""
    confidence: float
    """Confidence of the one-sided upper bound `p_upper`."""
    violations: int
    """Witness episodes with a violation within H."""
    p_violation: float
    """Witness violation rate within H: an upper bound of the floor."""
    p_upper: float
    """One-sided Clopper-Pearson upper bound of the witness's violation probability."""
    goals: float
    """Witness goals per episode within H (whole team; on `spread`, landmarks covered per step
    summed over the steps)."""
    greedy_p_violation: float
    """Violation rate of the careless greedy team on the same layouts."""
    greedy_goals: float
    """Greedy team's goals per episode within H."""

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON values."""
        return asdict(self)


def task_floor(
    env_name: str,
    env_params: dict[str, Any],
    *,
    first_seed: int,
    episodes: int,
    horizon: int,
    confidence: float,
    rng_seed: int = 0,
) -> Floor:
    """The witness floor of env `env_name` on layouts `first_seed + i`, i < `episodes`."""
    if episodes < 1 or horizon < 1:
        raise ValueError(f"episodes and horizon must be >= 1, got {episodes} and {horizon}")
    params = {**env_params, "max_steps": max(horizon, int(env_params.get("max_steps", 1)))}

    def make(copies: int) -> Any:
        return make_vector_env(env_name, num_envs=copies, seed=None, **params)

    where = {
        "env": env_name,
        "horizon": horizon,
        "first_seed": first_seed,
        "episodes": episodes,
        "confidence": confidence,
    }
    probe = make(1)
    spread = isinstance(probe, NativeSpreadVectorEnv)
    if not spread and (not isinstance(probe, GridVectorEnv) or not probe.config.continuing):
        probe.close()
        nan = math.nan
        return Floor(
            **where,
            method="none",
            violations=0,
            p_violation=nan,
            p_upper=nan,
            goals=nan,
            greedy_p_violation=nan,
            greedy_goals=nan,
        )
    probe.close()
    if spread:
        # The teams choose Discrete actions, each of which is also a Box action (docstring).
        params["continuous_actions"] = False
    seeds = range(first_seed, first_seed + episodes)
    careful_team = SpreadTeam() if spread else CarefulTeam()
    greedy_team = SpreadTeam(careful=False) if spread else greedy_actions
    careful = rollout_team(make, careful_team, seeds, horizon=horizon, rng_seed=rng_seed)
    greedy = rollout_team(make, greedy_team, seeds, horizon=horizon, rng_seed=rng_seed)
    k = int(np.count_nonzero(careful.first_violation > 0))
    return Floor(
        **where,
        method="witness",
        violations=k,
        p_violation=k / episodes,
        p_upper=float(clopper_pearson_upper(k=k, n=episodes, delta=1.0 - confidence)),
        goals=float(careful.goals.mean()),
        greedy_p_violation=greedy.p_violation(horizon),
        greedy_goals=float(greedy.goals.mean()),
    )


def feasible(floor: Floor, *, max_risk: float, ippo_goals: float | None) -> bool | None:
    """Whether the task is well posed for `max_risk` (None when there is no witness).

    The witness's upper bound must be <= `FEASIBLE_FRACTION * max_risk` and its goals at least
    `MIN_GOAL_SHARE` of ippo's (of the greedy team's when `ippo_goals` is None or NaN).
    """
    if floor.method == "none":
        return None
    reference = floor.greedy_goals if ippo_goals is None or math.isnan(ippo_goals) else ippo_goals
    return bool(
        floor.p_upper <= FEASIBLE_FRACTION * max_risk and floor.goals >= MIN_GOAL_SHARE * reference
    )


def write_floor(floor: Floor, path: str | Path) -> None:
    """Write the floor record as JSON, atomically."""
    write_text(json.dumps(floor.to_dict(), indent=2, allow_nan=True) + "\n", path)


def load_floor(path: str | Path) -> Floor:
    """Read a floor record written by `write_floor`, naming the file when it is malformed."""
    raw = read_json(path)
    names = set(Floor.__dataclass_fields__)
    if not isinstance(raw, dict) or set(raw) != names:
        raise ValueError(f"{path}: not a floor record (expected the keys {sorted(names)})")
    return Floor(**raw)


def _constraint_horizon(base: dict[str, Any], env_name: str, env_params: dict[str, Any]) -> int:
    """The constraint horizon of env `env_name`'s runs: `base.constraint_horizon` when the
    config sets it, else the env's episode cap (its `max_steps` parameter, else the built
    env's own)."""
    horizon = recorded_constraint_horizon({**base, "env_params": env_params})
    if horizon is not None:
        return horizon
    probe = make_vector_env(env_name, num_envs=1, seed=None, **env_params)
    try:
        return int(probe.max_steps)
    finally:
        probe.close()


def floor_settings(workflow_config: dict[str, Any], env_name: str) -> dict[str, Any]:
    """The keyword arguments of `task_floor` for env `env_name` of a checked workflow config.

    The layouts are the evaluation layouts of every run (at least one: with no evaluation
    episodes, the first run's first layout), the horizon the env's constraint horizon (the
    config's `base.constraint_horizon`, else the env's episode cap `max_steps`, as the workflow
    sets it in every run config), the confidence the evaluation's. Only the env and evaluation
    settings are read: the floor depends on no algorithm.
    """
    env_params = dict(workflow_config["env_params"][env_name])
    given = dict(workflow_config["base"])
    if isinstance(given.get("final_policy_eval_horizons"), list):
        given["final_policy_eval_horizons"] = tuple(given["final_policy_eval_horizons"])
    base = create_base_config(
        **{
            **given,
            "env_name": env_name,
            "n_agents": env_params["n_agents"],
            "num_runs": workflow_config["num_runs"],
        }
    )
    evaluation = EvalConfig.from_parts(base, {})
    return {
        "env_name": env_name,
        "env_params": env_params,
        "first_seed": evaluation.first_seed(0),
        "episodes": max(1, workflow_config["num_runs"] * evaluation.episodes),
        "horizon": _constraint_horizon(given, env_name, env_params),
        "confidence": evaluation.final_policy_eval_confidence,
    }
