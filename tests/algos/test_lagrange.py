"""The multipliers: direction of their updates and the PID terms on a known sequence."""

from __future__ import annotations

import itertools

import pytest

from src.algos.lagrange import LAG_VERSIONS, GradientLagrange, PIDLagrange
from src.config.lagrange import LagrangeConfig


def test_gradient_multiplier_rises_above_limit_and_falls_to_zero_below():
    lag = GradientLagrange(limit=0.1, lr=0.5)
    assert lag.update(0.5) == pytest.approx(0.2)
    assert lag.update(0.5) == pytest.approx(0.4)
    assert lag.update(0.0) == pytest.approx(0.35)
    values = [lag.update(0.0) for _ in range(20)]
    assert all(b <= a for a, b in itertools.pairwise(values))
    assert min(values) == 0.0  # projected onto lambda >= 0, never negative


def test_gradient_multiplier_state_round_trip_and_checks():
    lag = GradientLagrange(limit=0.1, lr=1.0, init=0.3)
    lag.update(0.6)
    other = GradientLagrange(limit=0.1, lr=1.0)
    other.load_state_dict(lag.state_dict())
    assert other.update(0.2) == lag.update(0.2)
    with pytest.raises(ValueError, match="lr"):
        GradientLagrange(limit=0.1, lr=0.0)
    with pytest.raises(ValueError, match="initial lambda"):
        GradientLagrange(limit=0.1, lr=0.1, init=-1.0)


def test_pid_terms_on_a_known_sequence():
    # kp = 1, ki = 0.5, kd = 2, no smoothing, derivative over one update, limit 0.1.
    pid = PIDLagrange(limit=0.1, kp=1.0, ki=0.5, kd=2.0, d_delay=1, ema_p=0.0, ema_d=0.0)
    # cost 0.3: P = 0.2, I = 0.1, D = 0 (the first rate is the derivative's reference, no
    # kick from a zero start) -> 0.2 + 0.1
    assert pid.update(0.3) == pytest.approx(0.3)
    assert (pid.delta_p, pid.integral) == pytest.approx((0.2, 0.1))
    # cost 0.5: P = 0.4, I = 0.3, D = 0.5 - 0.3 -> 0.4 + 0.3 + 0.4
    assert pid.update(0.5) == pytest.approx(1.1)
    # cost 0.2: P = 0.1, I = 0.35, D = max(0, 0.2 - 0.5) = 0 (falling cost does not push)
    assert pid.update(0.2) == pytest.approx(0.45)
    # cost 0: P = -0.1, I = 0.3 -> 0.2; the integral is clamped at 0 and lambda at 0
    assert pid.update(0.0) == pytest.approx(0.2)
    for _ in range(10):
        value = pid.update(0.0)
    assert pid.integral == 0.0
    assert value == 0.0


def test_pid_with_a_zero_start_reads_the_first_rate_as_a_rise():
    # The original controller: D = 0.3 - 0 on the first update -> 0.2 + 0.1 + 2 * 0.3.
    pid = PIDLagrange(
        limit=0.1, kp=1.0, ki=0.5, kd=2.0, d_delay=1, ema_p=0.0, ema_d=0.0, d_from_first=False
    )
    assert pid.update(0.3) == pytest.approx(0.9)
    assert pid.update(0.5) == pytest.approx(1.1)


def test_pid_smoothing_delay_cap_and_state_round_trip():
    pid = PIDLagrange(
        limit=0.0, kp=0.0, ki=0.0, kd=1.0, d_delay=2, ema_p=0.5, ema_d=0.5, max_value=0.3
    )
    # The first rate starts the smoothed cost: no derivative yet.
    assert pid.update(0.2) == 0.0
    assert pid.cost_d == pytest.approx(0.2)
    # ema cost: 0.6, 0.8; the derivative compares with two updates back (0.2, then 0.2)
    assert pid.update(1.0) == pytest.approx(0.3)  # 0.4 capped at max_value 0.3
    assert pid.cost_d == pytest.approx(0.6)
    pid.update(1.0)
    assert pid.cost_d == pytest.approx(0.8)
    clone = PIDLagrange(limit=0.0, kp=0.0, ki=0.0, kd=1.0, d_delay=2, ema_p=0.5, ema_d=0.5)
    clone.max_value = 0.3
    clone.load_state_dict(pid.state_dict())
    assert clone.update(0.2) == pid.update(0.2)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"kp": -1.0}, "kp"), ({"ema_p": 1.0}, "ema_p"), ({"d_delay": 0}, "d_delay")],
)
def test_pid_rejects_bad_settings(kwargs, name):
    base = {"limit": 0.1, "kp": 1.0, "ki": 1.0, "kd": 1.0}
    with pytest.raises(ValueError, match=name):
        PIDLagrange(**{**base, **kwargs})


def _risk_under(lam: float) -> float:
    """A plant with a known optimum: the violation rate falls as 0.5 / (1 + lambda), so
    against the limit 0.1 the multiplier that just meets the constraint is 4."""
    return 0.5 / (1.0 + lam)


