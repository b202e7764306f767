"""The experiment's figures (PNG and PDF), one panel per env, one colour per algorithm.

How intervals are drawn (the same in every figure, and said on it):
- probabilities (the final policies' P(violation within H), training violation rates) are
  pooled over the runs of a policy, k and n summed, with a Clopper-Pearson interval
  (`src.analysis.constraint`), which stays within [0, 1]; each run's own value is a small dot;
- unbounded quantities (returns, costs, the Lagrange multiplier, interventions) are the mean
  across runs with a Student-t interval, drawn only with two runs or more;
- the number of runs of each policy is in its legend label;
- every figure about violations draws each env's `max_risk` (from the run configs in the
  tables' metadata) as a dotted black line;
- the final policies' risk is read at each env's constraint horizon H (its runs'
  `constraint_horizon`, `src.analysis.constraint.constraint_horizons`), drawn as a dashed grey
  vertical line where H is an axis; evaluated horizons beyond it are beyond the constraint.

Figures:
- `learning_curves`: team return, episode cost and violation rate of training episodes against
  env steps, in bins that hold episodes of every run (`adaptive_edges`), so curves have no gaps.
- `violation_vs_horizon`: the final policy's P(violation within H steps) against H, the
  constraint horizon marked.
- `return_vs_risk`: final return against P(violation) at the constraint horizon, with the
  between-run interval on which the verdict is taken (`src.analysis.constraint`) and the pooled
  Clopper-Pearson interval.
- `shield_interventions`: the shield's interventions per policy update over training.
- `lagrange_multiplier`: the Lagrange multiplier lambda over training.
Which algorithms appear in the last two is read from the data (the column is non-null), never
from algorithm names. A figure with nothing to draw is not drawn: `figure_plan` says, from the
tables, which figures have data and why the others have none (no run logs a Lagrange
multiplier, no final-policy evaluation, ...); `make_figures` draws exactly the former, and the
results page expects exactly those and names the others with their reason. The figures folder
is the workflow's output, whatever it holds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from scipy import stats

from src.algos.metrics import LAMBDA, SHIELD_INTERVENTIONS
from src.analysis.aggregate import load_table
from src.analysis.constraint import (
    between_runs,
    constraint_horizons,
    judged_horizon,
    max_risk_by_env,
    pooled_rate,
    pooled_violations,
    run_configs,
)
from src.analysis.style import (
    FIGURE_FORMATS,
    algo_color,
    figure_title,
    new_figure,
    policy_label,
    policy_linestyle,
    save_figure,
)
from src.containment import remove_tree
from src.core.io import create_dir
from src.core.logging import log
from src.plotting import plt

__all__ = [
    "FIGURE_NAMES",
    "adaptive_edges",
    "binned_run_means",
    "figure_plan",
    "lagrange_multiplier",
    "learning_curves",
    "make_figures",
    "plan_of_tables",
    "return_vs_risk",
    "shield_interventions",
    "violation_vs_horizon",
]

FIGURE_NAMES = (
    "learning_curves",
    "violation_vs_horizon",
    "return_vs_risk",
    "shield_interventions",
    "lagrange_multiplier",
)
NO_EVALUATION = "no final-policy evaluation (final_policy_eval_episodes is 0)"
NO_EPISODES = "no training episodes"
NO_INTERVENTIONS = (
    f"no run logs shield interventions ({SHIELD_INTERVENTIONS}): no algorithm of the experiment "
    "has a shield"
)
NO_MULTIPLIER = (
    f"no run logs a Lagrange multiplier ({LAMBDA}): no algorithm of the experiment learns one"
)
MAX_BINS = 40
MAX_UPDATE_BINS = 100
EPISODES_PER_BIN = 5
BAND_ALPHA = 0.2
RUN_ALPHA = 0.35
TRAINING_CONFIDENCE = 0.95
MAX_RISK_STYLE: dict[str, object] = {"color": "black", "linestyle": ":", "linewidth": 1.3}
HORIZON_STYLE: dict[str, object] = {"color": "grey", "linestyle": "--", "linewidth": 1.0}
HORIZON_LABEL = "constraint horizon"
POOLED_LABEL = "_pooled interval"  # a leading underscore keeps it out of the legend

# Max-risk values per env, as `src.analysis.constraint.max_risk_by_env` returns them.
MaxRisk = Mapping[str, tuple[float, ...]]


def _env_steps_axis(ax: Axes) -> None:
    """Label the x axis as env steps, with ticks in engineering notation (20k, 120k)."""
    ax.set_xlabel("env steps")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))


def _t_band(
    matrix: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise mean and Student-t interval over rows (runs), ignoring NaN; NaN band for < 2."""
    count = np.sum(~np.isnan(matrix), axis=0)
    with warnings.catch_warnings():
        # A column with a single value has no spread: its band is NaN and is not drawn.
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = np.nanmean(matrix, axis=0)
        sd = np.nanstd(matrix, axis=0, ddof=1)
    quantile = stats.t.ppf(0.5 + confidence / 2.0, np.maximum(count - 1, 1))
    half = np.where(count >= 2, quantile * sd / np.sqrt(np.maximum(count, 1)), np.nan)
    return mean, mean - half, mean + half


