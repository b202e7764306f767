"""The results' statistics of `src.stats`: the between-run interval, the exact McNemar test and
Holm's adjustment, against values computed by hand."""

from __future__ import annotations

import math

import pytest
from scipy.stats import beta

from src.stats import between_run_interval, exact_mcnemar, holm_adjust

T_975_2 = 4.302652729749462  # Student-t quantile t(0.975, 2 degrees of freedom), from tables


def test_between_run_interval_of_three_runs_by_hand() -> None:
    """Rates 0.4, 0.5, 0.6 of 100 episodes each: mean 0.5, standard deviation 0.1, half-width
    t(0.975, 2) x 0.1 / sqrt(3) = 0.24841; the pooled interval of 150 of 300 (about 0.44 to
    0.56) lies inside, so the interval is the t-interval."""
    mean, low, high = between_run_interval(k=[40, 50, 60], n=[100, 100, 100], confidence=0.95)
    half = T_975_2 * 0.1 / math.sqrt(3)
    assert mean == pytest.approx(0.5)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert half == pytest.approx(0.24841, abs=1e-5)


def test_between_run_interval_is_clipped_to_probabilities() -> None:
    """Rates 0.1, 0.2, 0.3: 0.2 +- 0.24841 reaches below 0, clipped to 0."""
    mean, low, high = between_run_interval(k=[5, 10, 15], n=[50, 50, 50], confidence=0.95)
    assert (mean, low) == (pytest.approx(0.2), 0.0)
    assert high == pytest.approx(0.2 + T_975_2 * 0.1 / math.sqrt(3))


def test_runs_that_agree_get_the_pooled_interval() -> None:
    """Three runs with 5 of 100 each have no spread (a t-interval of width 0): the interval is
    widened to the pooled Clopper-Pearson interval of 15 of 300, the Beta(15, 286) and
    Beta(16, 285) quantiles."""
    mean, low, high = between_run_interval(k=[5, 5, 5], n=[100, 100, 100], confidence=0.95)
    assert mean == pytest.approx(0.05)
    assert low == pytest.approx(beta.ppf(0.025, 15, 286), rel=1e-9)
    assert high == pytest.approx(beta.ppf(0.975, 16, 285), rel=1e-9)


def test_one_run_has_the_pooled_interval_only() -> None:
    """0 of 100: [0, 1 - 0.025 ** (1 / 100)]."""
    mean, low, high = between_run_interval(k=[0], n=[100], confidence=0.95)
    assert (mean, low) == (0.0, 0.0)
    assert high == pytest.approx(1 - 0.025 ** (1 / 100), rel=1e-9)
    with pytest.raises(ValueError, match="non-empty"):
        between_run_interval(k=[], n=[], confidence=0.95)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (8, 1, 2 * (1 + 9) / 512),  # 0.0390625
        (1, 8, 2 * (1 + 9) / 512),  # symmetric
        (10, 0, 2 / 1024),
        (5, 0, 2 / 32),
        (10, 2, 2 * (1 + 12 + 66) / 4096),
        (3, 3, 1.0),  # 2 x 42 / 64 > 1: capped
        (0, 0, 1.0),  # no discordant pair
    ],
)
def test_exact_mcnemar_by_hand(b: int, c: int, p: float) -> None:
    assert exact_mcnemar(b, c) == pytest.approx(p, rel=1e-12)


def test_exact_mcnemar_refuses_non_counts() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        exact_mcnemar(-1, 2)
    with pytest.raises(ValueError, match="integers"):
        exact_mcnemar(1.5, 2)  # type: ignore[arg-type]


def test_holm_adjustment_by_hand() -> None:
    """Sorted 0.001, 0.02, 0.03, 0.5 of four tests: x 4, x 3, x 2, x 1 = 0.004, 0.06, 0.06,
    0.5, each at least the one before; back in the order given."""
    adjusted = holm_adjust([0.03, 0.5, 0.001, 0.02])
    assert adjusted.tolist() == pytest.approx([0.06, 0.5, 0.004, 0.06])
    assert holm_adjust([0.6, 0.9]).tolist() == [1.0, 1.0]  # capped at 1
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjust([1.2])