@pytest.mark.parametrize("version", sorted(LAG_VERSIONS))
def test_default_multipliers_settle_at_the_known_optimum_from_either_side(version: str) -> None:
    cap = LagrangeConfig(max_risk=0.1, lag_version=version).lambda_max
    assert cap > 4.0
    for start in (0.0, cap):
        config = LagrangeConfig(max_risk=0.1, lag_version=version, lambda_init=start)
        lag = LAG_VERSIONS[version](config)
        values = [lag.value]
        for _ in range(1500):
            values.append(lag.update(_risk_under(lag.value)))
        if start == 0.0:
            # violated throughout the approach (risk > 0.1 below lambda 4): lambda rises
            assert all(v > 0.0 for v in values[1:])
            assert values[100] > values[50] > values[10] > values[0]
        else:
            # satisfied throughout the approach: lambda falls from where it started
            assert all(b <= a + 1e-9 for a, b in itertools.pairwise(values))
            assert values[10] < start
        assert values[-1] == pytest.approx(4.0, abs=0.1)
        # settled: the last 10% of the updates move lambda by well under 10% of its value
        assert abs(values[-1] - values[-150]) < 0.01 * values[-1]


def test_gradient_multiplier_cap_and_pid_initial_value() -> None:
    lag = GradientLagrange(limit=0.1, lr=1.0, max_value=0.5)
    assert lag.update(1.0) == 0.5
    assert GradientLagrange(limit=0.1, lr=1.0).update(100.0) == pytest.approx(99.9)  # no cap
    pid = PIDLagrange(limit=0.1, kp=0.0, ki=1.0, kd=0.0, ema_p=0.0, ema_d=0.0, init=2.0)
    assert pid.value == 2.0
    assert pid.update(0.0) == pytest.approx(1.9)  # the integral starts at init
    with pytest.raises(ValueError, match="initial lambda"):
        PIDLagrange(limit=0.1, kp=1.0, ki=1.0, kd=1.0, init=200.0)
    with pytest.raises(ValueError, match="initial lambda"):
        GradientLagrange(limit=0.1, lr=1.0, init=1.0, max_value=0.5)
    with pytest.raises(ValueError, match="max_value"):
        GradientLagrange(limit=0.1, lr=1.0, max_value=-1.0)


@pytest.mark.parametrize("version", sorted(LAG_VERSIONS))
def test_factories_pass_the_cap_and_the_initial_value(version: str) -> None:
    config = LagrangeConfig(max_risk=0.1, lag_version=version, lambda_init=0.5, lambda_max=0.75)
    lag = LAG_VERSIONS[version](config)
    assert (lag.value, lag.max_value) == (0.5, 0.75)
    for _ in range(200):
        lag.update(1.0)
    assert lag.value == 0.75


@pytest.mark.parametrize("version", sorted(LAG_VERSIONS))
def test_the_multiplier_steers_to_the_risk_target_below_max_risk(version: str) -> None:
    """A rate between the target and max_risk still raises the multiplier; the default target
    is max_risk itself, where the same rate lowers it."""
    for ratio, rises in ((0.5, True), (1.0, False)):
        config = LagrangeConfig(
            max_risk=0.1, lag_version=version, lambda_init=1.0, risk_target_ratio=ratio
        )
        lag = LAG_VERSIONS[version](config)
        assert lag.limit == pytest.approx(0.1 * ratio)
        start = lag.value
        for _ in range(20):
            lag.update(0.07)
        assert (lag.value > start) is rises


@pytest.mark.parametrize("ratio", [0.0, -0.5, 1.5, "0.5"])
def test_a_risk_target_outside_the_unit_interval_is_refused(ratio: object) -> None:
    with pytest.raises(ValueError, match="risk_target_ratio"):
        LagrangeConfig(max_risk=0.1, lag_version="pid", risk_target_ratio=ratio)


@pytest.mark.parametrize("anti_windup", [False, True])
def test_the_integral_stops_at_the_cap_only_with_anti_windup(anti_windup: bool) -> None:
    """A long violation, then a safe policy: clamped, the integral never passes the cap and
    lambda leaves it on the first update below the limit; unclamped, the integral winds far
    above the cap and lambda stays there until it has unwound. (Clamped, lambda stays at the
    cap for the one update in which the smoothed proportional term still exceeds what the
    integral has lost.)"""
    config = LagrangeConfig(max_risk=0.1, lag_version="pid", pid_anti_windup=anti_windup)
    lag = LAG_VERSIONS["pid"](config)
    for _ in range(200):
        lag.update(0.5)  # 0.4 above the limit: the integral gains 0.08 per update
    assert lag.value == config.lambda_max
    assert lag.integral == (config.lambda_max if anti_windup else pytest.approx(16.0))
    after = [lag.update(0.0) for _ in range(50)]  # safe: the integral loses 0.02 per update
    if anti_windup:
        assert after[0] == config.lambda_max
        assert all(b < a for a, b in itertools.pairwise(after))
    else:
        assert after == [config.lambda_max] * 50
    clone = LAG_VERSIONS["pid"](config)
    clone.load_state_dict(lag.state_dict())
    assert clone.update(0.0) == lag.update(0.0)


def test_anti_windup_is_refused_when_not_a_bool() -> None:
    with pytest.raises(ValueError, match="pid_anti_windup"):
        LagrangeConfig(max_risk=0.1, lag_version="pid", pid_anti_windup="yes")
