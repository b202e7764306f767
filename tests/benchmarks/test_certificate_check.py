"""benchmarks/certificate_check.py on a tiny trained v1 shield run."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import certificate_check
from src.algos.shield.calibration import load_certificate
from src.algos.train import train_run
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with one tiny v1 shield run (six calibration episodes)."""
    root = tmp_path_factory.mktemp("results")
    config = tiny_run_config(
        "shield",
        shield_version="v1",
        wm_version="v1",
        shield_patience=1,
        max_risk=0.5,
        algo_params={"calibration_episodes": 6, "critic_steps": 2},
    )
    train_run(config, root / "runs" / "hazard_grid" / "shield" / "run0", progress=False)
    return root


def test_the_certificate_is_reproduced_and_checked_on_fresh_seeds(results: Path):
    run = certificate_check.shield_runs(results)
    assert run == [(results / "runs" / "hazard_grid" / "shield" / "run0").absolute()]
    record = certificate_check.check_run(run[0], episodes=8, first_seed=9_000_000)
    certificate = load_certificate(run[0])
    assert record["reproduced"] is True
    assert record["calibration"] == f"{certificate.violations}/{certificate.episodes}"
    assert 0 <= record["fresh_violations"] <= 8 and record["fresh_episodes"] == 8
    assert record["fresh_rate"] <= record["fresh_upper"] <= 1
    assert record["calibration_seconds"] > 0 and record["evaluation_seconds"] > 0


def test_a_changed_certificate_is_not_reproduced(results: Path):
    run = certificate_check.shield_runs(results)[0]
    certificate = load_certificate(run)
    tested = [dict(rung, violations=rung["violations"] + 1) for rung in certificate.tested]
    forged = type(certificate)(**{**certificate.to_dict(), "tested": tested})
    same, _ = certificate_check.replay_calibration(run, forged)
    assert same is False


def test_every_shielded_algorithms_runs_are_checked(tmp_path: Path):
    for algo, run in [("shield", 0), ("shield_dec", 1), ("ippo", 0), ("shield_dec", 2)]:
        folder = tmp_path / "runs" / "intersection" / algo / f"run{run}"
        folder.mkdir(parents=True)
        if run != 2:  # run 2 is unfinished: no policy.pt
            (folder / "policy.pt").write_bytes(b"")
    runs = certificate_check.shield_runs(tmp_path)
    assert [run.relative_to(tmp_path.absolute()).parts[2:] for run in runs] == [
        ("shield", "run0"),
        ("shield_dec", "run1"),
    ]
