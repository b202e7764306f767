"""The paper-scale run benchmark: a quick run end to end, its table and its refusals."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import BENCHMARKS_MD
from benchmarks.paper_run import main, result_path, table_markdown


def test_quick_run_records_the_training_and_refuses_to_measure_a_trained_run(tmp_path):
    before = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else None
    assert main(["--algo", "ippo", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads(result_path(tmp_path, "intersection", "ippo", quick=True).read_text())
    assert result["algo"] == "ippo" and result["env"] == "intersection"
    assert result["updates"] == 2 and result["env_steps"] == 2 * 16 * 16
    assert result["cpu_seconds"] > 0 and not result["resumed"]
    assert result["certificate"] is None
    # The run folder now holds a trained policy: measuring again would time nothing.
    with pytest.raises(FileExistsError, match="holds a trained run already"):
        main(["--algo", "ippo", "--quick", "--out", str(tmp_path)])
    # --quick never touches BENCHMARKS.md.
    assert (BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else None) == before


def _result(algo: str, cpu: float, certificate: str | None = None) -> dict:
    return {
        "env": "intersection",
        "algo": algo,
        "config": "config/paper.yaml",
        "n_agents": 4,
        "cpu_seconds": cpu,
        "wall_seconds": cpu,
        "resumed": False,
        "certificate": certificate,
        "machine": {
            "date": "2026-01-01 00:00 UTC",
            "platform": "p",
            "cpus": 2,
            "python": "3.11",
            "torch": "2",
        },
        "updates": 976,
        "env_steps": 1_998_848,
        "episodes": 100,
        "last_return": 10.0,
        "last_violating": 0.1,
    }


def test_table_reports_each_algorithm_against_ippo_and_the_target():
    text = table_markdown([_result("ippo", 100.0), _result("shield", 250.0, "certified")])
    assert "| shield |" in text and "| 2.50 |" in text and "certified" in text
    assert "2.50x, met" in text
    assert "Not measured: ippo_lag." in text
    over = table_markdown([_result("ippo", 100.0), _result("shield", 400.0)])
    assert "4.00x, NOT met" in over


def test_write_without_measurements_and_measure_without_algo_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        main(["--write", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path)])
