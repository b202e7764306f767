"""Binomial confidence bounds shared by the shield and the final-policy evaluation.

All functions are vectorised over NumPy arrays (scalars work too) and keyword-only, so the
shield can bound every candidate of every agent of every env copy in one call.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaincinv
from scipy.stats import binom, rankdata
from scipy.stats import t as student_t

__all__ = [
    "beta_posterior_upper",
    "between_run_interval",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "exact_mcnemar",
    "holm_adjust",
    "rank_auc",
]


def _check_counts(k: np.ndarray, n: np.ndarray) -> None:
    if np.any(n < 1):
        raise ValueError(f"n must be >= 1, got {n.min()}")
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("k must satisfy 0 <= k <= n for every entry")


def _check_probability(name: str, value: np.ndarray) -> None:
    if np.any(~np.isfinite(value)) or np.any(value <= 0.0) or np.any(value >= 1.0):
        raise ValueError(f"{name} must lie in (0, 1), got {value}")


def clopper_pearson_interval(
    *, k: ArrayLike, n: ArrayLike, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper-Pearson interval for k successes in n trials.

    >>> low, high = clopper_pearson_interval(k=0, n=100, confidence=0.95)
    >>> float(low), round(float(high), 4)
    (0.0, 0.0362)
    """
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    _check_counts(k_arr, n_arr)
    _check_probability("confidence", np.asarray(confidence, dtype=np.float64))
    alpha = 1.0 - confidence
    # Beta(k, n-k+1) and Beta(k+1, n-k) quantiles; the endpoints are exactly 0 and 1 at k=0, k=n.
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k_arr > 0, betaincinv(k_arr, n_arr - k_arr + 1.0, alpha / 2.0), 0.0)
        high = np.where(
            k_arr < n_arr, betaincinv(k_arr + 1.0, n_arr - k_arr, 1.0 - alpha / 2.0), 1.0
        )
    return low, high


def clopper_pearson_upper(*, k: ArrayLike, n: ArrayLike, delta: ArrayLike) -> np.ndarray:
    """One-sided (1 - delta) Clopper-Pearson upper bound on a binomial probability."""
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    delta_arr = np.asarray(delta, dtype=np.float64)
    _check_counts(k_arr, n_arr)
    _check_probability("delta", delta_arr)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k_arr < n_arr, betaincinv(k_arr + 1.0, n_arr - k_arr, 1.0 - delta_arr), 1.0)


def beta_posterior_upper(*, k: ArrayLike, n: ArrayLike, delta: ArrayLike) -> np.ndarray:
    """Upper (1 - delta) quantile of the Beta(1 + k, 1 + n - k) posterior (uniform prior).

    With k = 0 the bound is 1 - delta ** (1 / (n + 1)), about ln(1/delta) / n.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    delta_arr = np.asarray(delta, dtype=np.float64)
    _check_counts(k_arr, n_arr)
    _check_probability("delta", delta_arr)
    return betaincinv(1.0 + k_arr, 1.0 + n_arr - k_arr, 1.0 - delta_arr)


def rank_auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """P(score of a positive > score of a negative) + P(tie) / 2: the area under the ROC curve
    (Mann-Whitney U / (n_pos n_neg), ties by mid-ranks). How well the scores rank the labels,
    whatever monotone map is applied to them; NaN without both a positive and a negative.

    >>> rank_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    0.75
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels, dtype=bool).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores and labels differ in length: {scores.size} and {labels.size}")
    if np.isnan(scores).any():
        raise ValueError("scores must not be NaN")
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = rankdata(scores)
    u = ranks[labels].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def between_run_interval(
    *, k: ArrayLike, n: ArrayLike, confidence: float
) -> tuple[float, float, float]:
    """Runs as the unit: the mean of the per-run rates k_r / n_r and its interval, (mean, low,
    high).

    The interval is the two-sided Student-t interval of the mean over the R runs (R - 1
    degrees of freedom, at `confidence`), widened to contain the pooled Clopper-Pearson
    interval of (sum k, sum n) and clipped to [0, 1]. The t-interval says where the average
    over runs like these may lie when the runs differ; the pooled exact interval is the
    binomial noise of their episodes, which runs that happen to agree would otherwise hide
    (their t-interval has width 0). With one run the interval is the pooled one.

    Rates 0.1, 0.2, 0.3 of 100 episodes each: mean 0.2, standard deviation 0.1, half-width
    t(0.975, 2) x 0.1 / sqrt(3) = 4.3027 x 0.0577 = 0.2484, so [-0.0484, 0.4484], clipped:

    >>> mean, low, high = between_run_interval(k=[10, 20, 30], n=[100, 100, 100], confidence=0.95)
    >>> round(mean, 6), low, round(high, 4)
    (0.2, 0.0, 0.4484)
    """
    k_arr = np.asarray(k, dtype=np.float64).reshape(-1)
    n_arr = np.asarray(n, dtype=np.float64).reshape(-1)
    if k_arr.shape != n_arr.shape or k_arr.size == 0:
        raise ValueError(f"k and n must be non-empty and of one length, got {k_arr} and {n_arr}")
    _check_counts(k_arr, n_arr)
    pooled_low, pooled_high = clopper_pearson_interval(
        k=k_arr.sum(), n=n_arr.sum(), confidence=confidence
    )
    rates = k_arr / n_arr
    mean = float(rates.mean())
    low, high = float(pooled_low), float(pooled_high)
    if rates.size > 1:
        half = float(
            student_t.ppf(0.5 + confidence / 2.0, rates.size - 1)
            * rates.std(ddof=1)
            / np.sqrt(rates.size)
        )
        low, high = min(low, mean - half), max(high, mean + half)
    return mean, max(low, 0.0), min(high, 1.0)


def exact_mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar test of paired binary outcomes: b pairs where only the first
    had the event, c where only the second had it; p = min(1, 2 P(Bin(b + c, 1/2) <=
    min(b, c))), and 1 when b + c = 0 (no discordant pair says nothing).

    b = 8, c = 1: 2 (C(9, 0) + C(9, 1)) / 2^9 = 2 x 10 / 512:

    >>> exact_mcnemar(8, 1)
    0.0390625
    >>> exact_mcnemar(0, 0), exact_mcnemar(3, 3)
    (1.0, 1.0)
    """
    if isinstance(b, bool) or isinstance(c, bool) or int(b) != b or int(c) != c:
        raise ValueError(f"b and c must be integers, got {b!r} and {c!r}")
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError(f"b and c must be >= 0, got {b} and {c}")
    if b + c == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), b + c, 0.5)))


def holm_adjust(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p becomes
    max over j <= i of min(1, (m - j + 1) p_(j)) for m tests. Rejecting where the adjusted p
    is <= alpha keeps the chance of any false rejection at most alpha, whatever the
    dependence between the tests.

    0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the 0.06 before it:

    >>> [round(float(p), 4) for p in holm_adjust([0.01, 0.04, 0.03])]
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if np.any(np.isnan(p)) or np.any(p < 0.0) or np.any(p > 1.0):
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted
