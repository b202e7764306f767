"""The `lagrange` section of the run config: ippo_lag's cost critic and Lagrange multiplier."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from src.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_probability,
    fail,
)
from src.config.section import Section

__all__ = ["COST_ADVANTAGE_SCALES", "COST_SIGNALS", "LagrangeConfig", "check_lambda_init"]

COST_SIGNALS = ("every", "first")
"""Values of `cost_signal`."""
COST_ADVANTAGE_SCALES = ("batch", "batch_if_cost")
"""Values of `cost_advantage_scale`."""

_unit = partial(check_probability, open_interval=False)
_non_negative = partial(check_float, low=0.0, open_low=False)
_ema = partial(check_float, low=0.0, high=1.0, open_low=False, open_high=True)


def check_lambda_init(name: str, value: Any, *, lambda_max: float) -> float:
    """A starting multiplier: a float in [0, `lambda_max`]."""
    value = _non_negative(name, value)
    if value > lambda_max:
        raise fail(name, value, f"a float in [0.0, {lambda_max}] (at most lambda_max)")
    return value


@dataclass(frozen=True, kw_only=True)
class LagrangeConfig(Section):
    """The constraint P(violation in an episode) <= `max_risk` and how ippo_lag enforces it."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = ("max_risk", "lag_version")
    RECORDED_IF_SET: ClassVar[tuple[str, ...]] = ("violation_ends_reward",)
    RULES: ClassVar[Mapping[str, Callable[[str, Any], Any]]] = {
        "cost_signal": partial(check_choice, choices=COST_SIGNALS),
        "cost_gamma": _unit,
        "cost_gae_lambda": _unit,
        "team_cost": check_bool,
        "cost_advantage_scale": partial(check_choice, choices=COST_ADVANTAGE_SCALES),
        "violation_ends_reward": check_bool,
        "risk_window": partial(check_int, low=1),
        "risk_target_ratio": partial(check_float, low=0.0, high=1.0, open_low=True),
        "lambda_init": _non_negative,
        "lambda_max": _non_negative,
        "lagrangian_lr": partial(check_float, low=0.0),
        "pid_kp": _non_negative,
        "pid_ki": _non_negative,
        "pid_kd": _non_negative,
        "pid_d_delay": partial(check_int, low=1),
        "pid_ema_p": _ema,
        "pid_ema_d": _ema,
        "pid_d_from_first": check_bool,
        "pid_anti_windup": check_bool,
    }

    max_risk: float
    """The constraint's limit on the episode violation probability."""
    lag_version: str
    """Multiplier update, a key of `src.algos.lagrange.LAG_VERSIONS`."""
    cost_signal: str = "every"
    """What the cost critic and the cost advantages count: `every` violating step (the expected
    number of violations, an upper bound of the violation probability, with a signal on every
    step of an episode), or only the episode's `first` violation (the indicator itself, silent
    after it: the original ippo_lag). The multiplier sees the episode violation rate either way."""
    cost_gamma: float = 0.8
    """Discount of the cost signal. With `every`, 0.8 makes the cost-to-go the violations of
    about the next 5 steps: the consequence an action can change, not the noise of a whole
    long episode; with `first`, 1 makes the cost return the episode-violation indicator."""
    cost_gae_lambda: float = 0.5
    """GAE lambda of the cost advantages."""
    team_cost: bool = False
    """Charge the first violation to every agent of the copy, not only to those whose cost fired."""
    cost_advantage_scale: str = "batch"
    """How the cost advantages are scaled: standardised over the `batch`'s unmasked steps like
    the reward advantages, or so in a batch with a violating step and 0 in a batch without
    (`batch_if_cost`). Standardised, a batch without a violation turns the cost critic's noise
    into a signal of unit scale, which lambda weighs like a real one."""
    violation_ends_reward: bool = False
    """End the reward's process at every violating step, as the cost's first violation ends
    the cost's: the reward GAE treats the step as terminal (no bootstrap), so a violation
    forfeits the reward the critic expected after it (the early-terminated MDP of Sun et al.,
    2021), whatever lambda is; the reward critic learns the reward until the next violation.
    The multiplier and the cost advantages act as without it."""
    risk_window: int = 100
    """The multiplier sees the violation rate of the episodes of the last rollout, or of the
    last `risk_window` finished episodes when the rollout finished fewer."""
    risk_target_ratio: float = 1.0
    """The violation rate the multiplier steers the training episodes to, as a fraction of
    `max_risk` (in (0, 1]). At 1 the rate settles around `max_risk` itself, so a final policy
    lands above it about as often as below; a lower target leaves room for that spread."""
    lambda_init: float = 0.0
    """Initial multiplier (`v0`) or initial integral term (`pid`); at most `lambda_max`."""
    lambda_max: float = 5.0
    """Upper limit of the multiplier (both versions)."""
    lagrangian_lr: float = 0.5
    """Ascent step of `v0` per unit of (violation rate - max_risk)."""
    pid_kp: float = 0.5
    """Proportional gain of `lag_version: pid`."""
    pid_ki: float = 0.2
    """Integral gain of `pid`."""
    pid_kd: float = 1.0
    """Derivative gain of `pid` (acts only on rising violation rates)."""
    pid_d_delay: int = 10
    """Updates between the two smoothed rates whose difference is the derivative term."""
    pid_ema_p: float = 0.5
    """EMA weight smoothing the proportional term (0 = none)."""
    pid_ema_d: float = 0.5
    """EMA weight smoothing the rate used by the derivative term (0 = none)."""
    pid_d_from_first: bool = True
    """The derivative's reference starts at the first measured rate; false starts it at 0 (the
    original controller, whose first update reads the first rate as a rise)."""
    pid_anti_windup: bool = True
    """The integral term stops at `lambda_max` as well as at 0 (integrator clamping); false
    clamps it at 0 only (the original controller). Unclamped, a long violation winds the
    integral far above the cap, and lambda stays at the cap after the policy is safe until the
    integral has unwound below it, at `pid_ki` x the limit per update."""

    def __post_init__(self) -> None:
        """Every field by its rule, then `lambda_init` against `lambda_max`."""
        super().__post_init__()
        check_lambda_init("lambda_init", self.lambda_init, lambda_max=self.lambda_max)
