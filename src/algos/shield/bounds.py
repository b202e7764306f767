"""Risk bounds of the shield's calibration and their confidence schedule.

From k events in n trials, u(k, n, delta) is an upper bound on the event's probability that
holds with probability >= 1 - delta:

- `bayesian`: upper (1 - delta) quantile of the Beta(1 + k, 1 + n - k) posterior;
- `frequentist`: one-sided Clopper-Pearson upper bound;
- `mean`: k / n (no confidence, for ablations).

With the `summable` schedule delta_t = 6 delta / (pi^2 t^2) for t = 1, 2, ...,
sum_t delta_t <= delta, so by the union bound all of a sequence's bounds hold together with
probability >= 1 - delta; `constant` uses delta_t = delta. The shield's trainer counts t over
its model fits (the calibration factor and the calibration map, `src.algos.shield.trainer`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from src.config.base import CREDIBLE_SCHEDULES, REWARD_MODES
from src.stats import beta_posterior_upper, clopper_pearson_upper

__all__ = ["calibration_factor", "credible_delta", "risk_bound"]


def credible_delta(step: ArrayLike, *, delta: float, schedule: str) -> np.ndarray:
    """delta_t for 1-based indices `step` under `schedule` (`summable` or `constant`).

    >>> float(credible_delta(1, delta=0.1, schedule="constant"))
    0.1
    >>> round(float(credible_delta(2, delta=0.1, schedule="summable")), 6)
    0.015198
    """
    t = np.asarray(step, dtype=np.float64)
    if np.any(t < 1) or np.any(t != np.floor(t)):
        raise ValueError(f"step must be integers >= 1 (1-based index), got {step}")
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