def _bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value in bins `[e_i, e_{i+1})`, the last one closed; outside values clipped."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)


def binned_run_means(frame: pd.DataFrame, *, x: str, y: str, edges: np.ndarray) -> np.ndarray:
    """[runs, bins] mean of `y` per run and bin of `x` (bins `[e_i, e_{i+1})`, last one closed).

    Runs are the distinct `run` values of `frame` in ascending order; empty bins are NaN.
    """
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError("edges must be an increasing 1-d array of at least two values")
    n_bins = edges.size - 1
    runs = sorted(frame["run"].unique())
    out = np.full((len(runs), n_bins), np.nan)
    for r, run in enumerate(runs):
        rows = frame[frame["run"] == run]
        values = rows[y].to_numpy(dtype=np.float64)
        keep = ~np.isnan(values)
        index = _bin_index(rows[x].to_numpy(), edges)
        sums = np.bincount(index[keep], weights=values[keep], minlength=n_bins)
        counts = np.bincount(index[keep], minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return out


def adaptive_edges(frame: pd.DataFrame, *, x: str, bins: int) -> np.ndarray:
    """Bin edges over `frame[x]` such that every bin holds at least one row of every run.

    Starts from `bins` equal bins spanning the observed values and merges each bin into the
    next until the merged bin holds a row of every run of `frame`; what is left at the end
    joins the last bin. Curves drawn on these bins therefore have no gap. Edges are a subset
    of the equal grid's, so the bins keep the convention of `binned_run_means`.

    >>> frame = pd.DataFrame({"run": [0, 0, 1, 1], "t": [0, 10, 4, 10]})
    >>> adaptive_edges(frame, x="t", bins=5).tolist()
    [0.0, 6.0, 10.0]
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    if frame.empty:
        raise ValueError("no rows to bin")
    values = frame[x].to_numpy(dtype=np.float64)
    low, high = float(np.min(values)), float(np.max(values))
    grid = np.linspace(low, max(high, low + 1.0), bins + 1)
    runs = sorted(frame["run"].unique())
    index = _bin_index(values, grid)
    run_of = np.searchsorted(runs, frame["run"].to_numpy())
    counts = np.zeros((len(runs), bins), dtype=np.int64)  # [runs, bins]
    np.add.at(counts, (run_of, index), 1)
    edges = [grid[0]]
    held = np.zeros(len(runs), dtype=np.int64)
    for b in range(bins):
        held += counts[:, b]
        if np.all(held > 0):
            edges.append(grid[b + 1])
            held[:] = 0
    if held.any() or len(edges) == 1:
        # Rows after the last complete bin: extend that bin to the end.
        if len(edges) > 1:
            edges[-1] = grid[-1]
        else:
            edges.append(grid[-1])
    return np.asarray(edges, dtype=np.float64)


def _bin_positions(frame: pd.DataFrame, *, x: str, edges: np.ndarray) -> np.ndarray:
    """Where to draw each bin: the mean `x` of its rows over all runs (NaN for an empty bin)."""
    # Bin centres would shift curves whose points sit at a bin edge (e.g. update steps).
    index = _bin_index(frame[x].to_numpy(), edges)
    n_bins = edges.size - 1
    sums = np.bincount(index, weights=frame[x].to_numpy(dtype=np.float64), minlength=n_bins)
    counts = np.bincount(index, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _logged(updates: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of `updates` whose `column` is logged (non-null)."""
    if updates.empty or column not in updates:
        return updates.iloc[0:0]
    return updates[updates[column].notna()]


def figure_plan(
    history: pd.DataFrame, evaluation: pd.DataFrame, updates: pd.DataFrame
) -> dict[str, str | None]:
    """Every name of `FIGURE_NAMES` -> None if the tables hold something for it to draw, else
    why not (a clause for the results page and the figures job's log).

    >>> empty = pd.DataFrame()
    >>> figure_plan(empty, empty, empty)["lagrange_multiplier"] == NO_MULTIPLIER
    True
    """
    return {
        "learning_curves": NO_EPISODES if history.empty else None,
        "violation_vs_horizon": NO_EVALUATION if evaluation.empty else None,
        "return_vs_risk": NO_EVALUATION if evaluation.empty else None,
        "shield_interventions": (
            NO_INTERVENTIONS if _logged(updates, SHIELD_INTERVENTIONS).empty else None
        ),
        "lagrange_multiplier": NO_MULTIPLIER if _logged(updates, LAMBDA).empty else None,
    }


def plan_of_tables(
    tables_dir: str | Path, *, root: str | Path | None = None, limit: int | None = None
) -> dict[str, str | None]:
    """`figure_plan` of the aggregated tables in `tables_dir` (`root`, `limit`: see
    `src.analysis.aggregate.load_table`)."""
    return figure_plan(
        *(
            load_table(tables_dir, name, root=root, limit=limit).to_pandas()
            for name in ("history", "eval", "updates")
        )
    )


def _legend(fig: Figure, axes: list[Axes]) -> None:
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=_legend_columns(list(handles), fig.get_figwidth()),
        )


