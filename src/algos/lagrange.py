"""Lagrange multipliers for constrained PPO: the constraint is `J_c <= limit`.

`GradientLagrange` (`lag_version: v0`) is projected gradient ascent on the Lagrangian's dual,
`lambda <- min(max(0, lambda + lr * (J_c - limit)), lambda_max)`. `PIDLagrange`
(`lag_version: pid`) is the PID-Lagrangian of Stooke, Achiam and Abbeel, "Responsive Safety in
Reinforcement Learning by PID Lagrangian Methods" (ICML 2020), Algorithm 2, with the
exponential smoothing of OmniSafe's `common/lagrange.py`; its integral term starts at
`lambda_init` and, like lambda, stops at `lambda_max` (unless `pid_anti_windup` is false).
Both expose `update(cost) -> lambda`, `value` and a plain-value state. `LAG_VERSIONS` maps
the run config's `lag_version` to a factory taking its `lagrange` section. Constructor
arguments are checked by the rules of `LagrangeConfig`, the one place they live.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from src.checks import check_float
from src.config.lagrange import LagrangeConfig, check_lambda_init

__all__ = ["LAG_VERSIONS", "GradientLagrange", "PIDLagrange"]

_RULES = LagrangeConfig.RULES


class GradientLagrange:
    """Gradient ascent on the multiplier, projected onto `0 <= lambda <= max_value`."""

    def __init__(
        self, *, limit: float, lr: float, init: float = 0.0, max_value: float | None = None
    ) -> None:
        """`limit`: constraint threshold; `lr`: ascent step size; `init`: starting lambda;
        `max_value`: upper limit of lambda (None: none)."""
        lr = _RULES["lagrangian_lr"]("lagrangian lr", lr)
        cap = math.inf if max_value is None else _RULES["lambda_max"]("lambda max_value", max_value)
        init = check_lambda_init("initial lambda", init, lambda_max=cap)
        self.limit, self.lr, self.value = check_float("limit", limit), lr, init
        self.max_value = cap

    def update(self, cost: float) -> float:
        """One ascent step on `lambda * (cost - limit)`; returns the new lambda."""
        step = self.value + self.lr * (cost - self.limit)
        self.value = min(max(0.0, step), self.max_value)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue, as plain floats."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict()`."""
        self.value = float(state["value"])


class PIDLagrange:
    """lambda = max(0, Kp * P + I + Kd * D), with I integrated and clamped (Stooke 2020).

    P is the (EMA-smoothed) constraint violation `cost - limit`; I starts at `init`, accumulates
    `Ki * (cost - limit)` and never goes below 0, nor above `max_value` with `anti_windup`; D
    is the rise of the (EMA-smoothed) cost over the last `d_delay` updates, counted only when
    positive so that falling cost never pushes lambda up. `ema_p = ema_d = 0` gives the
    unsmoothed algorithm.
    """

    def __init__(
        self,
        *,
        limit: float,
        kp: float,
        ki: float,
        kd: float,
        d_delay: int = 10,
        ema_p: float = 0.95,
        ema_d: float = 0.95,
        max_value: float = 100.0,
        init: float = 0.0,
        d_from_first: bool = True,
        anti_windup: bool = True,
    ) -> None:
        """Gains `kp`, `ki`, `kd` >= 0; EMA weights in [0, 1); lambda is capped at `max_value`;
        `init` is the starting integral term (and lambda), at most `max_value`;
        `d_from_first` starts the derivative's reference at the first rate (else at 0);
        `anti_windup` keeps the integral term within [0, `max_value`] (else only >= 0: the
        original controller)."""
        kp, ki, kd = (
            _RULES[f"pid_{n}"](f"pid {n}", g) for n, g in (("kp", kp), ("ki", ki), ("kd", kd))
        )
        ema_p = _RULES["pid_ema_p"]("pid ema_p", ema_p)
        ema_d = _RULES["pid_ema_d"]("pid ema_d", ema_d)
        d_delay = _RULES["pid_d_delay"]("pid d_delay", d_delay)
        max_value = _RULES["lambda_max"]("pid max_value", max_value)
        init = check_lambda_init("initial lambda", init, lambda_max=max_value)
        self.limit, self.kp, self.ki, self.kd = check_float("limit", limit), kp, ki, kd
        self.ema_p, self.ema_d, self.max_value = ema_p, ema_d, max_value
        self.integral = init
        self.delta_p = 0.0
        self.cost_d = 0.0
        self.cost_history: deque[float] = deque([0.0], maxlen=d_delay)
        self.measured = 0
        self.d_from_first = bool(d_from_first)
        self.integral_max = max_value if anti_windup else math.inf
        self.value = init

    def update(self, cost: float) -> float:
        """Feed the latest constraint estimate; returns the new lambda."""
        delta = cost - self.limit
        if self.measured == 0 and self.d_from_first:
            # The derivative compares smoothed rates; before the first measurement there is no
            # rate, so start from this one (a zero start reads the first rate as a rise, which
            # kicks lambda up before the policy has learned anything: "derivative kick").
            self.cost_d = cost
            self.cost_history = deque([cost], maxlen=self.cost_history.maxlen)
        self.measured += 1
        self.integral = min(max(0.0, self.integral + self.ki * delta), self.integral_max)
        self.delta_p = self.ema_p * self.delta_p + (1.0 - self.ema_p) * delta
        self.cost_d = self.ema_d * self.cost_d + (1.0 - self.ema_d) * cost
        derivative = max(0.0, self.cost_d - self.cost_history[0])
        output = self.kp * self.delta_p + self.integral + self.kd * derivative
        self.value = min(max(0.0, output), self.max_value)
        self.cost_history.append(self.cost_d)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue, as plain floats and lists."""
        return {
            "integral": self.integral,
            "delta_p": self.delta_p,
            "cost_d": self.cost_d,
            "cost_history": list(self.cost_history),
            "measured": self.measured,
            "value": self.value,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict()`."""
        self.integral = float(state["integral"])
        self.delta_p = float(state["delta_p"])
        self.cost_d = float(state["cost_d"])
        self.cost_history = deque(state["cost_history"], maxlen=self.cost_history.maxlen)
        self.measured = int(state["measured"])
        self.value = float(state["value"])


def _bounds(config: LagrangeConfig) -> dict[str, float]:
    """What every multiplier takes from the config: its limit (`max_risk` x
    `risk_target_ratio`), start and cap."""
    limit = config.max_risk * config.risk_target_ratio
    return {"limit": limit, "init": config.lambda_init, "max_value": config.lambda_max}


def _gradient_multiplier(config: LagrangeConfig) -> GradientLagrange:
    return GradientLagrange(lr=config.lagrangian_lr, **_bounds(config))


def _pid_multiplier(config: LagrangeConfig) -> PIDLagrange:
    return PIDLagrange(
        kp=config.pid_kp,
        ki=config.pid_ki,
        kd=config.pid_kd,
        d_delay=config.pid_d_delay,
        ema_p=config.pid_ema_p,
        ema_d=config.pid_ema_d,
        d_from_first=config.pid_d_from_first,
        anti_windup=config.pid_anti_windup,
        **_bounds(config),
    )


# lag_version -> factory(LagrangeConfig) -> multiplier.
LAG_VERSIONS: dict[str, Callable[[LagrangeConfig], GradientLagrange | PIDLagrange]] = {
    "v0": _gradient_multiplier,
    "pid": _pid_multiplier,
}
