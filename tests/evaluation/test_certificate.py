"""The certificate of a trained v1 shield reaches eval.parquet; other runs have none."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from src.algos.shield.calibration import certificate_of, load_certificate
from src.algos.train import train_run
from src.analysis.export import CERTIFICATE_COLUMNS, EVAL_SCHEMA
from src.analysis.files import read_parquet
from src.core.io import load_from_file, save_to_file
from src.evaluation.evaluate import evaluate_run
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

# Run name -> (algo, config overrides); tiny budgets, four calibration episodes.
RUNS = {
    "shield_v1": ("shield", {"shield_version": "v1", "wm_version": "v1"}),
    "shield_v0": ("shield", {}),
    "ippo": ("ippo", {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny trained run per entry of `RUNS` on hazard_grid (two policy updates each)."""
    root = tmp_path_factory.mktemp("certificate")
    run_dirs = {}
    for name, (algo, overrides) in RUNS.items():
        algo_params = {"calibration_episodes": 4, "critic_steps": 2} if name == "shield_v1" else {}
        config = tiny_run_config(algo, algo_params=algo_params, **overrides)
        run_dirs[name] = root / name / "run0"
        train_run(config, run_dirs[name], progress=False)
    return run_dirs


def test_the_v1_shield_certificate_is_on_every_eval_row(runs: dict[str, Path]) -> None:
    run_dir = runs["shield_v1"]
    certificate = load_certificate(run_dir)
    assert certificate is not None and certificate.episodes == 4 and certificate.tested
    evaluate_run(run_dir, run_dir / "eval.parquet")
    rows = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA).to_pylist()
    assert len(rows) == 6  # three horizons, shield on and off
    stored = certificate.to_dict()
    for row in rows:
        for column, (key, _) in CERTIFICATE_COLUMNS.items():
            assert row[column] == stored[key], column
    # The calibration episodes cover the constraint horizon: the tiny runs' cap, 10 steps.
    assert rows[0]["cert_horizon"] == 10 and rows[0]["cert_episodes"] == 4


def test_a_certified_shield_reads_as_certified(runs: dict[str, Path], tmp_path: Path) -> None:
    """A policy.pt whose certificate passed (edited in place of a longer calibration)."""
    state = load_from_file(runs["shield_v1"], "policy.pt")
    entry = state["shield"]["certificate"]
    entry.update(certified=True, violations=0, p_value=0.0123, allowance=0.05)
    run_dir = tmp_path / "run0"
    save_to_file(load_from_file(runs["shield_v1"], "config.json"), run_dir, "config.json")
    save_to_file(state, run_dir, "policy.pt")
    evaluate_run(run_dir, run_dir / "eval.parquet")
    table = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA)
    assert table.column("certified").to_pylist() == [True] * 6
    assert table.column("cert_violations").to_pylist() == [0] * 6
    assert table.column("cert_p_value").to_pylist() == [0.0123] * 6
    assert table.column("cert_allowance").to_pylist() == [0.05] * 6


@pytest.mark.parametrize("name", ["ippo", "shield_v0"])
def test_runs_without_a_certificate_have_null_columns(runs: dict[str, Path], name: str) -> None:
    run_dir = runs[name]
    assert load_certificate(run_dir) is None
    evaluate_run(run_dir, run_dir / "eval.parquet")
    table = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA)
    assert table.num_rows > 0
    for column in CERTIFICATE_COLUMNS:
        assert table.column(column).null_count == table.num_rows, column


def test_certificate_of_reads_only_a_certificate_entry() -> None:
    assert certificate_of({"config": {}}) is None
    assert certificate_of({"shield": {"armed": True}}) is None
    entry = {
        "certified": False,
        "allowance": 0.01,
        "max_risk": 0.1,
        "delta": 0.05,
        "horizon": 100,
        "episodes": 0,
        "violations": -1,
        "p_value": math.nan,
        "first_seed": 7,
        "tested": [],
    }
    certificate = certificate_of({"shield": {"certificate": entry}})
    assert certificate is not None and certificate.statement.startswith("no certificate")
    with pytest.raises(ValueError, match=r"run7/policy\.pt.*not a certificate"):
        certificate_of({"shield": {"certificate": {"certified": True}}}, where="run7/policy.pt")
