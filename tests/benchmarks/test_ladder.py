"""benchmarks/ladder.py on a tiny trained shield run."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import ladder
from src.algos.train import train_run
from src.containment import ContainmentError
from src.seeds import TUNING
from tests.tiny_runs import tiny_run_config, train_tiny_shield

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with one tiny shield run and one ippo run."""
    root = tmp_path_factory.mktemp("results")
    train_tiny_shield(root)
    train_run(
        tiny_run_config("ippo"), root / "runs" / "hazard_grid" / "ippo" / "run0", progress=False
    )
    return root


def test_each_allowance_is_played_on_the_spent_tuning_seeds(results: Path) -> None:
    runs = ladder.shield_runs(results)
    assert [run.relative_to(results).as_posix() for run in runs] == ["runs/hazard_grid/shield/run0"]
    rows = ladder.deploy(runs[0], [0.001, 0.5], episodes=3)
    assert [row["allowance"] for row in rows] == [0.001, 0.5]
    for row in rows:
        assert row["episodes"] == 3 and 0 <= row["violations"] <= 3
        assert row["low"] <= row["violations"] / 3 <= row["high"]
    assert TUNING.contains(TUNING.first + ladder.LADDER_SHIFT + 2)
    text = ladder.render_markdown(
        {
            "command": "python -m benchmarks.ladder --results r",
            "machine": {"date": "d", "platform": "p", "cpus": 2},
            "minutes": 0.1,
            "results": "r",
            "episodes": 3,
            "first_seed": TUNING.first + ladder.LADDER_SHIFT,
            "rows": rows,
        }
    )
    assert "| hazard_grid | shield | 0 |" in text and "40,800,000" in text


def test_a_run_folder_that_links_outside_is_refused(results: Path, tmp_path: Path) -> None:
    folder = tmp_path / "results" / "runs" / "hazard_grid" / "shield"
    folder.mkdir(parents=True)
    (folder / "run0").symlink_to(results / "runs" / "hazard_grid" / "shield" / "run0")
    with pytest.raises(ContainmentError):
        ladder.shield_runs(tmp_path / "results")


def test_bad_arguments_are_named_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, named in (
        (
            ["--results", str(tmp_path), "--allowances", "0"],
            "expected an allowance in (0, 1], got 0",
        ),
        (["--results", str(tmp_path), "--episodes", "0"], "expected an integer >= 1, got 0"),
        (["--results", str(tmp_path)], f"{tmp_path}: no runs/ folder"),
    ):
        with pytest.raises(SystemExit):
            ladder.main(argv)
        assert named in capsys.readouterr().err
