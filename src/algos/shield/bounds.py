"""Risk bounds of the shields, the credible-level schedule, rollout counts and calibration.

A candidate action is judged by k violations in K imagined rollouts. The bound u(k, K, delta_t)
is an upper bound on the violation probability that holds with probability >= 1 - delta_t:

- `bayesian`: upper (1 - delta_t) quantile of the Beta(1 + k, 1 + K - k) posterior;
- `frequentist`: one-sided Clopper-Pearson upper bound;
- `mean`: k / K (no confidence, for ablations).

With the `summable` schedule delta_t = 6 delta / (pi^2 t^2), t the 1-based step in the episode,
sum_t delta_t <= delta, so by the union bound all of an episode's bounds hold together with
probability >= 1 - delta. `constant` uses delta_t = delta.

Rollout count. With k = 0 both confidence bounds are at most ln(1/delta_t) / K:
Beta: 1 - delta^(1/(K+1)) <= ln(1/delta) / (K+1); Clopper-Pearson: 1 - delta^(1/K) <= ln(1/delta)/K
(both from 1 - e^-x <= x). So a clean sample certifies a candidate (u <= max_risk) iff K is large
enough, and since delta_t shrinks with t, K must grow with t:

    K_t = max(K_base, ceil(c * ln(1 / delta_t) / max_risk)),  c >= 1,

with t capped at the env's `max_steps` (no episode is longer, so K stays bounded). `mean` needs
no growth: 0 / K = 0 <= max_risk for any K.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from src.config.base import CREDIBLE_SCHEDULES, REWARD_MODES
from src.stats import beta_posterior_upper, clopper_pearson_upper

__all__ = ["calibration_factor", "credible_delta", "risk_bound", "rollouts_for_step"]


def credible_delta(step: ArrayLike, *, delta: float, schedule: str) -> np.ndarray:
    """delta_t for 1-based episode steps `step` under `schedule` (`summable` or `constant`).

    >>> float(credible_delta(1, delta=0.1, schedule="constant"))
    0.1
    >>> round(float(credible_delta(2, delta=0.1, schedule="summable")), 6)
    0.015198
    """
    t = np.asarray(step, dtype=np.float64)
    if np.any(t < 1) or np.any(t != np.floor(t)):
        raise ValueError(f"step must be integers >= 1 (1-based episode step), got {step}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if schedule == "summable":
        return 6.0 * delta / (math.pi**2 * t**2)
    if schedule == "constant":
        return np.full_like(t, delta)
    raise ValueError(f"schedule must be one of {list(CREDIBLE_SCHEDULES)}, got {schedule!r}")


def risk_bound(*, k: ArrayLike, n: ArrayLike, delta: ArrayLike, mode: str) -> np.ndarray:
    """Upper bound u(k, n, delta) on a violation probability from k violations in n rollouts.

    >>> float(risk_bound(k=3, n=10, delta=0.05, mode="mean"))
    0.3
    """
    if mode == "bayesian":
        return beta_posterior_upper(k=k, n=n, delta=delta)
    if mode == "frequentist":
        return clopper_pearson_upper(k=k, n=n, delta=delta)
    if mode == "mean":
        k_arr = np.asarray(k, dtype=np.float64)
        n_arr = np.asarray(n, dtype=np.float64)
        if np.any(n_arr < 1) or np.any(k_arr < 0) or np.any(k_arr > n_arr):
            raise ValueError("k and n must satisfy 0 <= k <= n and n >= 1 for every entry")
        return k_arr / n_arr
    raise ValueError(f"mode must be one of {list(REWARD_MODES)}, got {mode!r}")


def rollouts_for_step(
    step: ArrayLike,
    *,
    base: int,
    growth: float,
    max_risk: float,
    delta: float,
    schedule: str,
    mode: str,
    max_steps: int,
    multiple_of: int = 1,
) -> np.ndarray:
    """Rollout count K_t for 1-based episode steps `step` (the rule in the module docstring).

    `multiple_of` rounds K_t up so the rollouts split evenly over the world-model ensemble.
    With k = 0 the returned K_t gives risk_bound(0, K_t, delta_t) <= max_risk for every t.
    """
    if not isinstance(base, int) or base < 1:
        raise ValueError(f"base must be an int >= 1, got {base!r}")
    if not growth >= 1.0:
        raise ValueError(f"growth must be >= 1, got {growth!r}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
    if not isinstance(multiple_of, int) or multiple_of < 1:
        raise ValueError(f"multiple_of must be an int >= 1, got {multiple_of!r}")
    if mode not in REWARD_MODES:
        raise ValueError(f"mode must be one of {list(REWARD_MODES)}, got {mode!r}")
    t = np.minimum(np.asarray(step, dtype=np.int64), max_steps)
    delta_t = credible_delta(t, delta=delta, schedule=schedule)
    k_t = np.full(t.shape, base, dtype=np.int64)
    if mode != "mean":
        needed = np.ceil(growth * np.log(1.0 / delta_t) / max_risk).astype(np.int64)
        k_t = np.maximum(k_t, needed)
    return -(-k_t // multiple_of) * multiple_of


def calibration_factor(
    *, predicted: ArrayLike, observed: ArrayLike, delta: float, mode: str
) -> float:
    """c > 0 with c * mean(predicted) = a (1 - delta) upper bound on the true event rate.

    `predicted` are a model's probabilities of an event on held-out transitions, `observed`
    whether it happened (0/1). With k events in n transitions, the true rate of such
    transitions is at most u(k, n, delta) (`risk_bound` in `mode`) with probability
    >= 1 - delta; the model's probabilities are scaled by c = u / mean(predicted), up when
    they average to less than u, down when they average to more (a model that over-predicts
    makes its shield refuse actions it has no evidence against). 1 when there is nothing
    to check.

    >>> round(calibration_factor(predicted=[0.1] * 100, observed=[1] * 20 + [0] * 80,
    ...                          delta=0.05, mode="mean"), 6)
    2.0
    >>> round(calibration_factor(predicted=[0.4] * 100, observed=[1] * 20 + [0] * 80,
    ...                          delta=0.05, mode="mean"), 6)
    0.5
    """
    p = np.asarray(predicted, dtype=np.float64).reshape(-1)
    o = np.asarray(observed, dtype=np.float64).reshape(-1)
    if p.shape != o.shape:
        raise ValueError(f"predicted and observed differ in size: {p.size} vs {o.size}")
    if p.size == 0:
        return 1.0
    upper = float(risk_bound(k=int(o.sum()), n=p.size, delta=delta, mode=mode))
    mean = float(p.mean())
    if mean <= 0.0:
        return 1.0 if upper <= 0.0 else 1.0 / max(mean, 1e-12)
    return upper / mean
