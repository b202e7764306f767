"""The `lagrange` section of the run config: ippo_lag's cost critic and Lagrange multiplier."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from src.checks import check_float, check_int, check_probability
from src.config.section import Section

__all__ = ["LagrangeConfig"]

_unit = partial(check_probability, open_interval=False)
_non_negative = partial(check_float, low=0.0, open_low=False)
_ema = partial(check_float, low=0.0, high=1.0, open_low=False, open_high=True)


@dataclass(frozen=True, kw_only=True)
class LagrangeConfig(Section):
    """The constraint P(violation in an episode) <= `max_risk` and how ippo_lag enforces it."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = ("max_risk", "lag_version")
    RULES: ClassVar[Mapping[str, Callable[[str, Any], Any]]] = {
        "cost_gamma": _unit,
        "cost_gae_lambda": _unit,
        "lambda_init": _non_negative,
        "lagrangian_lr": partial(check_float, low=0.0),
        "pid_kp": _non_negative,
        "pid_ki": _non_negative,
        "pid_kd": _non_negative,
        "pid_d_delay": partial(check_int, low=1),
        "pid_ema_p": _ema,
        "pid_ema_d": _ema,
        "pid_max_lambda": _non_negative,
    }

    max_risk: float
    """The constraint's limit on the episode violation probability."""
    lag_version: str
    """Multiplier update, a key of `src.algos.lagrange.LAG_VERSIONS`."""
    cost_gamma: float = 1.0
    """Discount of the cost signal; 1 makes the cost return the episode-violation indicator."""
    cost_gae_lambda: float = 0.95
    """GAE lambda of the cost advantages."""
    lambda_init: float = 0.0
    """Initial multiplier of `lag_version: v0`."""
    lagrangian_lr: float = 0.5
    """Ascent step of `v0` per unit of (violation rate - max_risk)."""
    pid_kp: float = 1.0
    """Proportional gain of `lag_version: pid`."""
    pid_ki: float = 0.5
    """Integral gain of `pid`."""
    pid_kd: float = 1.0
    """Derivative gain of `pid` (acts only on rising violation rates)."""
    pid_d_delay: int = 10
    """Updates between the two smoothed rates whose difference is the derivative term."""
    pid_ema_p: float = 0.5
    """EMA weight smoothing the proportional term (0 = none)."""
    pid_ema_d: float = 0.5
    """EMA weight smoothing the rate used by the derivative term (0 = none)."""
    pid_max_lambda: float = 100.0
    """Upper limit of the pid multiplier."""
