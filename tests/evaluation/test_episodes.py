"""First-violation times, censoring and per-horizon statistics on hand-built episodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from src.evaluation.episodes import (
    HORIZON_COLUMNS,
    NO_VIOLATION,
    EpisodeBatch,
    check_horizons,
    first_violation_steps,
    horizon_summary,
    sums_within_horizons,
    violation_counts,
)


def batch_of(violation: list[list[int]], length: list[int], reward: float = 1.0) -> EpisodeBatch:
    v = np.array(violation, dtype=bool)
    return EpisodeBatch(
        reward=np.full(v.shape, reward),
        cost=v.astype(np.float64),
        violation=v,
        length=np.array(length, dtype=np.int64),
    )


def test_first_violation_is_one_based_and_minus_one_without_violation() -> None:
    violation = np.array(
        [
            [1, 0, 0, 0],  # first step
            [0, 0, 1, 1],  # third step, the later one does not matter
            [0, 0, 0, 0],  # never
            [0, 0, 0, 1],  # last step
        ],
        dtype=bool,
    )
    first = first_violation_steps(violation, np.array([4, 4, 4, 4]))
    assert first.tolist() == [1, 3, NO_VIOLATION, 4]
    assert first.dtype == np.int64


def test_steps_after_the_episode_end_are_censored() -> None:
    # Episode 0 ended after 2 steps; its copy auto-reset and the next episode violated at
    # step 3: that must not count. Episode 1 violated at its last valid step.
    violation = np.array([[0, 0, 1, 1], [0, 1, 0, 0]], dtype=bool)
    first = first_violation_steps(violation, np.array([2, 2]))
    assert first.tolist() == [NO_VIOLATION, 2]
    # An episode of length 0 has nothing to count.
    assert first_violation_steps(np.ones((1, 3), bool), np.array([0])).tolist() == [NO_VIOLATION]


def test_violation_counts_by_horizon() -> None:
    first = np.array([1, 10, 11, NO_VIOLATION, 50, 200])
    counts = violation_counts(first, [1, 10, 50, 100, 200])
    assert counts.tolist() == [1, 2, 4, 4, 5]


def test_sums_within_horizons_stop_at_episode_end() -> None:
    values = np.array([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    sums = sums_within_horizons(values, np.array([4, 2]), [1, 3, 4])
    # Episode 1 ended after two steps: later entries (the next episode) are ignored.
    np.testing.assert_array_equal(sums, [[1.0, 10.0], [6.0, 30.0], [10.0, 30.0]])


def test_horizon_summary_hand_checked() -> None:
    batch = batch_of(
        violation=[[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0]],
        length=[4, 4, 2, 3],  # episode 2 ended before its violations: safe (censored)
        reward=0.5,
    )
    summary = horizon_summary(batch, [1, 2, 4], confidence=0.95)
    assert list(summary.columns) == list(HORIZON_COLUMNS)
    assert summary["horizon"].tolist() == [1, 2, 4]
    assert summary["n"].tolist() == [4, 4, 4]
    assert summary["violations"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(summary["p_violation"], [0.0, 0.25, 0.5])
    # Which episodes: 0 violates at step 2, 1 at step 4, 2 only after its end, 3 never.
    assert summary["violating_episodes"].tolist() == [[], [0], [0, 1]]
    # Return over H steps: 0.5 per step while the episode lasts (lengths 4, 4, 2, 3).
    np.testing.assert_allclose(summary["mean_return"], [0.5, 1.0, 0.5 * (4 + 4 + 2 + 3) / 4])
    # Cost over H steps counts every violating step within the episode.
    np.testing.assert_allclose(summary["mean_cost"], [0.0, 0.25, 0.5])
    assert (summary["ci_low"] <= summary["p_violation"]).all()
    assert (summary["p_violation"] <= summary["ci_high"]).all()


def test_mean_cost_is_the_team_cost_not_the_violation_flag() -> None:
    violation = np.array([[0, 1, 1, 0], [1, 0, 0, 0]], dtype=bool)
    # Two agents' costs summed: 2.0 at a step where both violate, 0.5 for a small cost.
    cost = np.array([[0.0, 2.0, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]])
    batch = EpisodeBatch(
        reward=np.zeros(violation.shape), cost=cost, violation=violation, length=np.array([4, 4])
    )
    summary = horizon_summary(batch, [1, 2, 4], confidence=0.95)
    np.testing.assert_allclose(summary["mean_cost"], [0.5, 1.5, 1.75])
    assert summary["violations"].tolist() == [1, 2, 2]


def test_collision_share_and_goals_by_horizon() -> None:
    violation = np.array([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]], dtype=bool)
    # Episode 0's first violation is a collision; episode 1's is not (its later collision at
    # a step without violation is impossible and ignored); episode 2's last step is.
    collision = np.array([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]], dtype=bool)
    goals = np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    batch = EpisodeBatch(
        reward=np.zeros(violation.shape),
        cost=violation.astype(float),
        violation=violation,
        length=np.array([4, 4, 3]),  # episode 2 ended before its collision
        collision=collision,
        goals=goals,
    )
    summary = horizon_summary(batch, [1, 2, 4], confidence=0.95)
    assert summary["violations"].tolist() == [1, 2, 2]
    np.testing.assert_allclose(summary["collision_violations"], [0.0, 1.0, 1.0])
    np.testing.assert_allclose(summary["mean_goals"], [1 / 3, 2 / 3, 5 / 3])
    # Without collision or goal records the columns are NaN.
    plain = horizon_summary(batch_of([[0, 1]], [2]), [2], confidence=0.95)
    assert plain["collision_violations"].isna().all() and plain["mean_goals"].isna().all()


def test_clopper_pearson_known_values_through_the_summary() -> None:
    safe = batch_of(violation=[[0]] * 100, length=[1] * 100)
    row = horizon_summary(safe, [1], confidence=0.95).iloc[0]
    assert row["ci_low"] == 0.0
    assert row["ci_high"] == pytest.approx(0.0362, abs=5e-5)
    half = batch_of(violation=[[1]] * 5 + [[0]] * 5, length=[1] * 10)
    row = horizon_summary(half, [1], confidence=0.95).iloc[0]
    # Clopper-Pearson 95% for 5 of 10 (standard tables): (0.1871, 0.8129).
    assert row["ci_low"] == pytest.approx(0.1871, abs=1e-4)
    assert row["ci_high"] == pytest.approx(0.8129, abs=1e-4)
    every = batch_of(violation=[[1]] * 20, length=[1] * 20)
    row = horizon_summary(every, [1], confidence=0.95).iloc[0]
    assert row["ci_high"] == 1.0
    assert row["ci_low"] == pytest.approx(0.025 ** (1 / 20), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 12),
    steps=st.integers(1, 30),
)
def test_violation_curve_is_monotone_in_the_horizon(
    data: st.DataObject, n: int, steps: int
) -> None:
    violation = np.array(
        data.draw(
            st.lists(
                st.lists(st.booleans(), min_size=steps, max_size=steps), min_size=n, max_size=n
            )
        )
    )
    length = np.array(data.draw(st.lists(st.integers(0, steps), min_size=n, max_size=n)))
    horizons = sorted(data.draw(st.sets(st.integers(1, steps), min_size=1, max_size=steps)))
    batch = EpisodeBatch(
        reward=np.zeros((n, steps)),
        cost=violation.astype(float),
        violation=violation,
        length=length,
    )
    summary = horizon_summary(batch, horizons, confidence=0.9)
    assert np.all(np.diff(summary["violations"]) >= 0)
    assert np.all(np.diff(summary["ci_low"]) >= -1e-12)
    assert np.all(np.diff(summary["ci_high"]) >= -1e-12)
    assert np.all(np.diff(summary["mean_cost"]) >= 0)
    # Brute force: k_H counts episodes with a violation among their first min(H, length) steps.
    for h, k in zip(horizons, summary["violations"], strict=True):
        expected = sum(bool(violation[i, : min(h, length[i])].any()) for i in range(n))
        assert k == expected


@pytest.mark.parametrize(
    ("horizons", "message"),
    [
        ([], "non-empty"),
        ([0, 5], ">= 1"),
        ([5, 5], "distinct"),
        ([1.5], "integers"),
        ([1, 11], "exceed"),
    ],
)
def test_bad_horizons_are_rejected(horizons: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_horizons(horizons, max_steps=10)


def test_bad_inputs_give_clear_errors() -> None:
    with pytest.raises(ValueError, match="length must lie"):
        first_violation_steps(np.zeros((2, 3), bool), np.array([1, 4]))
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        first_violation_steps(np.zeros(3, bool), np.array([1]))
    with pytest.raises(ValueError, match="first_violation entries"):
        violation_counts(np.array([0, 2]), [1])
    with pytest.raises(ValueError, match="cost has shape"):
        EpisodeBatch(
            reward=np.zeros((2, 3)),
            cost=np.zeros((2, 4)),
            violation=np.zeros((2, 3), bool),
            length=np.array([3, 3]),
        )
    empty = EpisodeBatch(
        reward=np.zeros((0, 3)),
        cost=np.zeros((0, 3)),
        violation=np.zeros((0, 3), bool),
        length=np.zeros(0, dtype=np.int64),
    )
    with pytest.raises(ValueError, match="zero episodes"):
        horizon_summary(empty, [1], confidence=0.95)
    with pytest.raises(ValueError, match="confidence"):
        horizon_summary(batch_of([[0]], [1]), [1], confidence=1.5)
