"""First-violation times and per-horizon statistics of evaluation episodes (pure functions).

docs/design.md, "Evaluation": episode i has first violation time T_i (1-based step at which some
agent's cost is > 0; none if it never happens). For a horizon H, k = #{T_i <= H} and p = k / N,
and the indices {i : T_i <= H} are kept, so that two policies evaluated on the same reset seeds
can be compared episode by episode (a paired test).
Episodes that end before H are *censored*: they count as safe after their end, and their return
and cost over the first H steps are those of the whole episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from src.stats import clopper_pearson_interval

__all__ = [
    "NO_VIOLATION",
    "EpisodeBatch",
    "check_horizons",
    "first_violation_steps",
    "horizon_summary",
    "sums_within_horizons",
    "violating_episodes",
    "violation_counts",
]

NO_VIOLATION = -1  # first_violation_steps value of an episode without a violation

HORIZON_COLUMNS = (
    "horizon",
    "n",
    "violations",
    "p_violation",
    "ci_low",
    "ci_high",
    "mean_return",
    "mean_cost",
    "collision_violations",
    "mean_goals",
    "violating_episodes",
)


@dataclass(frozen=True)
class EpisodeBatch:
    """Per-step records of N episodes, padded to T steps (entries after `length` are ignored)."""

    reward: np.ndarray  # [N, T] float64 team reward (sum over agents)
    cost: np.ndarray  # [N, T] float64 team cost (sum over agents)
    violation: np.ndarray  # [N, T] bool: some agent's cost > 0 at that step
    length: np.ndarray  # [N] int64 steps the episode lasted, 0 <= length <= T
    # [N, T] bool: some agent's cost at that step includes a collision with another agent;
    # None when the task does not tell collisions from its other costs
    collision: np.ndarray | None = None
    # [N, T] float64 goals the team reached at that step; None for tasks without goals
    goals: np.ndarray | None = None
    # [N, T] int64 agents whose action the shield replaced at that step (0 without a shield);
    # None when the policy does not say
    interventions: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.reward.ndim != 2:
            raise ValueError(f"reward must be [N, T], got shape {self.reward.shape}")
        shape = self.reward.shape
        for name in ("cost", "violation", "collision", "goals", "interventions"):
            if getattr(self, name) is not None and getattr(self, name).shape != shape:
                raise ValueError(
                    f"{name} has shape {getattr(self, name).shape}, reward has {shape}"
                )
        if self.length.shape != shape[:1]:
            raise ValueError(f"length must be [N] = [{shape[0]}], got {self.length.shape}")
        if np.any(self.length < 0) or np.any(self.length > shape[1]):
            raise ValueError(f"length must lie in [0, {shape[1]}]")

    @property
    def n_episodes(self) -> int:
        """Number of episodes N."""
        return int(self.reward.shape[0])

    @property
    def max_steps(self) -> int:
        """Padded episode length T."""
        return int(self.reward.shape[1])


def check_horizons(horizons: Sequence[int], max_steps: int | None = None) -> np.ndarray:
    """The horizons as int64; rejects empty, non-positive, duplicate or too-long ones."""
    values = np.asarray(list(horizons))
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"horizons must be a non-empty list of integers, got {horizons!r}")
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"horizons must be integers, got {horizons!r}")
    if np.any(values < 1):
        raise ValueError(f"horizons must be >= 1, got {horizons!r}")
    if np.unique(values).size != values.size:
        raise ValueError(f"horizons must be distinct, got {horizons!r}")
    if max_steps is not None and np.any(values > max_steps):
        raise ValueError(f"horizons {horizons!r} exceed the {max_steps} recorded steps")
    return values.astype(np.int64)


def _valid_steps(length: np.ndarray, max_steps: int) -> np.ndarray:
    return np.arange(max_steps)[None, :] < length[:, None]  # [N, T]


def first_violation_steps(violation: np.ndarray, length: np.ndarray) -> np.ndarray:
    """1-based step of each episode's first violation within its length, `NO_VIOLATION` if none.

    >>> violation = np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], bool)
    >>> first_violation_steps(violation, np.array([3, 2, 3]))
    array([ 2, -1, -1])
    """
    violation = np.asarray(violation, dtype=bool)
    length = np.asarray(length, dtype=np.int64)
    if violation.ndim != 2 or length.shape != violation.shape[:1]:
        raise ValueError(
            f"violation must be [N, T] and length [N], got {violation.shape} and {length.shape}"
        )
    if np.any(length < 0) or np.any(length > violation.shape[1]):
        raise ValueError(f"length must lie in [0, {violation.shape[1]}]")
    # Steps after an episode's end belong to the next (auto-reset) episode: censor them.
    counted = violation & _valid_steps(length, violation.shape[1])
    first = np.argmax(counted, axis=1) + 1
    return np.where(counted.any(axis=1), first, NO_VIOLATION).astype(np.int64)


def _checked_first(first_violation: np.ndarray) -> np.ndarray:
    first = np.asarray(first_violation, dtype=np.int64)
    if first.ndim != 1:
        raise ValueError(f"first_violation must be [N], got shape {first.shape}")
    if np.any((first < 1) & (first != NO_VIOLATION)):
        raise ValueError(f"first_violation entries must be >= 1 or {NO_VIOLATION}")
    return first


def violation_counts(first_violation: np.ndarray, horizons: Sequence[int]) -> np.ndarray:
    """k_H = number of episodes whose first violation is at a step <= H, for every horizon H.

    >>> violation_counts(np.array([1, 5, -1, 10]), [1, 5, 9, 10])
    array([1, 2, 2, 3])
    """
    first = _checked_first(first_violation)
    horizon = check_horizons(horizons)
    violated = first != NO_VIOLATION
    return ((first[None, :] <= horizon[:, None]) & violated[None, :]).sum(axis=1).astype(np.int64)


def violating_episodes(first_violation: np.ndarray, horizons: Sequence[int]) -> list[list[int]]:
    """Per horizon H, the sorted indices i of the episodes whose first violation is at a step
    <= H (the episodes `violation_counts` counts).

    >>> violating_episodes(np.array([1, 5, -1, 10]), [1, 5, 10])
    [[0], [0, 1], [0, 1, 3]]
    """
    first = _checked_first(first_violation)
    violated = first != NO_VIOLATION
    return [np.flatnonzero(violated & (first <= h)).tolist() for h in check_horizons(horizons)]


def sums_within_horizons(
    values: np.ndarray, length: np.ndarray, horizons: Sequence[int]
) -> np.ndarray:
    """Per-episode sums of `values` over the first min(H, length) steps: [len(horizons), N]."""
    values = np.asarray(values, dtype=np.float64)
    length = np.asarray(length, dtype=np.int64)
    if values.ndim != 2 or length.shape != values.shape[:1]:
        raise ValueError(
            f"values must be [N, T] and length [N], got {values.shape} and {length.shape}"
        )
    horizon = check_horizons(horizons, values.shape[1])
    masked = np.where(_valid_steps(length, values.shape[1]), values, 0.0)
    cumulative = np.cumsum(masked, axis=1)  # [N, T]
    return cumulative[:, horizon - 1].T


def horizon_summary(
    batch: EpisodeBatch, horizons: Sequence[int], *, confidence: float
) -> pd.DataFrame:
    """One row per horizon: n, violations, p_violation, Clopper-Pearson interval, mean return/cost.

    Columns are `HORIZON_COLUMNS`; rows follow the order of `horizons`. `collision_violations`
    counts the episodes whose first violation (at a step <= H) includes a collision between
    agents (NaN when the batch does not tell collisions apart); `mean_goals` is the mean number
    of goals the team reached within the first H steps (NaN for tasks without goals);
    `violating_episodes` lists the indices i < N (in the batch's order) of the episodes counted
    in `violations`, sorted.
    """
    if batch.n_episodes < 1:
        raise ValueError("cannot summarise zero episodes")
    horizon = check_horizons(horizons, batch.max_steps)
    first = first_violation_steps(batch.violation, batch.length)
    k = violation_counts(first, horizon)
    n = batch.n_episodes
    low, high = clopper_pearson_interval(k=k, n=n, confidence=confidence)
    returns = sums_within_horizons(batch.reward, batch.length, horizon)
    costs = sums_within_horizons(batch.cost, batch.length, horizon)
    collisions = np.full(horizon.size, np.nan)
    if batch.collision is not None:
        violated = first != NO_VIOLATION
        at_first = np.zeros(n, dtype=bool)
        at_first[violated] = batch.collision[violated, first[violated] - 1]
        collisions = violation_counts(np.where(at_first, first, NO_VIOLATION), horizon)
    goals = np.full(horizon.size, np.nan)
    if batch.goals is not None:
        goals = sums_within_horizons(batch.goals, batch.length, horizon).mean(axis=1)
    return pd.DataFrame(
        {
            "horizon": horizon,
            "n": np.full(horizon.size, n, dtype=np.int64),
            "violations": k,
            "p_violation": k / n,
            "ci_low": np.asarray(low, dtype=np.float64),
            "ci_high": np.asarray(high, dtype=np.float64),
            "mean_return": returns.mean(axis=1),
            "mean_cost": costs.mean(axis=1),
            "collision_violations": collisions.astype(np.float64),
            "mean_goals": goals,
            "violating_episodes": violating_episodes(first, horizon),
        },
        columns=list(HORIZON_COLUMNS),
    )
