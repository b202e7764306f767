"""Every figure function writes its files from a small synthetic result set."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from src.analysis.aggregate import aggregate, load_table
from src.analysis.constraint import max_risk_by_env, run_configs
from src.analysis.figures import (
    FIGURE_NAMES,
    NO_EVALUATION,
    NO_INTERVENTIONS,
    NO_MULTIPLIER,
    adaptive_edges,
    binned_run_means,
    lagrange_multiplier,
    learning_curves,
    make_figures,
    plan_of_tables,
    return_vs_risk,
    shield_interventions,
    violation_vs_horizon,
)
from src.analysis.style import save_figure
from src.stats import clopper_pearson_interval
from tests.analysis.synthetic import make_config, write_experiment


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


def legend_labels(fig: Figure) -> set[str]:
    return {t.get_text() for legend in fig.legends for t in legend.get_texts()}


def text_of(fig: Figure) -> str:
    parts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        parts += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]
        parts += [t.get_text() for t in ax.texts]
    return " ".join(parts)


RISK = {"hazard_grid": (0.1,), "spread": (0.1,)}
HORIZON = {"hazard_grid": 100, "spread": 100}


@pytest.mark.parametrize(
    ("name", "build", "table", "label", "policies"),
    [
        ("learning_curves", partial(learning_curves, max_risk=RISK), "history", "env steps", 3),
        (
            "violation_vs_horizon",
            partial(violation_vs_horizon, max_risk=RISK, horizons=HORIZON),
            "eval",
            "horizon H (env steps)",
            4,
        ),
        (
            "return_vs_risk",
            partial(return_vs_risk, max_risk=RISK, horizons=HORIZON),
            "eval",
            "P(violation within 100 steps)",
            4,
        ),
        ("shield_interventions", shield_interventions, "updates", "interventions per update", 1),
        ("lagrange_multiplier", lagrange_multiplier, "updates", "Lagrange multiplier λ", 1),
    ],
)
def test_each_figure_function_writes_a_labelled_file(
    tables: Path, tmp_path: Path, name: str, build, table: str, label: str, policies: int
) -> None:
    fig = build(load_table(tables, table).to_pandas())
    assert label in text_of(fig)
    assert len(fig.axes) >= 2  # one panel per env
    labels = legend_labels(fig)
    # Every policy's label says how many runs it pools.
    assert len([t for t in labels if t.endswith("(2 runs)")]) == policies, labels
    paths = save_figure(fig, tmp_path, name)
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_figure_with_nothing_to_draw_is_not_drawn(tmp_path: Path) -> None:
    # ippo alone, not evaluated: no multiplier, no interventions, no final-policy evaluation.
    run_dirs = write_experiment(
        tmp_path, envs=("hazard_grid",), algos=("ippo",), runs=1, eval_episodes=0
    )
    aggregate(run_dirs, tmp_path / "tables")
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "lagrange_multiplier.png").write_bytes(b"a figure of earlier tables")
    paths = make_figures(tmp_path / "tables", figures)
    assert sorted(p.name for p in paths) == ["learning_curves.pdf", "learning_curves.png"]
    assert sorted(p.name for p in figures.iterdir()) == sorted(p.name for p in paths)
    plan = plan_of_tables(tmp_path / "tables")
    assert plan == {
        "learning_curves": None,
        "violation_vs_horizon": NO_EVALUATION,
        "return_vs_risk": NO_EVALUATION,
        "shield_interventions": NO_INTERVENTIONS,
        "lagrange_multiplier": NO_MULTIPLIER,
    }
    assert "no run logs a Lagrange multiplier (safety/lambda)" in NO_MULTIPLIER
    # Asked directly, a figure function refuses to draw an empty figure, saying why.
    evaluation = load_table(tmp_path / "tables", "eval").to_pandas()
    updates = load_table(tmp_path / "tables", "updates").to_pandas()
    with pytest.raises(ValueError, match="final_policy_eval_episodes is 0"):
        violation_vs_horizon(evaluation, max_risk={}, horizons={})
    with pytest.raises(ValueError, match="final_policy_eval_episodes is 0"):
        return_vs_risk(evaluation, max_risk={}, horizons={})
    with pytest.raises(ValueError, match="no run logs shield interventions"):
        shield_interventions(updates)
    with pytest.raises(ValueError, match="no run logs a Lagrange multiplier"):
        lagrange_multiplier(updates)


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


def test_adaptive_edges_give_every_bin_a_row_of_every_run() -> None:
    # Run 0 finishes an episode every 10 steps, run 1 only every 200: equal bins of 100 steps
    # would leave run 1 absent from half of them.
    frame = pd.DataFrame(
        {
            "run": [0] * 100 + [1] * 5,
            "t": list(range(10, 1010, 10)) + list(range(200, 1200, 200)),
        }
    )
    edges = adaptive_edges(frame, x="t", bins=10)
    assert edges[0] == 10 and edges[-1] == 1000
    counts = binned_run_means(frame.assign(one=1.0), x="t", y="one", edges=edges)
    assert not np.isnan(counts).any()
    assert edges.size - 1 == 5  # one bin per episode of the sparse run
    # A single run keeps the equal grid wherever it has rows.
    dense = adaptive_edges(frame[frame["run"] == 0], x="t", bins=10)
    np.testing.assert_allclose(dense, np.linspace(10, 1000, 11))
    with pytest.raises(ValueError, match="bins"):
        adaptive_edges(frame, x="t", bins=0)


def history_frame(episodes_per_run: dict[int, int], *, steps: int = 1000) -> pd.DataFrame:
    """Episodes spread evenly over `steps` env steps but none ending in the middle fifth (as
    after a long episode); every other episode violates."""
    rows = []
    for run, count in episodes_per_run.items():
        ends = np.linspace(0, steps, count + 2)[1:-1]
        ends = np.where((ends > 0.4 * steps) & (ends < 0.6 * steps), 0.6 * steps, ends)
        for i, end in enumerate(ends.astype(int)):
            rows.append(
                {
                    "env": "e",
                    "algo": "ippo_lag",
                    "run": run,
                    "t_end": end,
                    "team_return": float(i),
                    "cost": float(i % 2),
                    "violated": bool(i % 2),
                }
            )
    return pd.DataFrame(rows)


def lines_labelled(ax, prefix: str) -> list:
    return [line for line in ax.get_lines() if line.get_label().startswith(prefix)]


def test_learning_curves_have_no_gaps_and_pool_the_violation_rate() -> None:
    # No episode ends in the middle fifth of training, and run 1 has a tenth of run 0's
    # episodes: equal bins would leave holes in the curves and bins without run 1.
    history = history_frame({0: 200, 1: 50})
    fig = learning_curves(history, max_risk={"e": (0.25,)})
    return_ax, cost_ax, violation_ax = fig.axes
    for ax in (return_ax, cost_ax, violation_ax):
        (curve,) = lines_labelled(ax, "ippo_lag (2 runs)")
        assert not np.isnan(np.asarray(curve.get_ydata(), dtype=float)).any()
    # The violation rate is pooled: violating episodes over episodes of both runs, per bin.
    edges = adaptive_edges(history, x="t_end", bins=50 // 5)
    equal = np.linspace(history["t_end"].min(), history["t_end"].max(), 50 // 5 + 1)
    assert np.isnan(binned_run_means(history, x="t_end", y="cost", edges=equal)).all(axis=0).any()
    index = np.clip(np.searchsorted(edges, history["t_end"], side="right") - 1, 0, edges.size - 2)
    pooled = history.groupby(index)["violated"].mean().to_numpy()
    run_means = history.groupby([index, "run"])["violated"].mean().groupby(level=0).mean()
    assert not np.allclose(pooled, run_means)  # the test tells the two apart
    (curve,) = lines_labelled(violation_ax, "ippo_lag")
    assert list(curve.get_ydata()) == pytest.approx(pooled)
    band = violation_ax.collections[-1].get_paths()[0].vertices[:, 1]
    assert band.min() >= 0.0 and band.max() <= 1.0
    (limit,) = lines_labelled(violation_ax, "max_risk")
    assert list(limit.get_ydata()) == [0.25, 0.25]


def eval_frame(p_by_run: dict[int, float], *, n: int = 100, algo: str = "ippo") -> pd.DataFrame:
    rows = []
    for run, p in p_by_run.items():
        for horizon, scale in ((10, 0.5), (100, 1.0)):
            k = round(p * scale * n)
            rows.append(
                {
                    "env": "e",
                    "algo": algo,
                    "run": run,
                    "shielded": False,
                    "horizon": horizon,
                    "n": n,
                    "violations": k,
                    "p_violation": k / n,
                    "confidence": 0.95,
                    "mean_return": 10.0 + run,
                    "mean_cost": k / n,
                }
            )
    return pd.DataFrame(rows)


def test_violation_figures_pool_runs_with_clopper_pearson_and_draw_max_risk() -> None:
    # Two runs at 0.1 and 0.3: a t-interval across them would be 0.2 +- 1.27, reaching -1.07
    # and 1.47; pooled, 40 violations in 200 episodes.
    evaluation = eval_frame({0: 0.1, 1: 0.3})
    low, high = (float(b) for b in clopper_pearson_interval(k=40, n=200, confidence=0.95))

    fig = violation_vs_horizon(evaluation, max_risk={"e": (0.05, 0.2)}, horizons={"e": 100})
    ax = fig.axes[0]
    (marker,) = lines_labelled(ax, "constraint horizon")
    assert list(marker.get_xdata()) == [100, 100]
    (curve,) = lines_labelled(ax, "ippo (2 runs)")
    assert list(curve.get_ydata()) == pytest.approx([20 / 200, 40 / 200])
    band = ax.collections[-1].get_paths()[0].vertices[:, 1]
    assert band.min() >= 0.0 and band.max() <= 1.0
    assert high == pytest.approx(band.max())
    assert sorted(line.get_ydata()[0] for line in lines_labelled(ax, "max_risk")) == [0.05, 0.2]

    fig = return_vs_risk(evaluation, max_risk={"e": (0.05,)}, horizons={"e": 100})
    ax = fig.axes[0]
    (container,) = ax.containers
    # The bar the verdict reads: across runs, 0.2 +- 1.27 clipped to [0, 1].
    x_bar = container.lines[2][0].get_segments()[0]
    assert [x_bar[0][0], x_bar[1][0]] == pytest.approx([0.0, 1.0])
    # The pooled interval of these runs' policies, thick and faint behind it.
    (pooled,) = [c for c in ax.collections if c.get_label() == "_pooled interval"]
    segment = pooled.get_segments()[0]
    assert [segment[0][0], segment[1][0]] == pytest.approx([low, high])
    (limit,) = lines_labelled(ax, "max_risk")
    assert list(limit.get_xdata()) == [0.05, 0.05]
    assert "P(violation within 100 steps)" in ax.get_xlabel()


def updates_frame(algo: str, column: str, runs: int = 2) -> pd.DataFrame:
    rows = [
        {"env": "e", "algo": algo, "run": run, "global_step": 100 * (u + 1), column: float(u)}
        for run in range(runs)
        for u in range(5)
    ]
    return pd.DataFrame(rows)


def test_training_figures_take_their_algorithms_from_the_data() -> None:
    from src.algos.metrics import LAMBDA, SHIELD_INTERVENTIONS

    # An algorithm of any name that logs the multiplier is drawn; one whose column is null
    # (even a registered Lagrangian) is not.
    updates = pd.concat(
        [
            updates_frame("my_lagrangian", LAMBDA),
            updates_frame("ippo_lag", LAMBDA).assign(**{LAMBDA: np.nan}),
            updates_frame("my_shield", SHIELD_INTERVENTIONS),
        ],
        ignore_index=True,
    )
    assert legend_labels(lagrange_multiplier(updates)) == {"my_lagrangian (2 runs)"}
    assert legend_labels(shield_interventions(updates)) == {"my_shield (2 runs)"}
    (curve,) = lines_labelled(lagrange_multiplier(updates).axes[0], "my_lagrangian")
    assert list(curve.get_ydata()) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_make_figures_reads_max_risk_from_the_run_configs(tmp_path: Path) -> None:
    run_dirs = write_experiment(tmp_path, envs=("hazard_grid", "spread"), algos=("ippo",), runs=1)
    for run_dir in run_dirs:
        if "spread" in run_dir.parts:
            config = json.loads((run_dir / "config.json").read_text())
            (run_dir / "config.json").write_text(json.dumps({**config, "max_risk": 0.25}))
    aggregate(run_dirs, tmp_path / "tables")
    configs = run_configs(load_table(tmp_path / "tables", "eval"))
    max_risk = max_risk_by_env(configs)
    assert max_risk == {
        "hazard_grid": (make_config("hazard_grid", "ippo", 0)["max_risk"],),
        "spread": (0.25,),
    }
    paths = make_figures(tmp_path / "tables", tmp_path / "figures")
    # ippo alone: no multiplier and no shield to draw.
    assert {p.stem for p in paths} == {"learning_curves", "violation_vs_horizon", "return_vs_risk"}