def _legend_columns(labels: list[str], width: float, most: int = 4) -> int:
    """The most columns (up to `most`) whose legend fits `width` inches.

    Matplotlib fills the columns top to bottom; a column is as wide as its longest label,
    about 0.08 inch per character at the legend's font size, plus the line sample.
    """
    for ncols in range(min(len(labels), most), 1, -1):
        rows = math.ceil(len(labels) / ncols)
        columns = [labels[i : i + rows] for i in range(0, len(labels), rows)]
        if sum(0.08 * max(map(len, column)) + 0.7 for column in columns) <= width:
            return ncols
    return 1


def _runs_label(label: str, runs: int) -> str:
    """A legend label with the number of runs behind the curve."""
    return f"{label} ({runs} run{'' if runs == 1 else 's'})"


def _policies(frame: pd.DataFrame) -> list[tuple[str, bool]]:
    pairs = frame[["algo", "shielded"]].drop_duplicates().itertuples(index=False)
    # Deployed policies first, then shield-off variants; algorithms alphabetical.
    return sorted(((str(a), bool(s)) for a, s in pairs), key=lambda p: (p[0], not p[1]))


def _max_risk_lines(ax: Axes, values: tuple[float, ...], *, vertical: bool = False) -> None:
    """Draw each `max_risk` value of an env as a dotted black line, labelled with its value."""
    for value in values:
        line = ax.axvline if vertical else ax.axhline
        line(value, label=f"max_risk = {value:g}", **MAX_RISK_STYLE)


def _run_points(ax: Axes, x: np.ndarray, matrix: np.ndarray, *, color: str) -> None:
    """Each run's values as small dots at the positions `x` (rows of `matrix` are runs)."""
    for row in matrix:
        keep = ~np.isnan(row)
        ax.scatter(x[keep], row[keep], s=5, color=color, alpha=RUN_ALPHA, linewidths=0)


