"""Every figure function writes its files from a small synthetic result set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from src.analysis.aggregate import aggregate, load_table
from src.analysis.figures import (
    FIGURE_NAMES,
    binned_run_means,
    learning_curves,
    make_figures,
    return_vs_risk,
    shield_interventions,
    violation_vs_horizon,
)
from src.analysis.style import save_figure
from tests.analysis.synthetic import write_experiment


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("figures")
    run_dirs = write_experiment(root, envs=("hazard_grid", "spread"), runs=2, eval_episodes=30)
    aggregate(run_dirs, root / "tables")
    return root / "tables"


def test_make_figures_writes_png_and_pdf_of_every_figure(tables: Path, tmp_path: Path) -> None:
    paths = make_figures(tables, tmp_path / "figures")
    expected = {tmp_path / "figures" / f"{n}.{ext}" for n in FIGURE_NAMES for ext in ("png", "pdf")}
    assert set(paths) == expected
    for path in paths:
        assert path.stat().st_size > 1000
    assert (tmp_path / "figures" / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "figures" / "learning_curves.pdf").read_bytes()[:5] == b"%PDF-"


def text_of(fig: Figure) -> str:
    parts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        parts += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]
        parts += [t.get_text() for t in ax.texts]
    return " ".join(parts)


@pytest.mark.parametrize(
    ("name", "build", "table", "label"),
    [
        ("learning_curves", learning_curves, "history", "env steps"),
        ("violation_vs_horizon", violation_vs_horizon, "eval", "horizon H (env steps)"),
        ("return_vs_risk", return_vs_risk, "eval", "P(violation within 200 steps)"),
        ("shield_interventions", shield_interventions, "updates", "interventions per update"),
    ],
)
def test_each_figure_function_writes_a_labelled_file(
    tables: Path, tmp_path: Path, name: str, build, table: str, label: str
) -> None:
    fig = build(load_table(tables, table).to_pandas())
    assert label in text_of(fig)
    assert len(fig.axes) >= 2  # one panel per env
    legend_labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert {"ippo", "shield"} <= legend_labels or name == "shield_interventions"
    paths = save_figure(fig, tmp_path, name)
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_nothing_to_draw_gives_a_figure_with_a_note(tmp_path: Path) -> None:
    run_dirs = write_experiment(
        tmp_path, envs=("hazard_grid",), algos=("ippo",), runs=1, eval_episodes=0
    )
    aggregate(run_dirs, tmp_path / "tables")
    paths = make_figures(tmp_path / "tables", tmp_path / "figures")
    assert len(paths) == 2 * len(FIGURE_NAMES)
    evaluation = load_table(tmp_path / "tables", "eval").to_pandas()
    updates = load_table(tmp_path / "tables", "updates").to_pandas()
    assert "final_policy_eval_episodes is 0" in text_of(violation_vs_horizon(evaluation))
    assert "no shield runs" in text_of(shield_interventions(updates))


def test_binned_run_means_hand_checked() -> None:
    frame = pd.DataFrame(
        {"run": [0, 0, 0, 1, 1], "x": [0, 4, 10, 1, 9], "y": [1.0, 3.0, 5.0, 10.0, 20.0]}
    )
    matrix = binned_run_means(frame, x="x", y="y", edges=np.array([0.0, 5.0, 10.0]))
    # The last bin is closed on the right: x = 10 belongs to it.
    np.testing.assert_array_equal(matrix, [[2.0, 5.0], [10.0, 20.0]])
    gaps = binned_run_means(
        frame[frame["run"] == 0], x="x", y="y", edges=np.array([0.0, 2.0, 4.0, 10.0])
    )
    assert np.isnan(gaps[0, 1])
    with pytest.raises(ValueError, match="edges"):
        binned_run_means(frame, x="x", y="y", edges=np.array([1.0]))


def test_missing_tables_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"history\.parquet"):
        make_figures(tmp_path, tmp_path / "figures")
