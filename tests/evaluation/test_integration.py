"""End to end on the real pieces: train tiny runs, evaluate, render, export, aggregate, plot."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from src.algos.train import train_run
from src.analysis.aggregate import aggregate, load_table
from src.analysis.export import export_run
from src.analysis.figures import FIGURE_NAMES, make_figures
from src.analysis.tables import make_summary
from src.evaluation.evaluate import evaluate_run
from src.evaluation.render import POSTER_NAME, render_run
from src.schemas import EVAL_SCHEMA, HISTORY_SCHEMA, config_from_metadata, read_parquet
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

# 10: the constraint horizon (the tiny runs' episode cap), which the analysis requires; 12: past
# the training cap, lifted for the evaluation.
HORIZONS = (1, 5, 10, 12)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A tiny trained run of ippo and of shield on hazard_grid (two policy updates each)."""
    root = tmp_path_factory.mktemp("integration")
    run_dirs = []
    for algo in ("ippo", "shield"):
        # The shield's certificate on four calibration episodes, its critic fitted briefly.
        params = {"calibration_episodes": 4, "critic_steps": 2} if algo == "shield" else {}
        config = tiny_run_config(
            algo,
            algo_params=params,
            final_policy_eval_episodes=6,
            final_policy_eval_horizons=HORIZONS,
        )
        run_dir = root / "runs" / "hazard_grid" / algo / "run0"
        train_run(config, run_dir, progress=False)
        run_dirs.append(run_dir)
    return run_dirs


def test_evaluate_render_export_aggregate_and_plot(runs: list[Path], tmp_path: Path) -> None:
    for run_dir in runs:
        frame = evaluate_run(run_dir, run_dir / "eval.parquet")
        table = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA)
        assert config_from_metadata(table)["env_name"] == "hazard_grid"
        algo = config_from_metadata(table)["algo"]
        modes = [True, False] if algo == "shield" else [False]
        assert frame["shielded"].drop_duplicates().tolist() == modes
        assert frame["horizon"].tolist() == list(HORIZONS) * len(modes)
        assert (frame["n"] == 6).all()
        for _, group in frame.groupby("shielded"):
            assert group["violations"].is_monotonic_increasing
        assert (frame["ci_low"] <= frame["p_violation"]).all()
        assert (frame["p_violation"] <= frame["ci_high"]).all()

        paths = render_run(run_dir, run_dir / "videos", episodes=2)
        assert [p.name for p in paths[:-1]] == [
            f"hazard_grid-{algo}-run0-episode-{i}.mp4" for i in range(2)
        ]
        for video in paths[:-1]:
            assert video.read_bytes()[4:8] == b"ftyp"  # an MP4 container, not an empty file
        assert paths[-1].name == POSTER_NAME
        assert paths[-1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        export_run(run_dir, run_dir / "history.parquet", run_dir / "updates.parquet")
        history = read_parquet(run_dir / "history.parquet", HISTORY_SCHEMA).to_pandas()
        assert len(history) > 0 and (history["algo"] == algo).all()

    aggregate(runs, tmp_path / "tables")
    make_summary(tmp_path / "tables")
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert summary["policy"].tolist() == ["ippo", "shield", "shield (shield off)"]
    updates = load_table(tmp_path / "tables", "updates").to_pandas()
    assert set(updates["algo"]) == {"ippo", "shield"}
    figures = make_figures(tmp_path / "tables", tmp_path / "figures")
    # No algorithm of these runs learns a Lagrange multiplier: its figure is not drawn.
    assert {path.stem for path in figures} == set(FIGURE_NAMES) - {"lagrange_multiplier"}


def test_evaluation_is_deterministic(runs: list[Path], tmp_path: Path) -> None:
    run_dir = runs[0]
    first = evaluate_run(run_dir, tmp_path / "a.parquet")
    second = evaluate_run(run_dir, tmp_path / "b.parquet")
    pd.testing.assert_frame_equal(first, second)