def _band(ax: Axes, x: np.ndarray, low: np.ndarray, high: np.ndarray, *, color: str) -> None:
    """An interval band around a curve; a lone point gets an error bar (a band needs two)."""
    x, low, high = (np.asarray(v, dtype=np.float64) for v in (x, low, high))
    if x.size == 1 and not np.isnan(low[0]):
        ax.vlines(x, low, high, color=color, alpha=2 * BAND_ALPHA, linewidth=4)
    else:
        ax.fill_between(x, low, high, color=color, alpha=BAND_ALPHA, linewidth=0)


def _mean_curve(
    ax: Axes,
    x: np.ndarray,
    matrix: np.ndarray,
    *,
    algo: str,
    label: str,
    limits: tuple[float, float] = (-np.inf, np.inf),
    run_lines: bool = False,
) -> None:
    """Mean across runs (rows of `matrix`) with its t-interval band, and each run's values."""
    mean, low, high = _t_band(matrix)
    low, high = np.clip(low, *limits), np.clip(high, *limits)
    color = algo_color(algo)
    if run_lines and matrix.shape[0] > 1:
        for row in matrix:
            ax.plot(x, row, color=color, alpha=RUN_ALPHA, linewidth=0.7)
    elif matrix.shape[0] > 1:
        _run_points(ax, x, matrix, color=color)
    ax.plot(
        x,
        mean,
        color=color,
        label=label,
        # With few bins a lone point would be invisible as a line.
        marker="o" if len(x) < 10 else None,
        markersize=3,
    )
    _band(ax, x, low, high, color=color)


def _pooled_rate_curve(
    ax: Axes, x: np.ndarray, k: np.ndarray, n: np.ndarray, *, algo: str, label: str
) -> None:
    """Pooled rate k / n per bin with its Clopper-Pearson band."""
    estimate, low, high = pooled_rate(k, n, confidence=TRAINING_CONFIDENCE)
    color = algo_color(algo)
    ax.plot(x, estimate, color=color, label=label, marker="o" if len(x) < 10 else None, ms=3)
    _band(ax, x, low, high, color=color)


# (column, axis label, range of the quantity: bands are clipped to it)
LEARNING_METRICS: tuple[tuple[str, str, tuple[float, float]], ...] = (
    ("team_return", "team return per episode", (-np.inf, np.inf)),
    ("cost", "episode cost (sum over agents)", (0.0, np.inf)),
)


