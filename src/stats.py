"""Binomial confidence bounds shared by the shield and the final-policy evaluation.

All functions are vectorised over NumPy arrays (scalars work too) and keyword-only, so the
shield can bound every candidate of every agent of every env copy in one call.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaincinv
from scipy.stats import norm, rankdata

__all__ = [
    "beta_posterior_upper",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "paired_auc_test",
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


def paired_auc_test(
    first: ArrayLike, second: ArrayLike, labels: ArrayLike
) -> tuple[float, float, float]:
    """DeLong's test of two AUCs on the same labelled cases: (AUC of `first`, AUC of `second`,
    one-sided p-value of "second ranks the labels better than first").

    The variance of the difference comes from the structural components of both AUCs over
    the same positives and negatives (DeLong, DeLong and Clarke-Pearson 1988; computed from
    mid-ranks as in Sun and Xu 2014), so scores that largely agree have a small variance of
    their difference. p is NaN without both classes; when the difference has no variance
    (both rank every case alike, e.g. both separate the classes perfectly or one ties them
    all and the other separates them), p is 0 if the second's AUC is higher, else 1.
    """
    labels = np.asarray(labels, dtype=bool).reshape(-1)
    scores = [np.asarray(x, dtype=np.float64).reshape(-1) for x in (first, second)]
    if any(x.shape != labels.shape for x in scores):
        raise ValueError("first, second and labels must have the same length")
    auc = [rank_auc(x, labels) for x in scores]
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return auc[0], auc[1], float("nan")
    # Structural components: per positive, the share of negatives it outranks (ties half),
    # and per negative the share of positives that outrank it.
    v10, v01 = [], []
    for x in scores:
        every, pos, neg = rankdata(x), rankdata(x[labels]), rankdata(x[~labels])
        v10.append((every[labels] - pos) / negatives)
        v01.append(1.0 - (every[~labels] - neg) / positives)
    s10 = np.cov(np.stack(v10)) if positives > 1 else np.zeros((2, 2))
    s01 = np.cov(np.stack(v01)) if negatives > 1 else np.zeros((2, 2))
    contrast = np.array([-1.0, 1.0])
    variance = contrast @ s10 @ contrast / positives + contrast @ s01 @ contrast / negatives
    if not variance > 0:
        return auc[0], auc[1], 0.0 if auc[1] > auc[0] else 1.0
    z = (auc[1] - auc[0]) / np.sqrt(variance)
    return auc[0], auc[1], float(norm.sf(z))
