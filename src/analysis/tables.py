"""Summary table of an experiment: one row per env and policy, mean and 95% interval across runs.

Per run, the summary takes
- `train_return`, `train_cost`: mean team return and episode cost over the last
  `FINAL_FRACTION` of its training episodes (by `t_end`, at least one episode);
- `eval_return`, `eval_cost`: the final policy's evaluation mean return and cost at the largest
  horizon;
- `p_violation_h{H}`: the final policy's violation probability within H steps.
Across the runs of a policy it reports the mean and a 95% Student-t interval (NaN with a
single run); intervals of probabilities are clipped to [0, 1]. A `shield` run evaluated with
the shield off is its own policy row; its training columns are empty (it was trained shielded).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from src.analysis.aggregate import load_table
from src.analysis.files import write_text
from src.analysis.style import has_shield, policy_label
from src.core.io import atomic_output

__all__ = [
    "FINAL_FRACTION",
    "SUMMARY_FILES",
    "final_training_metrics",
    "make_summary",
    "mean_interval",
    "summary_frame",
]

FINAL_FRACTION = 0.1
SUMMARY_FILES = ("summary.csv", "summary.md", "summary.tex")
_RUN_KEYS = ["env", "algo", "run"]


def mean_interval(values: np.ndarray, *, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval of the mean; NaN bounds for fewer than two values."""
    data = np.asarray(values, dtype=np.float64)
    data = data[~np.isnan(data)]
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if data.size < 2:
        return mean, math.nan, math.nan
    half = (
        stats.t.ppf(0.5 + confidence / 2.0, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size)
    )
    return mean, float(mean - half), float(mean + half)


def final_training_metrics(history: pd.DataFrame) -> pd.DataFrame:
    """Per run: mean return and cost of the last `FINAL_FRACTION` of its training episodes."""
    rows = []
    for (env, algo, run), episodes in history.groupby(_RUN_KEYS, sort=True):
        ordered = episodes.sort_values(["t_end", "episode"])
        tail = ordered.tail(max(1, math.ceil(FINAL_FRACTION * len(ordered))))
        rows.append(
            {
                "env": env,
                "algo": algo,
                "run": run,
                "train_return": float(tail["team_return"].mean()),
                "train_cost": float(tail["cost"].mean()),
            }
        )
    return pd.DataFrame(rows, columns=[*_RUN_KEYS, "train_return", "train_cost"])


