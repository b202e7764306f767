"""The multipliers: direction of their updates and the PID terms on a known sequence."""

from __future__ import annotations

import itertools

import pytest

from src.algos.lagrange import GradientLagrange, PIDLagrange


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
    # cost 0.3: P = 0.2, I = 0.1, D = 0.3 - 0 -> 0.2 + 0.1 + 0.6
    assert pid.update(0.3) == pytest.approx(0.9)
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


def test_pid_smoothing_delay_cap_and_state_round_trip():
    pid = PIDLagrange(
        limit=0.0, kp=0.0, ki=0.0, kd=1.0, d_delay=2, ema_p=0.5, ema_d=0.5, max_value=0.3
    )
    # ema cost: 0.5, 0.75; the derivative compares with two updates back (0, then 0)
    assert pid.update(1.0) == pytest.approx(0.3)  # 0.5 capped at max_value 0.3
    assert pid.cost_d == pytest.approx(0.5)
    pid.update(1.0)
    assert pid.cost_d == pytest.approx(0.75)
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