def learning_curves(history: pd.DataFrame, *, max_risk: MaxRisk) -> Figure:
    """Return, episode cost and violation rate against env steps: rows are metrics, columns envs.

    `max_risk` maps each env to its `max_risk` values (drawn on the violation-rate row).
    """
    if history.empty:
        raise ValueError(f"nothing to plot: {NO_EPISODES}")
    envs = sorted(history["env"].unique())
    rows = len(LEARNING_METRICS) + 1
    fig, axes = new_figure(len(envs), rows=rows)
    frame = history.assign(violated=history["violated"].astype(np.float64))
    for column, env in enumerate(envs):
        env_rows = frame[frame["env"] == env]
        for algo in sorted(env_rows["algo"].unique()):
            runs = env_rows[env_rows["algo"] == algo]
            n_runs = int(runs["run"].nunique())
            label = _runs_label(algo, n_runs)
            # About EPISODES_PER_BIN episodes per run in a bin before merging.
            per_run = int(runs.groupby("run").size().min())
            edges = adaptive_edges(
                runs, x="t_end", bins=int(np.clip(per_run // EPISODES_PER_BIN, 1, MAX_BINS))
            )
            x = _bin_positions(runs, x="t_end", edges=edges)
            for row, (metric, _, limits) in enumerate(LEARNING_METRICS):
                matrix = binned_run_means(runs, x="t_end", y=metric, edges=edges)
                ax = axes[row * len(envs) + column]
                _mean_curve(ax, x, matrix, algo=algo, label=label, limits=limits)
            ax = axes[(rows - 1) * len(envs) + column]
            index = _bin_index(runs["t_end"].to_numpy(), edges)
            k = np.bincount(index, weights=runs["violated"].to_numpy(), minlength=x.size)
            n = np.bincount(index, minlength=x.size)
            if n_runs > 1:
                matrix = binned_run_means(runs, x="t_end", y="violated", edges=edges)
                _run_points(ax, x, matrix, color=algo_color(algo))
            _pooled_rate_curve(ax, x, k, n, algo=algo, label=label)
        _max_risk_lines(axes[(rows - 1) * len(envs) + column], max_risk.get(env, ()))
        labels = [label for _, label, _ in LEARNING_METRICS]
        labels.append("violation rate (fraction of episodes)")
        for row, ylabel in enumerate(labels):
            ax = axes[row * len(envs) + column]
            ax.set_ylabel(ylabel)
            _env_steps_axis(ax)
            if row == 0:
                ax.set_title(env)
        axes[(rows - 1) * len(envs) + column].set_ylim(-0.02, 1.02)
    figure_title(
        fig,
        "Training episodes in bins of env steps that hold episodes of every run. Return and "
        "cost: mean across runs, band = 95% t-interval (none for one run). Violation rate: "
        "pooled over runs, band = 95% Clopper-Pearson. Dots: single runs; dotted: max_risk.",
    )
    _legend(fig, axes)
    return fig


def _confidence(evaluation: pd.DataFrame) -> float:
    """The evaluation's interval confidence (the smallest, if runs disagree)."""
    return float(evaluation["confidence"].min())


def violation_vs_horizon(
    evaluation: pd.DataFrame, *, max_risk: MaxRisk, horizons: Mapping[str, int]
) -> Figure:
    """P(violation within H steps) of the final policies against H, one panel per env.

    Pooled over runs with a Clopper-Pearson band; each run's value is a dot; `max_risk` maps
    each env to its `max_risk` values (dotted lines), `horizons` to its constraint horizon
    (a dashed grey vertical line: to its right, beyond the constraint).
    """
    if evaluation.empty:
        raise ValueError(f"nothing to plot: {NO_EVALUATION}")
    envs = sorted(evaluation["env"].unique())
    fig, axes = new_figure(len(envs))
    pooled = pooled_violations(evaluation, by=["env", "algo", "shielded", "horizon"])
    for ax, env in zip(axes, envs, strict=True):
        env_rows = evaluation[evaluation["env"] == env]
        for algo, shielded in _policies(env_rows):
            group = env_rows[(env_rows["algo"] == algo) & (env_rows["shielded"] == shielded)]
            policy = pooled[
                (pooled["env"] == env) & (pooled["algo"] == algo) & (pooled["shielded"] == shielded)
            ].sort_values("horizon")
            color = algo_color(algo)
            steps = policy["horizon"].to_numpy(dtype=np.float64)
            runs = int(policy["runs"].max())
            if runs > 1:
                ax.scatter(
                    group["horizon"],
                    group["p_violation"],
                    s=9,
                    color=color,
                    alpha=RUN_ALPHA + 0.15,
                    linewidths=0,
                )
            ax.plot(
                steps,
                policy["p_violation"],
                marker="o",
                markersize=3,
                color=color,
                linestyle=policy_linestyle(algo, shielded),
                label=_runs_label(policy_label(algo, shielded), runs),
            )
            _band(ax, steps, policy["ci_low"], policy["ci_high"], color=color)
        _max_risk_lines(ax, max_risk.get(env, ()))
        ax.axvline(
            judged_horizon(horizons, env, env_rows["horizon"]),
            label=HORIZON_LABEL,
            **HORIZON_STYLE,
        )
        span = sorted(int(h) for h in env_rows["horizon"].unique())
        if len(span) > 1 and span[0] > 0 and span[-1] / span[0] >= 10:
            ax.set_xscale("log")
        ax.set_xlabel("horizon H (env steps)")
        ax.set_ylabel("P(violation within H steps)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(env)
    figure_title(
        fig,
        "Final policies: P(violation within H) pooled over runs (violations and episodes "
        f"summed), band = {_confidence(evaluation):.0%} Clopper-Pearson interval; dots: "
        "single runs; dotted: max_risk; dashed grey: the constraint horizon (right of it: "
        "beyond the constraint).",
    )
    _legend(fig, axes)
    return fig


def _mean_half_width(values: np.ndarray) -> tuple[float, float]:
    """Mean of the runs and the half-width of its 95% t-interval (0 for a single run)."""
    mean, low, _ = _t_band(values[:, None])
    half = float(mean[0] - low[0])
    return float(mean[0]), 0.0 if np.isnan(half) else half


def return_vs_risk(
    evaluation: pd.DataFrame, *, max_risk: MaxRisk, horizons: Mapping[str, int]
) -> Figure:
    """Final return against P(violation) at each env's constraint horizon (`horizons`), per
    policy and per run.

    Large markers: x the mean of the runs' violation rates with its between-run interval (thin
    bar with caps: the interval the verdict is taken on) and, thick and faint, the pooled
    Clopper-Pearson interval; y the mean return across runs with its t-interval; small
    markers: single runs.
    """
    if evaluation.empty:
        raise ValueError(f"nothing to plot: {NO_EVALUATION}")
    envs = sorted(evaluation["env"].unique())
    # Taller panels than the default: the axis label and the three-line title need the room.
    fig, axes = new_figure(len(envs), panel_size=(4.2, 4.0))
    horizons_used: set[int] = set()
    for ax, env in zip(axes, envs, strict=True):
        env_rows = evaluation[evaluation["env"] == env]
        horizon = judged_horizon(horizons, env, env_rows["horizon"])
        horizons_used.add(horizon)
        at_h = env_rows[env_rows["horizon"] == horizon]
        pooled = pooled_violations(at_h, by=["algo", "shielded"])
        between = between_runs(at_h, by=["algo", "shielded"])
        for algo, shielded in _policies(at_h):
            group = at_h[(at_h["algo"] == algo) & (at_h["shielded"] == shielded)]
            row = pooled[(pooled["algo"] == algo) & (pooled["shielded"] == shielded)].iloc[0]
            runs = between[(between["algo"] == algo) & (between["shielded"] == shielded)].iloc[0]
            color = algo_color(algo)
            marker = "s" if policy_linestyle(algo, shielded) == "--" else "o"
            returns = group["mean_return"].to_numpy(dtype=np.float64)
            if len(group) > 1:
                ax.scatter(
                    group["p_violation"],
                    returns,
                    color=color,
                    alpha=0.5,
                    s=22,
                    marker=marker,
                    linewidths=0,
                )
            mean_return, half = _mean_half_width(returns)
            ax.hlines(
                mean_return,
                float(row["ci_low"]),
                float(row["ci_high"]),
                color=color,
                alpha=2 * BAND_ALPHA,
                linewidth=6,
                label=POOLED_LABEL,
            )
            p, low, high = (float(runs[c]) for c in ("runs_mean", "runs_low", "runs_high"))
            ax.errorbar(
                p,
                mean_return,
                xerr=[[p - low], [high - p]],
                yerr=half,
                color=color,
                marker=marker,
                markersize=7,
                capsize=3,
                linestyle="none",
                label=_runs_label(policy_label(algo, shielded), int(row["runs"])),
            )
        _max_risk_lines(ax, max_risk.get(env, ()), vertical=True)
        # Probabilities from 0, so that the distance to max_risk reads at a glance.
        ax.set_xlim(-0.02, min(max(ax.get_xlim()[1], 0.1), 1.02))
        ax.set_xlabel(f"P(violation within {horizon} steps)")
        ax.set_ylabel(f"team return over {horizon} steps")
        ax.set_title(env)
    confidence = _confidence(evaluation)
    figure_title(
        fig,
        "Return against risk at the constraint horizon H = "
        + ", ".join(str(h) for h in sorted(horizons_used))
        + ": large markers: mean of the runs' P(violation) with its "
        f"{confidence:.0%} between-run interval (thin bar; met when left of max_risk), the "
        "pooled Clopper-Pearson interval thick and faint; mean return across runs with its "
        "95% t-interval (none for one run); small markers: single runs; dotted: max_risk.",
    )
    _legend(fig, axes)
    return fig


def _over_training(
    updates: pd.DataFrame, column: str, *, ylabel: str, title: str, note: str
) -> Figure:
    """Mean across runs of an update metric against env steps, for the algorithms that log it;
    a `ValueError` saying `note` when none does."""
    logged = _logged(updates, column)
    if logged.empty:
        raise ValueError(f"nothing to plot: {note}")
    envs = sorted(logged["env"].unique())
    fig, axes = new_figure(len(envs), panel_size=(4.2, 3.8))
    for ax, env in zip(axes, envs, strict=True):
        env_rows = logged[logged["env"] == env]
        for algo in sorted(env_rows["algo"].unique()):
            rows = env_rows[env_rows["algo"] == algo]
            # Runs of one config share their update steps: one bin per update, merged only
            # where runs differ, at most MAX_UPDATE_BINS.
            per_run = int(rows.groupby("run").size().min())
            edges = adaptive_edges(rows, x="global_step", bins=min(per_run, MAX_UPDATE_BINS))
            matrix = binned_run_means(rows, x="global_step", y=column, edges=edges)
            x = _bin_positions(rows, x="global_step", edges=edges)
            label = _runs_label(algo, int(rows["run"].nunique()))
            _mean_curve(ax, x, matrix, algo=algo, label=label, limits=(0.0, np.inf), run_lines=True)
        _env_steps_axis(ax)
        ax.set_ylabel(ylabel)
        ax.set_title(env)
    figure_title(fig, title)
    _legend(fig, axes)
    return fig


def shield_interventions(updates: pd.DataFrame) -> Figure:
    """Shield interventions per policy update against env steps, for the runs that log them."""
    return _over_training(
        updates,
        SHIELD_INTERVENTIONS,
        ylabel="interventions per update",
        title="Shield interventions (agent-steps whose proposed action the shield changed) per "
        "policy update: mean across runs, band = 95% t-interval (none for one run); thin "
        "lines: single runs.",
        note=NO_INTERVENTIONS,
    )


def lagrange_multiplier(updates: pd.DataFrame) -> Figure:
    """The Lagrange multiplier lambda against env steps, for the runs that log it."""
    return _over_training(
        updates,
        LAMBDA,
        ylabel="Lagrange multiplier λ",
        title="Lagrange multiplier λ at each policy update (it grows while the measured "
        "episode risk exceeds max_risk): mean across runs, band = 95% t-interval (none for "
        "one run); thin lines: single runs.",
        note=NO_MULTIPLIER,
    )


def make_figures(tables_dir: str | Path, figures_dir: str | Path) -> list[Path]:
    """Draw the figures of `FIGURE_NAMES` that the aggregated tables have data for
    (`figure_plan`) into `figures_dir`; returns the paths written.

    A figure without data is not drawn (the job's log says why) and an earlier file of it in
    `figures_dir` is deleted, so the folder holds exactly the figures of these tables.
    `max_risk` and the constraint horizons come from the run configs stored in the tables'
    metadata.
    """
    history_table = load_table(tables_dir, "history")
    history = history_table.to_pandas()
    evaluation = load_table(tables_dir, "eval").to_pandas()
    updates = load_table(tables_dir, "updates").to_pandas()
    configs = run_configs(history_table)
    max_risk = max_risk_by_env(configs)
    horizons = constraint_horizons(configs) if len(evaluation) else {}
    builders: dict[str, Callable[[], Figure]] = {
        "learning_curves": lambda: learning_curves(history, max_risk=max_risk),
        "violation_vs_horizon": lambda: violation_vs_horizon(
            evaluation, max_risk=max_risk, horizons=horizons
        ),
        "return_vs_risk": lambda: return_vs_risk(evaluation, max_risk=max_risk, horizons=horizons),
        "shield_interventions": lambda: shield_interventions(updates),
        "lagrange_multiplier": lambda: lagrange_multiplier(updates),
    }
    plan = figure_plan(history, evaluation, updates)
    folder = Path(create_dir(str(figures_dir)))
    paths: list[Path] = []
    for name in FIGURE_NAMES:
        if plan[name] is None:
            paths += save_figure(builders[name](), folder, name)
            continue
        log(f"{name} not drawn: {plan[name]}", type="figures")
        for fmt in FIGURE_FORMATS:
            remove_tree(folder, f"{name}.{fmt}")
    plt.close("all")
    return paths