def _per_run_eval(evaluation: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    horizons = sorted(int(h) for h in evaluation["horizon"].unique())
    rows = []
    for (env, algo, run, shielded), group in evaluation.groupby(
        [*_RUN_KEYS, "shielded"], sort=True
    ):
        by_h = group.set_index("horizon")
        last = by_h.loc[by_h.index.max()]
        row = {
            "env": env,
            "algo": algo,
            "run": run,
            "shielded": bool(shielded),
            "eval_return": float(last["mean_return"]),
            "eval_cost": float(last["mean_cost"]),
        }
        for h in horizons:
            row[f"p_violation_h{h}"] = (
                float(by_h.loc[h, "p_violation"]) if h in by_h.index else math.nan
            )
        rows.append(row)
    columns = [
        *_RUN_KEYS,
        "shielded",
        "eval_return",
        "eval_cost",
        *(f"p_violation_h{h}" for h in horizons),
    ]
    return pd.DataFrame(rows, columns=columns), horizons


def summary_frame(history: pd.DataFrame, evaluation: pd.DataFrame) -> pd.DataFrame:
    """One row per (env, algo, shielded) with `{metric}_{mean,low,high}` columns."""
    if history.empty:
        raise ValueError("the history table is empty: there is no training episode to summarise")
    train = final_training_metrics(history)
    per_eval, horizons = _per_run_eval(evaluation)
    metrics = [
        "train_return",
        "train_cost",
        "eval_return",
        "eval_cost",
        *(f"p_violation_h{h}" for h in horizons),
    ]
    if per_eval.empty:
        runs = train.assign(shielded=train["algo"].map(has_shield).astype(bool))
    else:
        runs = per_eval.merge(train, on=_RUN_KEYS, how="outer")
        shield = runs["algo"].map(has_shield).astype(bool)
        runs["shielded"] = runs["shielded"].fillna(shield).astype(bool)
        # Training metrics belong to the policy as trained: shielded runs were trained shielded.
        off = shield & ~runs["shielded"]
        runs.loc[off, ["train_return", "train_cost"]] = math.nan
    rows = []
    # Deployed policy first, then a shield run's base policy.
    runs = runs.assign(_order=~runs["shielded"].astype(bool))
    for (env, algo, _, shielded), group in runs.groupby(
        ["env", "algo", "_order", "shielded"], sort=True
    ):
        row: dict[str, object] = {
            "env": env,
            "algo": algo,
            "shielded": bool(shielded),
            "policy": policy_label(algo, bool(shielded)),
            "runs": int(group["run"].nunique()),
        }
        for metric in metrics:
            values = group[metric].to_numpy(dtype=np.float64) if metric in group else np.array([])
            mean, low, high = mean_interval(values)
            # Costs and probabilities are non-negative, probabilities at most one.
            upper = 1.0 if metric.startswith("p_violation") else math.inf
            if metric.startswith(("p_violation", "train_cost", "eval_cost")):
                low, high = (x if math.isnan(x) else min(max(x, 0.0), upper) for x in (low, high))
            row.update({f"{metric}_mean": mean, f"{metric}_low": low, f"{metric}_high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(frame: pd.DataFrame, index: int, metric: str) -> str:
    mean, low, high = (frame.loc[index, f"{metric}_{part}"] for part in ("mean", "low", "high"))
    if math.isnan(mean):
        return "–"
    if math.isnan(low):
        return f"{mean:.3g}"
    return f"{mean:.3g} [{low:.3g}, {high:.3g}]"


def _display_columns(frame: pd.DataFrame) -> list[tuple[str, str]]:
    names = {
        "train_return": "return (train)",
        "train_cost": "cost (train)",
        "eval_return": "return (eval)",
        "eval_cost": "cost (eval)",
    }
    metrics = [c[: -len("_mean")] for c in frame.columns if c.endswith("_mean")]
    return [(m, names.get(m, f"P(viol. ≤ {m.removeprefix('p_violation_h')})")) for m in metrics]


def _markdown(frame: pd.DataFrame) -> str:
    columns = _display_columns(frame)
    header = ["env", "policy", "runs", *(label for _, label in columns)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|",
    ]
    for i in frame.index:
        cells = [str(frame.loc[i, "env"]), str(frame.loc[i, "policy"]), str(frame.loc[i, "runs"])]
        cells += [_cell(frame, i, metric) for metric, _ in columns]
        lines.append("| " + " | ".join(cells) + " |")
    note = "Mean across runs with its 95% t-interval in brackets; – means not measured."
    return "\n".join([*lines, "", note, ""])


def _latex_escape(text: str) -> str:
    for char, escaped in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
    ):
        text = text.replace(char, escaped)
    return text.replace("≤", r"$\leq$").replace("–", "--")


def _latex(frame: pd.DataFrame) -> str:
    columns = _display_columns(frame)
    header = ["env", "policy", "runs", *(label for _, label in columns)]
    lines = [
        r"\begin{tabular}{ll" + "r" * (len(header) - 2) + "}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    for i in frame.index:
        cells = [str(frame.loc[i, "env"]), str(frame.loc[i, "policy"]), str(frame.loc[i, "runs"])]
        cells += [_cell(frame, i, metric) for metric, _ in columns]
        lines.append(" & ".join(_latex_escape(c) for c in cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def make_summary(tables_dir: str | Path) -> None:
    """Write `summary.csv`, `summary.md` and `summary.tex` from the tables in `tables_dir`."""
    history = load_table(tables_dir, "history").to_pandas()
    evaluation = load_table(tables_dir, "eval").to_pandas()
    frame = summary_frame(history, evaluation)
    out = Path(tables_dir)
    with atomic_output(out / "summary.csv") as tmp:
        frame.to_csv(tmp, index=False)
    write_text(_markdown(frame), out / "summary.md")
    write_text(_latex(frame), out / "summary.tex")
