"""The certificate of a trained shield reaches eval.parquet; other runs have none; a run folder
recorded with a retired version name is refused."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from src.algos.policy import load_actor
from src.algos.shield.calibration import certificate_of, load_certificate
from src.algos.train import train_run
from src.checks import ConfigError
from src.core.io import load_from_file, save_to_file
from src.evaluation.evaluate import evaluate_run
from src.schemas import CERTIFICATE_COLUMNS, EVAL_SCHEMA, read_parquet
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

# Run name -> (algo, config overrides); tiny budgets, four calibration episodes.
RUNS = {
    "shield": ("shield", {}),
    "ippo": ("ippo", {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny trained run per entry of `RUNS` on hazard_grid (two policy updates each)."""
    root = tmp_path_factory.mktemp("certificate")
    run_dirs = {}
    for name, (algo, overrides) in RUNS.items():
        algo_params = {"calibration_episodes": 4, "critic_steps": 2} if name == "shield" else {}
        config = tiny_run_config(algo, algo_params=algo_params, **overrides)
        run_dirs[name] = root / name / "run0"
        train_run(config, run_dirs[name], progress=False)
    return run_dirs


def test_the_shield_certificate_is_on_every_eval_row(runs: dict[str, Path]) -> None:
    run_dir = runs["shield"]
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
    state = load_from_file(runs["shield"], "policy.pt")
    entry = state["shield"]["certificate"]
    entry.update(certified=True, violations=0, p_value=0.0123, allowance=0.05)
    run_dir = tmp_path / "run0"
    save_to_file(load_from_file(runs["shield"], "config.json"), run_dir, "config.json")
    save_to_file(state, run_dir, "policy.pt")
    evaluate_run(run_dir, run_dir / "eval.parquet")
    table = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA)
    assert table.column("certified").to_pylist() == [True] * 6
    assert table.column("cert_violations").to_pylist() == [0] * 6
    assert table.column("cert_p_value").to_pylist() == [0.0123] * 6
    assert table.column("cert_allowance").to_pylist() == [0.05] * 6


def test_runs_without_a_certificate_have_null_columns(runs: dict[str, Path]) -> None:
    run_dir = runs["ippo"]
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


@pytest.mark.parametrize(
    ("recorded", "named"),
    [
        ({"shield_version": "v1", "wm_version": "v1"}, "shield_version='v1'"),
        ({"shield_version": "v1"}, "shield_version='v1'"),
        ({"wm_version": "v1"}, "wm_version='v1'"),
    ],
)
def test_a_run_folder_recorded_with_the_certified_shields_old_name_is_refused(
    runs: dict[str, Path], tmp_path: Path, recorded: dict[str, str], named: str
) -> None:
    """The certified shield was `v1` before the old `v0` shield was removed: a run folder of
    that code (config.json and policy.pt say v1) is refused in one line naming the key and
    the value, before anything is evaluated, rendered or rebuilt."""
    run_dir = tmp_path / "run0"
    shutil.copytree(runs["shield"], run_dir)
    (run_dir / "eval.parquet").unlink(missing_ok=True)
    config = {**load_from_file(run_dir, "config.json"), **recorded}
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    state = load_from_file(run_dir, "policy.pt")
    state["config"] = {**state["config"], **recorded}
    state["shield"]["config"] = {**state["shield"]["config"], **recorded}
    save_to_file(state, run_dir, "policy.pt")
    key, value = named.split("=")
    expected = (
        f"{named}: unknown {key} {value} for shield; known: v0 (v1 named the certified shield"
    )
    for read in (
        lambda: evaluate_run(run_dir, run_dir / "eval.parquet"),
        lambda: load_actor(run_dir, shielded=True),
    ):
        with pytest.raises(ConfigError, match=re.escape(expected)) as refused:
            read()
        assert "\n" not in str(refused.value)
        assert "older code version" in str(refused.value)
    assert not (run_dir / "eval.parquet").exists()
