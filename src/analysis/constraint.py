"""The safety constraint in the results: `max_risk`, pooled violation probabilities, the verdict.

The safe methods are asked for P(some agent violates within an episode) <= `max_risk`
(docs/design.md). Figures and tables read `max_risk` from the run configs stored in the
aggregated tables' Parquet metadata, never from a default.

Probabilities are pooled over the runs of a policy: with k_r violating episodes out of n_r in
run r, the policy's estimate is k / n with k = sum k_r and n = sum n_r, and its interval is the
two-sided Clopper-Pearson interval of (k, n). It is an interval for the runs' average violation
probability (each run weighted by its episodes) that stays within [0, 1] whatever the number of
runs; how much the runs differ from each other is shown by their own points next to it. A
Student-t interval across 2 runs would instead multiply the runs' spread by t = 12.7.

Verdict per policy at the constraint horizon H (`constraint_horizon`): "met" when the upper
end of the pooled interval is <= `max_risk`, "point" when only the pooled estimate is, and
"not met" otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from src.analysis.aggregate import CONFIGS_METADATA_KEY
from src.config.base import CONSTRAINT_HORIZON
from src.stats import clopper_pearson_interval

__all__ = [
    "CONSTRAINT_HORIZON",
    "MET",
    "NOT_MET",
    "POINT",
    "constraint_horizon",
    "constraint_status",
    "max_risk_by_env",
    "max_risk_of_runs",
    "pooled_rate",
    "pooled_violations",
    "run_configs",
]


MET, POINT, NOT_MET = "met", "point", "not met"


def run_configs(table: pa.Table) -> list[dict]:
    """The run configs stored in an aggregated table's metadata (empty if it has none)."""
    metadata = table.schema.metadata or {}
    if CONFIGS_METADATA_KEY not in metadata:
        return []
    configs = json.loads(metadata[CONFIGS_METADATA_KEY])
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ValueError(
            f"metadata {CONFIGS_METADATA_KEY!r} must hold a JSON list of run configs, "
            f"got {type(configs).__name__}"
        )
    return configs


def max_risk_of_runs(configs: Iterable[dict]) -> pd.DataFrame:
    """One row per run config: `env`, `algo`, `run`, `max_risk`."""
    rows = [
        {
            "env": str(config["env_name"]),
            "algo": str(config["algo"]),
            "run": int(config["run_idx"]),
            "max_risk": float(config["max_risk"]),
        }
        for config in configs
    ]
    return pd.DataFrame(rows, columns=["env", "algo", "run", "max_risk"])


def max_risk_by_env(configs: Iterable[dict]) -> dict[str, tuple[float, ...]]:
    """Per env, the distinct `max_risk` values of its runs in increasing order."""
    frame = max_risk_of_runs(configs)
    return {
        str(env): tuple(sorted(float(v) for v in group["max_risk"].unique()))
        for env, group in frame.groupby("env", sort=True)
    }


def constraint_horizon(horizons: Iterable[int]) -> int:
    """The horizon at which the constraint is judged: the largest one <= `CONSTRAINT_HORIZON`.

    Without such a horizon it is the smallest one evaluated: P(violation within H) grows with
    H, so a policy that meets `max_risk` there meets it at `CONSTRAINT_HORIZON` too.

    >>> [constraint_horizon(h) for h in ([1, 10, 50, 100, 200], [10, 60], [200])]
    [100, 60, 200]
    """
    values = sorted({int(h) for h in horizons})
    if not values:
        raise ValueError("no horizon to judge the constraint at")
    below = [h for h in values if h <= CONSTRAINT_HORIZON]
    return below[-1] if below else values[0]


def pooled_rate(
    k: Sequence[float] | np.ndarray, n: Sequence[float] | np.ndarray, *, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate k / n and its Clopper-Pearson interval, element-wise; NaN where n is 0.

    >>> p, low, high = pooled_rate([3, 0], [10, 0], confidence=0.95)
    >>> p.tolist(), bool(np.isnan(low[1]))
    ([0.3, nan], True)
    """
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if k_arr.shape != n_arr.shape:
        raise ValueError(f"k and n must have one shape, got {k_arr.shape} and {n_arr.shape}")
    some = n_arr > 0
    estimate = np.full(k_arr.shape, np.nan)
    low = np.full(k_arr.shape, np.nan)
    high = np.full(k_arr.shape, np.nan)
    if np.any(some):
        estimate[some] = k_arr[some] / n_arr[some]
        low[some], high[some] = clopper_pearson_interval(
            k=k_arr[some], n=n_arr[some], confidence=confidence
        )
    return estimate, low, high


def pooled_violations(evaluation: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Evaluation rows pooled over runs: per group of `by`, k, n, runs, estimate and interval.

    `evaluation` has the columns of `eval.parquet`; each group's interval is at the smallest
    `confidence` of its rows (the widest interval when runs disagree). Returns the `by` columns
    plus `violations` (k), `n`, `runs`, `confidence`, `p_violation`, `ci_low`, `ci_high`.
    """
    columns = [*by, "violations", "n", "runs", "confidence", "p_violation", "ci_low", "ci_high"]
    if evaluation.empty:
        return pd.DataFrame(columns=columns)
    grouped = (
        evaluation.groupby(list(by), sort=True)
        .agg(
            violations=("violations", "sum"),
            n=("n", "sum"),
            runs=("run", "nunique"),
            confidence=("confidence", "min"),
        )
        .reset_index()
    )
    rows = []
    for confidence, part in grouped.groupby("confidence", sort=False):
        estimate, low, high = pooled_rate(
            part["violations"].to_numpy(), part["n"].to_numpy(), confidence=float(confidence)
        )
        rows.append(part.assign(p_violation=estimate, ci_low=low, ci_high=high))
    return pd.concat(rows).sort_index()[columns].reset_index(drop=True)


def constraint_status(*, estimate: float, upper: float, max_risk: float) -> str:
    """The verdict: "met" if `upper` <= `max_risk`, "point" if only `estimate` is, else "not met".

    NaN in any argument (nothing measured) gives "".

    >>> pairs = [(0.02, 0.08), (0.05, 0.2), (0.3, 0.5)]
    >>> [constraint_status(estimate=e, upper=u, max_risk=0.1) for e, u in pairs]
    ['met', 'point', 'not met']
    """
    if any(math.isnan(x) for x in (estimate, upper, max_risk)):
        return ""
    if upper <= max_risk:
        return MET
    return POINT if estimate <= max_risk else NOT_MET
