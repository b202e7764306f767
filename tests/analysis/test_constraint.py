"""max_risk from the run configs, pooled violation probabilities, the constraint's verdict."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from src.analysis.aggregate import CONFIGS_METADATA_KEY
from src.analysis.constraint import (
    constraint_horizon,
    constraint_status,
    max_risk_by_env,
    max_risk_of_runs,
    pooled_rate,
    pooled_violations,
    run_configs,
)
from src.stats import clopper_pearson_interval


def config(env: str, algo: str, run: int, max_risk: float) -> dict:
    return {"env_name": env, "algo": algo, "run_idx": run, "max_risk": max_risk}


def test_max_risk_comes_from_the_configs_in_the_metadata() -> None:
    configs = [
        config("grid", "ippo", 0, 0.1),
        config("grid", "shield", 0, 0.05),
        config("spread", "ippo", 0, 0.2),
    ]
    table = pa.table({"x": [1]}).replace_schema_metadata(
        {CONFIGS_METADATA_KEY: json.dumps(configs)}
    )
    assert run_configs(table) == configs
    # Runs of one env that disagree: each value is kept.
    assert max_risk_by_env(configs) == {"grid": (0.05, 0.1), "spread": (0.2,)}
    assert max_risk_of_runs(configs)["max_risk"].tolist() == [0.1, 0.05, 0.2]
    assert run_configs(pa.table({"x": [1]})) == []
    bad = table.replace_schema_metadata({CONFIGS_METADATA_KEY: json.dumps({"a": 1})})
    with pytest.raises(ValueError, match="JSON list of run configs"):
        run_configs(bad)


@pytest.mark.parametrize(
    ("horizons", "expected"),
    [([1, 10, 50, 100, 200], 100), ([1, 10, 50], 50), ([150, 200], 150), ([100], 100)],
)
def test_constraint_horizon(horizons: list[int], expected: int) -> None:
    assert constraint_horizon(horizons) == expected


def test_constraint_horizon_needs_a_horizon() -> None:
    with pytest.raises(ValueError, match="no horizon"):
        constraint_horizon([])


def test_pooled_rate_is_clopper_pearson_of_the_sums() -> None:
    estimate, low, high = pooled_rate([40, 0, 7], [200, 50, 0], confidence=0.9)
    expected = clopper_pearson_interval(k=[40, 0], n=[200, 50], confidence=0.9)
    np.testing.assert_allclose(estimate[:2], [0.2, 0.0])
    np.testing.assert_allclose(low[:2], expected[0])
    np.testing.assert_allclose(high[:2], expected[1])
    assert np.isnan([estimate[2], low[2], high[2]]).all()  # no episode, no estimate
    with pytest.raises(ValueError, match="one shape"):
        pooled_rate([1, 2], [3], confidence=0.9)


def test_pooled_violations_sum_runs_and_keep_groups_apart() -> None:
    rows = [
        {"algo": "a", "run": 0, "horizon": 10, "violations": 1, "n": 10, "confidence": 0.95},
        {"algo": "a", "run": 1, "horizon": 10, "violations": 3, "n": 30, "confidence": 0.95},
        {"algo": "b", "run": 0, "horizon": 10, "violations": 5, "n": 10, "confidence": 0.9},
    ]
    pooled = pooled_violations(pd.DataFrame(rows), by=["algo", "horizon"])
    assert pooled[["algo", "violations", "n", "runs"]].values.tolist() == [
        ["a", 4, 40, 2],
        ["b", 5, 10, 1],
    ]
    assert pooled["p_violation"].tolist() == [0.1, 0.5]
    high_b = float(clopper_pearson_interval(k=5, n=10, confidence=0.9)[1])
    assert pooled.loc[1, "ci_high"] == pytest.approx(high_b)  # each group at its confidence
    assert pooled_violations(pd.DataFrame(), by=["algo"]).empty


def test_constraint_status_boundaries() -> None:
    assert constraint_status(estimate=0.05, upper=0.1, max_risk=0.1) == "met"
    assert constraint_status(estimate=0.1, upper=0.2, max_risk=0.1) == "point"
    assert constraint_status(estimate=0.11, upper=0.2, max_risk=0.1) == "not met"
    assert constraint_status(estimate=math.nan, upper=math.nan, max_risk=0.1) == ""
    assert constraint_status(estimate=0.0, upper=0.01, max_risk=math.nan) == ""
