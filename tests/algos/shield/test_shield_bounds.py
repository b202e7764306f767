"""Risk bounds, delta_t schedules and the rollout-count rule of the shield."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from src.algos.shield.bounds import credible_delta, risk_bound, rollouts_for_step
from src.config.shield import ShieldConfig

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


@pytest.mark.parametrize("mode", ["bayesian", "frequentist", "mean"])
@pytest.mark.parametrize("schedule", ["summable", "constant"])
@pytest.mark.parametrize("max_risk", [0.001, 0.01, 0.05, 0.2])
def test_zero_violations_certify_at_every_step(mode, schedule, max_risk):
    max_steps = 500
    t = np.arange(1, max_steps + 1)
    k_t = rollouts_for_step(
        t,
        base=16,
        growth=1.0,
        max_risk=max_risk,
        delta=0.05,
        schedule=schedule,
        mode=mode,
        max_steps=max_steps,
        multiple_of=1,
    )
    delta_t = credible_delta(t, delta=0.05, schedule=schedule)
    bound = risk_bound(k=np.zeros_like(k_t), n=k_t, delta=delta_t, mode=mode)
    assert np.all(bound <= max_risk)
    assert np.all(k_t >= 16)
    assert np.all(np.diff(k_t) >= 0)  # K grows (weakly) with t
    if mode != "mean" and schedule == "summable":
        # The rule is not wasteful: the smallest certifying K solves 1 - delta^(1/K) = max_risk,
        # K* = ln(1/delta) / -ln(1 - max_risk), and -ln(1 - r) / r <= 1 + r for r <= 0.5.
        k_star = math.log(1 / delta_t[-1]) / -math.log1p(-max_risk)
        assert k_t[-1] <= math.ceil((1 + max_risk) * k_star) + 1


def test_rollouts_cap_t_at_max_steps_and_round_to_ensemble():
    common = {
        "base": 10,
        "growth": 1.5,
        "max_risk": 0.05,
        "delta": 0.05,
        "schedule": "summable",
        "mode": "bayesian",
        "max_steps": 100,
    }
    k = rollouts_for_step([100, 101, 10_000], **common, multiple_of=4)
    assert k[0] == k[1] == k[2]
    assert np.all(k % 4 == 0)
    delta_100 = 6 * 0.05 / (math.pi**2 * 100**2)
    assert k[0] == 4 * math.ceil(math.ceil(1.5 * math.log(1 / delta_100) / 0.05) / 4)
    with pytest.raises(ValueError, match="growth"):
        rollouts_for_step(1, **{**common, "growth": 0.5})
    with pytest.raises(ValueError, match="max_steps"):
        rollouts_for_step(1, **{**common, "max_steps": 0})


@settings(max_examples=60, deadline=None)
@given(
    max_risk=st.floats(1e-3, 0.5),
    delta=st.floats(1e-4, 0.5),
    step=st.integers(1, 10_000),
    growth=st.floats(1.0, 4.0),
    members=st.integers(1, 8),
)
def test_k_rule_certifies_for_any_configuration(max_risk, delta, step, growth, members):
    for mode in ("bayesian", "frequentist"):
        n = rollouts_for_step(
            step,
            base=1,
            growth=growth,
            max_risk=max_risk,
            delta=delta,
            schedule="summable",
            mode=mode,
            max_steps=10_000,
            multiple_of=members,
        )
        delta_t = credible_delta(step, delta=delta, schedule="summable")
        assert risk_bound(k=0, n=n, delta=delta_t, mode=mode) <= max_risk


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


@pytest.mark.parametrize("mode", ["bayesian", "frequentist"])
def test_default_rollout_growth_certifies_a_one_percent_risk(mode):
    """With the default growth, one imagined violation does not sink a candidate, and a true
    risk of 1% is certified with probability >= 0.9 at every step of a 100-step episode (the
    default workflow's max_risk, delta and schedule). At c = 1 only k = 0 would certify."""
    growth = ShieldConfig.__dataclass_fields__["rollout_growth"].default
    base = ShieldConfig.__dataclass_fields__["rollout_count"].default
    members = ShieldConfig.__dataclass_fields__["ensemble_size"].default
    max_risk, delta, max_steps = 0.1, 0.05, 100
    for t in range(1, max_steps + 1):
        k_t = int(
            rollouts_for_step(
                t,
                base=base,
                growth=growth,
                max_risk=max_risk,
                delta=delta,
                schedule="summable",
                mode=mode,
                max_steps=max_steps,
                multiple_of=members,
            )
        )
        delta_t = credible_delta(t, delta=delta, schedule="summable")
        k = np.arange(k_t + 1)
        certified = risk_bound(k=k, n=k_t, delta=delta_t, mode=mode) <= max_risk
        k_max = int(k[certified].max())
        assert k_max >= 1, (t, k_t)
        assert stats.binom.cdf(k_max, k_t, 0.01) >= 0.9, (t, k_t, k_max)
