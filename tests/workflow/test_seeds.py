"""src.seeds: the registry of every use of reset seeds and its overlap check."""

from __future__ import annotations

import pytest

from src.seeds import (
    CERTIFICATE_CHECK,
    CHECK_STRIDE,
    RESERVED,
    TRAINING_FLOOR,
    SeedUse,
    check_seed_uses,
    copy_seeds,
    overlaps,
)

DEFAULT = {
    "seed_offset": 0,
    "num_runs": 3,
    "num_envs": 32,
    "eval_offset": 1_000_000,
    "eval_episodes": 200,
    "video_episodes": 1,
    "calibration": {"shield": (20_000_000, 200), "shield_dec": (20_000_000, 200)},
}


def test_the_default_experiments_uses_are_disjoint() -> None:
    assert check_seed_uses(**DEFAULT) is None


def test_training_copies_reset_above_every_other_default_range() -> None:
    seeds = [s for run in range(100) for s in copy_seeds(run, 64)]
    assert min(seeds) >= TRAINING_FLOOR == 2**31 and max(seeds) < 2**32
    assert all(use.stop <= TRAINING_FLOOR for use in RESERVED)


def test_a_use_meets_another_by_one_shared_seed_and_touching_ranges_do_not() -> None:
    a = SeedUse("a", first=10, stop=20)
    assert a.meets(SeedUse("b", first=20, stop=30)) is None  # touching: 10..19 and 20..29
    assert a.meets(SeedUse("b", first=19, stop=30)) == 19
    assert a.meets(SeedUse("b", seeds=frozenset({5, 15}))) == 15
    assert SeedUse("b", seeds=frozenset({5, 15})).meets(a) == 15
    with pytest.raises(ValueError, match="stop 1 < first 2"):
        SeedUse("c", first=2, stop=1)


def test_videos_may_replay_evaluation_seeds_and_algorithms_share_calibration() -> None:
    """Allowed pairs: the videos and the evaluation; two algorithms' calibrations. A video range
    reaching into calibration is not."""
    assert check_seed_uses(**{**DEFAULT, "video_episodes": 500}) is None
    close = {**DEFAULT, "calibration": {"shield": (1_000_600, 100)}}
    assert check_seed_uses(**close) is None
    problem = check_seed_uses(**{**close, "video_episodes": 201})
    assert problem is not None and "the videos" in problem and "calibration of shield" in problem


def test_spent_ranges_bar_claims_not_training() -> None:
    """A training seed may land in a spent range (it claims nothing); a calibration may not."""
    spent = next(use for use in RESERVED if use.spent)
    training = SeedUse("training", "base.seed_offset", 0, seeds=frozenset({spent.first}))
    assert overlaps([training]) is None
    calibration = SeedUse("the calibration of x", "k", spent.first, spent.first, spent.first + 1)
    assert overlaps([calibration]) == (
        f"config key 'k' = {spent.first}: the seeds of the calibration of x "
        f"({spent.first}..{spent.first}) and of {spent.name} ({spent.describe()}) share seed "
        f"{spent.first}"
    )
    check = SeedUse("training", "base.seed_offset", 0, seeds=frozenset({CERTIFICATE_CHECK.first}))
    assert overlaps([check]) is not None  # the current check's range is not spent: it claims


def test_the_certificate_check_range_holds_a_hundred_runs() -> None:
    assert CERTIFICATE_CHECK.stop - CERTIFICATE_CHECK.first == 100 * CHECK_STRIDE


def test_the_paper_configs_first_calibration_range_is_refused() -> None:
    """Its counts asked for the ladder's depth: the paper grid's 5 runs of 1000 episodes from
    23,000,000 are spent; from 25,000,000 they are not."""
    paper = {**DEFAULT, "num_runs": 5, "eval_offset": 12_000_000, "eval_episodes": 1000}
    problem = check_seed_uses(**{**paper, "calibration": {"shield": (23_000_000, 1000)}})
    assert problem is not None
    assert "config key 'algo_params.shield.calibration_seed_offset' = 23000000" in problem
    assert "the paper config's calibration before its ladder reached H / T (spent)" in problem
    assert check_seed_uses(**{**paper, "calibration": {"shield": (23_005_000, 1000)}}) is None
    assert check_seed_uses(**{**paper, "calibration": {"shield": (25_000_000, 1000)}}) is None
