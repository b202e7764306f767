"""Risk bounds and delta_t schedules of the shield's calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from src.algos.shield.bounds import credible_delta, risk_bound

GRID_K = [1, 2, 5, 10, 37, 100, 256, 1000]
GRID_DELTA = [1e-6, 1e-3, 0.01, 0.05, 0.2, 0.5]


@pytest.mark.parametrize("n", GRID_K)
@pytest.mark.parametrize("delta", GRID_DELTA)
def test_bayesian_bound_is_the_beta_quantile(n, delta):
    k = np.arange(n + 1)
    expected = stats.beta.ppf(1.0 - delta, 1 + k, 1 + n - k)
    got = risk_bound(k=k, n=n, delta=delta, mode="bayesian")
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", GRID_K)
@pytest.mark.parametrize("delta", GRID_DELTA)
def test_frequentist_bound_is_clopper_pearson(n, delta):
    k = np.arange(n + 1)
    # One-sided Clopper-Pearson upper bound: the (1 - delta) quantile of Beta(k + 1, n - k),
    # and 1 when every trial failed.
    with np.errstate(all="ignore"):
        expected = np.where(k < n, stats.beta.ppf(1.0 - delta, k + 1, np.maximum(n - k, 1)), 1.0)
    got = risk_bound(k=k, n=n, delta=delta, mode="frequentist")
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    # Its defining property: P(Bin(n, u) <= k) = delta at the bound (k < n).
    inner = k < n
    np.testing.assert_allclose(stats.binom.cdf(k[inner], n, got[inner]), delta, rtol=1e-6)


def test_mean_bound_and_bad_inputs():
    np.testing.assert_allclose(risk_bound(k=[0, 3, 10], n=10, delta=0.1, mode="mean"), [0, 0.3, 1])
    with pytest.raises(ValueError, match="mode"):
        risk_bound(k=0, n=10, delta=0.1, mode="median")
    with pytest.raises(ValueError, match="k"):
        risk_bound(k=11, n=10, delta=0.1, mode="mean")
    with pytest.raises(ValueError, match="delta"):
        risk_bound(k=1, n=10, delta=1.5, mode="bayesian")


def test_bayesian_is_tighter_than_clopper_pearson_and_both_above_mean():
    k = np.arange(0, 50)
    bayes = risk_bound(k=k, n=50, delta=0.05, mode="bayesian")
    cp = risk_bound(k=k, n=50, delta=0.05, mode="frequentist")
    assert np.all(bayes <= cp + 1e-12)
    assert np.all(bayes >= k / 50)


def test_summable_schedule_sums_to_at_most_delta():
    delta = 0.05
    t = np.arange(1, 2_000_001)
    total = credible_delta(t, delta=delta, schedule="summable").sum()
    assert total <= delta
    # The tail beyond T is below 6 delta / (pi^2 T): the partial sum approaches delta.
    assert total >= delta - 6 * delta / (math.pi**2 * 2_000_000) - 1e-12
    np.testing.assert_allclose(credible_delta([1, 7], delta=0.2, schedule="constant"), [0.2, 0.2])


def test_schedule_rejects_bad_input():
    with pytest.raises(ValueError, match="step"):
        credible_delta(0, delta=0.1, schedule="summable")
    with pytest.raises(ValueError, match="delta"):
        credible_delta(1, delta=0.0, schedule="summable")
    with pytest.raises(ValueError, match="schedule"):
        credible_delta(1, delta=0.1, schedule="geometric")


def test_frequentist_coverage_at_fixed_p():
    """P(u(k) < p) <= delta for k ~ Bin(K, p): the bound is wrong at most at rate delta."""
    rng = np.random.default_rng(0)
    draws, delta = 20_000, 0.1
    for p, n in ((0.02, 200), (0.1, 64), (0.3, 40)):
        k = rng.binomial(n, p, size=draws)
        below = risk_bound(k=k, n=n, delta=delta, mode="frequentist") < p
        # Three binomial standard errors of slack for the Monte Carlo estimate.
        assert below.mean() <= delta + 3 * math.sqrt(delta * (1 - delta) / draws)


def test_bayesian_coverage_under_its_prior():
    """Over p ~ Uniform(0, 1) (the prior), P(u(k) < p) = delta exactly."""
    rng = np.random.default_rng(1)
    draws, delta, n = 40_000, 0.1, 50
    p = rng.uniform(size=draws)
    k = rng.binomial(n, p)
    rate = (risk_bound(k=k, n=n, delta=delta, mode="bayesian") < p).mean()
    assert abs(rate - delta) <= 3 * math.sqrt(delta * (1 - delta) / draws)
