"""The experiment's figures (PNG and PDF), one panel per env, one colour per algorithm.

- `learning_curves`: team return, episode cost and violation rate of training episodes against
  env steps; each run's episodes are averaged in bins of a grid shared by the env's runs, then
  the runs' bin means give the mean and a 95% t-interval band.
- `violation_vs_horizon`: the final policy's P(violation within H steps) against H.
- `return_vs_risk`: final return against violation probability at the largest horizon.
- `shield_interventions`: the shield's interventions per policy update over training.
A figure with nothing to draw (no evaluation episodes, no shield runs) is still written, with a
centred note saying why, so the workflow always gets the same eight files.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats

from src.algos.metrics import SHIELD_INTERVENTIONS
from src.analysis.aggregate import load_table
from src.analysis.style import (
    algo_color,
    figure_title,
    has_shield,
    new_figure,
    plt,
    policy_label,
    policy_linestyle,
    save_figure,
)

__all__ = [
    "FIGURE_NAMES",
    "binned_run_means",
    "learning_curves",
    "make_figures",
    "return_vs_risk",
    "shield_interventions",
    "violation_vs_horizon",
]

FIGURE_NAMES = ("learning_curves", "violation_vs_horizon", "return_vs_risk", "shield_interventions")
MAX_BINS = 40
BAND_ALPHA = 0.2


def _t_band(
    matrix: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise mean and Student-t interval over rows (runs), ignoring NaN; NaN band for < 2."""
    count = np.sum(~np.isnan(matrix), axis=0)
    with warnings.catch_warnings():
        # Empty bins (no episode of any run) are expected and become NaN gaps in the curve.
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = np.nanmean(matrix, axis=0)
        sd = np.nanstd(matrix, axis=0, ddof=1)
    quantile = stats.t.ppf(0.5 + confidence / 2.0, np.maximum(count - 1, 1))
    half = np.where(count >= 2, quantile * sd / np.sqrt(np.maximum(count, 1)), np.nan)
    return mean, mean - half, mean + half


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
        index = np.clip(np.searchsorted(edges, rows[x].to_numpy(), side="right") - 1, 0, n_bins - 1)
        sums = np.bincount(index[keep], weights=values[keep], minlength=n_bins)
        counts = np.bincount(index[keep], minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return out


def _bin_positions(frame: pd.DataFrame, *, x: str, edges: np.ndarray) -> np.ndarray:
    """Where to draw each bin: the mean env step of its points (NaN for an empty bin)."""
    # Bin centres would shift curves whose points sit at a bin edge (e.g. update steps).
    positions = binned_run_means(frame, x=x, y=x, edges=edges)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(positions, axis=0)


def _grid(x_values: np.ndarray, n_bins: int) -> np.ndarray:
    """`n_bins` equal bins (at most `MAX_BINS`) spanning the observed env steps."""
    low, high = float(np.min(x_values)), float(np.max(x_values))
    return np.linspace(low, max(high, low + 1.0), int(np.clip(n_bins, 1, MAX_BINS)) + 1)


def _note(ax: Axes, text: str) -> None:
    ax.text(
        0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, wrap=True
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _note_figure(text: str) -> Figure:
    fig, axes = new_figure(1)
    _note(axes[0], text)
    return fig


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
            ncols=min(len(handles), 4),
        )


def _policies(frame: pd.DataFrame) -> list[tuple[str, bool]]:
    pairs = frame[["algo", "shielded"]].drop_duplicates().itertuples(index=False)
    # Deployed policies first, then shield-off variants; algorithms alphabetical.
    return sorted(((str(a), bool(s)) for a, s in pairs), key=lambda p: (p[0], not p[1]))


def _curve(
    ax: Axes,
    x: np.ndarray,
    matrix: np.ndarray,
    *,
    algo: str,
    shielded: bool,
    limits: tuple[float, float] = (-np.inf, np.inf),
) -> None:
    mean, low, high = _t_band(matrix)
    low, high = np.clip(low, *limits), np.clip(high, *limits)
    color = algo_color(algo)
    ax.plot(
        x,
        mean,
        color=color,
        linestyle=policy_linestyle(algo, shielded),
        label=policy_label(algo, shielded),
        # With few bins a lone point would be invisible as a line.
        marker="o" if len(x) < 10 else None,
        markersize=3,
    )
    ax.fill_between(x, low, high, color=color, alpha=BAND_ALPHA, linewidth=0)


# (column, axis label, range of the quantity: bands are clipped to it)
LEARNING_METRICS: tuple[tuple[str, str, tuple[float, float]], ...] = (
    ("team_return", "team return per episode", (-np.inf, np.inf)),
    ("cost", "episode cost (sum over agents)", (0.0, np.inf)),
    ("violated", "violation rate (fraction of episodes)", (0.0, 1.0)),
)


def learning_curves(history: pd.DataFrame) -> Figure:
    """Return, episode cost and violation rate against env steps: rows are metrics, columns envs."""
    if history.empty:
        return _note_figure("no training episodes to plot")
    envs = sorted(history["env"].unique())
    fig, axes = new_figure(len(envs), rows=len(LEARNING_METRICS))
    frame = history.assign(violated=history["violated"].astype(np.float64))
    for column, env in enumerate(envs):
        env_rows = frame[frame["env"] == env]
        per_run = env_rows.groupby(["algo", "run"]).size()
        # About five episodes per run in a bin keeps the curves readable without hiding trends.
        edges = _grid(env_rows["t_end"].to_numpy(), int(per_run.min()) // 5)
        for row, (metric, label, limits) in enumerate(LEARNING_METRICS):
            ax = axes[row * len(envs) + column]
            for algo in sorted(env_rows["algo"].unique()):
                runs = env_rows[env_rows["algo"] == algo]
                matrix = binned_run_means(runs, x="t_end", y=metric, edges=edges)
                x = _bin_positions(runs, x="t_end", edges=edges)
                _curve(ax, x, matrix, algo=algo, shielded=True, limits=limits)
            ax.set_ylabel(label)
            ax.set_xlabel("env steps")
            if row == 0:
                ax.set_title(env)
            if metric == "violated":
                ax.set_ylim(-0.02, 1.02)
    figure_title(fig, "Training curves: mean across runs, band = 95% t-interval")
    _legend(fig, axes)
    return fig


def _probability_band(
    group: pd.DataFrame, horizons: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean p_violation per horizon across runs with its band (t-interval, or one run's CP)."""
    table = group.pivot_table(index="run", columns="horizon", values="p_violation").reindex(
        columns=horizons
    )
    matrix = table.to_numpy(dtype=np.float64)
    if matrix.shape[0] >= 2:
        mean, low, high = _t_band(matrix)
        return mean, np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
    single = group.set_index("horizon").reindex(horizons)
    return (
        single["p_violation"].to_numpy(dtype=np.float64),
        single["ci_low"].to_numpy(dtype=np.float64),
        single["ci_high"].to_numpy(dtype=np.float64),
    )


def violation_vs_horizon(evaluation: pd.DataFrame) -> Figure:
    """P(violation within H steps) of the final policies against H, one panel per env."""
    if evaluation.empty:
        return _note_figure("no final-policy evaluation (final_policy_eval_episodes is 0)")
    envs = sorted(evaluation["env"].unique())
    fig, axes = new_figure(len(envs))
    for ax, env in zip(axes, envs, strict=True):
        env_rows = evaluation[evaluation["env"] == env]
        horizons = sorted(int(h) for h in env_rows["horizon"].unique())
        for algo, shielded in _policies(env_rows):
            group = env_rows[(env_rows["algo"] == algo) & (env_rows["shielded"] == shielded)]
            mean, low, high = _probability_band(group, horizons)
            color = algo_color(algo)
            ax.plot(
                horizons,
                mean,
                marker="o",
                markersize=3,
                color=color,
                linestyle=policy_linestyle(algo, shielded),
                label=policy_label(algo, shielded),
            )
            ax.fill_between(horizons, low, high, color=color, alpha=BAND_ALPHA, linewidth=0)
        if len(horizons) > 1 and horizons[0] > 0 and horizons[-1] / horizons[0] >= 10:
            ax.set_xscale("log")
        ax.set_xlabel("horizon H (env steps)")
        ax.set_ylabel("P(violation within H steps)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(env)
    figure_title(
        fig,
        "Final policies: mean across runs; band = 95% t-interval across runs "
        "(Clopper-Pearson interval for a single run)",
    )
    _legend(fig, axes)
    return fig


def _mean_half_width(values: np.ndarray) -> tuple[float, float]:
    """Mean of the runs and the half-width of its 95% t-interval (0 for a single run)."""
    mean, low, _ = _t_band(values[:, None])
    half = float(mean[0] - low[0])
    return float(mean[0]), 0.0 if np.isnan(half) else half


def return_vs_risk(evaluation: pd.DataFrame) -> Figure:
    """Final return against violation probability at the largest horizon: runs and policy means."""
    if evaluation.empty:
        return _note_figure("no final-policy evaluation (final_policy_eval_episodes is 0)")
    envs = sorted(evaluation["env"].unique())
    fig, axes = new_figure(len(envs))
    for ax, env in zip(axes, envs, strict=True):
        env_rows = evaluation[evaluation["env"] == env]
        horizon = int(env_rows["horizon"].max())
        last = env_rows[env_rows["horizon"] == horizon]
        for algo, shielded in _policies(last):
            group = last[(last["algo"] == algo) & (last["shielded"] == shielded)]
            color = algo_color(algo)
            risk = group["p_violation"].to_numpy(dtype=np.float64)
            ret = group["mean_return"].to_numpy(dtype=np.float64)
            marker = "s" if policy_linestyle(algo, shielded) == "--" else "o"
            ax.scatter(risk, ret, color=color, alpha=0.5, s=28, marker=marker, linewidths=0)
            (mx, ex), (my, ey) = _mean_half_width(risk), _mean_half_width(ret)
            ax.errorbar(
                mx,
                my,
                xerr=ex,
                yerr=ey,
                color=color,
                marker=marker,
                markersize=7,
                capsize=3,
                linestyle="none",
                label=policy_label(algo, shielded),
            )
        ax.set_xlabel(f"P(violation within {horizon} steps)")
        ax.set_ylabel(f"mean team return over {horizon} steps")
        ax.set_title(env)
    figure_title(
        fig, "Return against risk: small markers are runs; large markers the mean ± 95% t-interval"
    )
    _legend(fig, axes)
    return fig


def shield_interventions(updates: pd.DataFrame) -> Figure:
    """Shield interventions per policy update against env steps, for the shielded runs."""
    shield = updates[updates["algo"].map(has_shield).astype(bool)] if not updates.empty else updates
    if shield.empty or shield[SHIELD_INTERVENTIONS].isna().all():
        return _note_figure("no shield runs: no interventions to plot")
    envs = sorted(shield["env"].unique())
    fig, axes = new_figure(len(envs))
    for ax, env in zip(axes, envs, strict=True):
        env_rows = shield[shield["env"] == env]
        for algo in sorted(env_rows["algo"].unique()):
            rows = env_rows[env_rows["algo"] == algo]
            # Runs of one config share their update steps: one bin per update.
            edges = _grid(rows["global_step"].to_numpy(), int(rows.groupby("run").size().min()))
            matrix = binned_run_means(rows, x="global_step", y=SHIELD_INTERVENTIONS, edges=edges)
            x = _bin_positions(rows, x="global_step", edges=edges)
            _curve(ax, x, matrix, algo=algo, shielded=True, limits=(0.0, np.inf))
        ax.set_xlabel("env steps")
        ax.set_ylabel("interventions per update (count)")
        ax.set_title(env)
    figure_title(fig, "Shield interventions: mean across runs, band = 95% t-interval")
    _legend(fig, axes)
    return fig


def make_figures(tables_dir: str | Path, figures_dir: str | Path) -> list[Path]:
    """Draw the four figures from the aggregated tables; returns the PNG and PDF paths written."""
    history = load_table(tables_dir, "history").to_pandas()
    evaluation = load_table(tables_dir, "eval").to_pandas()
    updates = load_table(tables_dir, "updates").to_pandas()
    builders: dict[str, Callable[[], Figure]] = {
        "learning_curves": lambda: learning_curves(history),
        "violation_vs_horizon": lambda: violation_vs_horizon(evaluation),
        "return_vs_risk": lambda: return_vs_risk(evaluation),
        "shield_interventions": lambda: shield_interventions(updates),
    }
    paths: list[Path] = []
    for name in FIGURE_NAMES:
        paths += save_figure(builders[name](), figures_dir, name)
    plt.close("all")
    return paths
