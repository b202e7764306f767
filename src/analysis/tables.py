"""Summary table of an experiment: one row per env and policy, with the constraint's verdict.

Per run, the summary takes
- `train_return`, `train_cost`: mean team return and episode cost over the last
  `FINAL_FRACTION` of its training episodes (by `t_end`, at least one episode);
- `eval_return`, `eval_cost`: the final policy's evaluation mean return and cost at the largest
  horizon;
- `collision_share`, `eval_goals`: at the constraint horizon, the share of violating episodes
  whose first violation is a collision between agents, and the goals per episode.
Across the runs of a policy these get the mean and a 95% Student-t interval (NaN with a single
run; costs clipped at 0). Probabilities get two intervals (`src.analysis.constraint`): for
every evaluation horizon H, pooled over the runs, `violations_h{H}` = k summed over the runs,
`p_violation_h{H}` = k / n with n = `eval_episodes` summed over the runs, and the
Clopper-Pearson interval of (k, n) at the evaluation's confidence (an interval for these runs'
policies); and with runs as the unit, `p_violation_h{H}_runs` = the mean of the runs' rates
with its between-run interval (`src.stats.between_run_interval`). `constraint_horizon` is the
env's constraint horizon (its runs' `constraint_horizon`), `run_ids` and `run_p_violation` the
runs and their rates there (JSON lists, in run order), and `constraint` the verdict there
against the runs' `max_risk` (from their configs): "met" (the between-run interval's upper end
<= `max_risk`), "point" (only the mean of the runs' rates) or "not met". Horizons beyond the
constraint horizon are marked as beyond the constraint in the Markdown and LaTeX tables.

The deployed policy of a shielded algorithm whose runs carry a certificate (the shield's
fixed-sequence test on calibration episodes, the `certified` / `cert_*` columns of the
evaluation) gets `certified_runs`, the number of its runs whose certificate passed, and
`certificate`, a count, e.g. "2/3 runs certified (each its own test: ≤ 0.1 at delta = 0.05;
run 1: no certificate)". Each certificate is a per-run statement
(`src.analysis.constraint.CERTIFICATE_STATEMENT`); the notes add what they say together
(`src.analysis.constraint.CertificateFamily`).

A `shield` run evaluated with the shield off is its own policy row; its training columns are
empty (it was trained shielded).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from src.analysis.aggregate import load_table
from src.analysis.constraint import (
    CERTIFICATE_STATEMENT,
    CertificateFamily,
    between_runs,
    certificate_family,
    constraint_horizons,
    constraint_status,
    judged_horizon,
    max_risk_of_runs,
    pooled_violations,
    run_configs,
)
from src.analysis.files import write_text
from src.analysis.floor import MIN_GOAL_SHARE, Floor, feasible, load_floor
from src.analysis.style import has_shield, policy_label
from src.checks import is_int, shown
from src.core.io import CorruptFileError, PersistenceError, atomic_output

__all__ = [
    "CERTIFICATE_COLUMN",
    "FINAL_FRACTION",
    "NO_FLOOR",
    "SUMMARY_FILES",
    "certificate_text",
    "final_training_metrics",
    "floor_frame",
    "floor_markdown",
    "make_summary",
    "mean_interval",
    "read_floor",
    "summary_frame",
    "summary_markdown",
]

FINAL_FRACTION = 0.1
SUMMARY_FILES = ("summary.csv", "summary.md", "summary.tex")
_RUN_KEYS = ["env", "algo", "run"]
_POLICY_KEYS = ["env", "algo", "shielded"]
# Metrics averaged across runs with a t-interval (unbounded quantities), and their labels.
MEAN_METRICS: dict[str, str] = {
    "train_return": "return (train)",
    "train_cost": "cost (train)",
    "eval_return": "return (eval)",
    "eval_cost": "cost (eval)",
}
CERTIFICATE_COLUMN = "certificate"
"""Summary column stating how many runs of a shielded policy are certified."""


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


def _per_run_eval(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Per run and shield mode: evaluation return and cost at the largest horizon."""
    rows = []
    for (env, algo, run, shielded), group in evaluation.groupby(
        [*_RUN_KEYS, "shielded"], sort=True
    ):
        last = group.loc[group["horizon"].idxmax()]
        rows.append(
            {
                "env": env,
                "algo": algo,
                "run": run,
                "shielded": bool(shielded),
                "eval_return": float(last["mean_return"]),
                "eval_cost": float(last["mean_cost"]),
            }
        )
    return pd.DataFrame(rows, columns=[*_RUN_KEYS, "shielded", "eval_return", "eval_cost"])


def _probability_columns(evaluation: pd.DataFrame, horizons: list[int]) -> pd.DataFrame:
    """Per policy: pooled evaluation episodes, and per horizon k, the pooled estimate and
    interval, and the mean of the runs' rates with its between-run interval."""
    pooled = pooled_violations(evaluation, by=[*_POLICY_KEYS, "horizon"])
    between = between_runs(evaluation, by=[*_POLICY_KEYS, "horizon"])
    columns: list[pd.DataFrame] = []
    for h in horizons:
        at_h = pooled[pooled["horizon"] == h].set_index(_POLICY_KEYS)
        runs_at_h = between[between["horizon"] == h].set_index(_POLICY_KEYS)
        columns.append(
            pd.DataFrame(
                {
                    f"p_violation_h{h}": at_h["p_violation"],
                    f"p_violation_h{h}_low": at_h["ci_low"],
                    f"p_violation_h{h}_high": at_h["ci_high"],
                    f"violations_h{h}": at_h["violations"],
                    f"p_violation_h{h}_runs": runs_at_h["runs_mean"],
                    f"p_violation_h{h}_runs_low": runs_at_h["runs_low"],
                    f"p_violation_h{h}_runs_high": runs_at_h["runs_high"],
                }
            )
        )
    episodes = pooled.groupby(_POLICY_KEYS).agg(
        eval_episodes=("n", "max"), confidence=("confidence", "min")
    )
    frame = pd.concat([episodes, *columns], axis=1)
    return frame.reset_index()


def _verdicts(
    probabilities: pd.DataFrame,
    evaluation: pd.DataFrame,
    max_risk: pd.DataFrame,
    horizons: Mapping[str, int],
) -> pd.DataFrame:
    """Per policy: its `max_risk` (the strictest of its runs), the constraint horizon, the runs'
    rates there and the verdict on their between-run interval."""
    rows = []
    for _, policy in probabilities.iterrows():
        env, algo = policy["env"], policy["algo"]
        risks = max_risk.loc[(max_risk["env"] == env) & (max_risk["algo"] == algo), "max_risk"]
        bound = float(risks.min()) if len(risks) else math.nan
        horizon = judged_horizon(horizons, env, evaluation.loc[evaluation["env"] == env, "horizon"])
        estimate = float(policy[f"p_violation_h{horizon}_runs"])
        upper = float(policy[f"p_violation_h{horizon}_runs_high"])
        runs = _run_rates(evaluation, policy, horizon)
        rows.append(
            {
                "env": env,
                "algo": algo,
                "shielded": policy["shielded"],
                "max_risk": bound,
                "constraint_horizon": horizon,
                "constraint": constraint_status(estimate=estimate, upper=upper, max_risk=bound),
                "run_ids": json.dumps([int(r) for r in runs.index]),
                "run_p_violation": json.dumps([float(p) for p in runs]),
                **_at_horizon(evaluation, policy, horizon),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            *_POLICY_KEYS,
            "max_risk",
            "constraint_horizon",
            "constraint",
            "run_ids",
            "run_p_violation",
            "collision_share",
            "eval_goals",
        ],
    )


def _policy_rows(evaluation: pd.DataFrame, policy: pd.Series, horizon: int) -> pd.DataFrame:
    return evaluation[
        (evaluation["env"] == policy["env"])
        & (evaluation["algo"] == policy["algo"])
        & (evaluation["shielded"] == policy["shielded"])
        & (evaluation["horizon"] == horizon)
    ]


def _run_rates(evaluation: pd.DataFrame, policy: pd.Series, horizon: int) -> pd.Series:
    """A policy's violation rate per run at `horizon`, indexed by run in increasing order."""
    rows = _policy_rows(evaluation, policy, horizon).sort_values("run")
    return pd.Series(
        (rows["violations"] / rows["n"]).to_numpy(dtype=np.float64), index=rows["run"].to_numpy()
    )


def _at_horizon(evaluation: pd.DataFrame, policy: pd.Series, horizon: int) -> dict[str, float]:
    """A policy's pooled collision share of its violations and mean goals at `horizon`.

    `collision_share`: of the episodes that violated within H, the fraction whose first
    violation includes a collision between agents; `eval_goals`: goals per episode within H.
    NaN where the task does not report them.
    """
    rows = _policy_rows(evaluation, policy, horizon)
    share, goals = math.nan, math.nan
    if "collision_violations" in rows and rows["collision_violations"].notna().all():
        violations = float(rows["violations"].sum())
        if violations > 0:
            share = float(rows["collision_violations"].sum()) / violations
    if "mean_goals" in rows and len(rows) and rows["mean_goals"].notna().all():
        goals = float(np.average(rows["mean_goals"], weights=rows["n"]))
    return {"collision_share": share, "eval_goals": goals}


def summary_frame(
    history: pd.DataFrame,
    evaluation: pd.DataFrame,
    *,
    max_risk: pd.DataFrame | None = None,
    horizons: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """One row per (env, algo, shielded): constraint verdict, run means, probabilities.

    `max_risk` has one row per run (`env`, `algo`, `run`, `max_risk`, as
    `src.analysis.constraint.max_risk_of_runs` builds it from the run configs); without it the
    verdict is empty. `horizons` maps every evaluated env to its constraint horizon
    (`src.analysis.constraint.constraint_horizons` of the run configs); it is required when
    there are evaluation rows, and the evaluation must have each env's horizon.
    """
    if history.empty:
        raise ValueError("the history table is empty: there is no training episode to summarise")
    if horizons is None and not evaluation.empty:
        raise ValueError(
            "the constraint horizon of every env is needed to judge the evaluation "
            "(constraint_horizons of the run configs)"
        )
    if max_risk is None:
        max_risk = max_risk_of_runs([])
    train = final_training_metrics(history)
    per_eval = _per_run_eval(evaluation)
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
            "_run_ids": sorted(int(r) for r in group["run"].unique()),
        }
        for metric in MEAN_METRICS:
            values = group[metric].to_numpy(dtype=np.float64) if metric in group else np.array([])
            mean, low, high = mean_interval(values)
            if metric.endswith("_cost"):
                # Costs are non-negative.
                low, high = (x if math.isnan(x) else max(x, 0.0) for x in (low, high))
            row.update({f"{metric}_mean": mean, f"{metric}_low": low, f"{metric}_high": high})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if evaluation.empty:
        return frame.drop(columns="_run_ids")
    evaluated = sorted(int(h) for h in evaluation["horizon"].unique())
    probabilities = _probability_columns(evaluation, evaluated)
    verdicts = _verdicts(probabilities, evaluation, max_risk, horizons or {})
    frame = frame.merge(verdicts, on=_POLICY_KEYS, how="left").merge(
        probabilities, on=_POLICY_KEYS, how="left"
    )
    frame = _certificates(frame, evaluation).drop(columns="_run_ids")
    leading = [
        *_POLICY_KEYS,
        "policy",
        "runs",
        "max_risk",
        "constraint_horizon",
        "constraint",
        "run_ids",
        "run_p_violation",
        "certified_runs",
        CERTIFICATE_COLUMN,
        "confidence",
        "eval_episodes",
    ]
    return frame[leading + [c for c in frame.columns if c not in leading]]


def _run_certificates(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Per run with a certificate: `certified`, `cert_episodes` and `cert_delta` (the same on
    every row of a run); empty without certificate columns."""
    columns = [*_RUN_KEYS, "certified", "cert_episodes", "cert_delta"]
    if not set(columns) <= set(evaluation.columns):
        return pd.DataFrame(columns=columns)
    rows = evaluation.loc[evaluation["certified"].notna(), columns]
    return rows.groupby(_RUN_KEYS, sort=True).first().reset_index()


def certificate_text(
    certified: dict[int, bool | None], *, max_risk: float, delta: float, tested: dict[int, bool]
) -> str:
    """The certificate cell of a policy: how many of its runs are certified (a count: each
    certificate is its own run's test, not a joint claim), and why the others are not.

    `certified`: run -> passed (None: the run has no certificate); `tested`: run -> whether its
    shield ran calibration episodes; `delta`: the largest delta of the runs.

    >>> certificate_text({0: True, 1: False, 2: True}, max_risk=0.1, delta=0.05,
    ...                  tested={0: True, 1: True, 2: True})
    '2/3 runs certified (each its own test: ≤ 0.1 at delta = 0.05; run 1: no certificate)'
    """
    passed = sum(bool(flag) for flag in certified.values())
    bound = "max_risk" if math.isnan(max_risk) else f"{max_risk:g}"
    text = f"{passed}/{len(certified)} runs certified (each its own test: ≤ {bound} at delta = "
    text += f"{delta:g}"
    reasons: dict[str, list[int]] = {}
    for run, flag in sorted(certified.items()):
        if not flag:
            reason = "not tested" if flag is not None and not tested[run] else "no certificate"
            reasons.setdefault(reason, []).append(run)
    if reasons:
        parts = [
            f"run{'s' if len(runs) > 1 else ''} {', '.join(map(str, runs))}: {reason}"
            for reason, runs in reasons.items()
        ]
        text += f"; {'; '.join(parts)}"
    return text + ")"


def _certificates(frame: pd.DataFrame, evaluation: pd.DataFrame) -> pd.DataFrame:
    """`certified_runs` and `certificate` of every policy row: set for the deployed policy of a
    shielded algorithm with a certificate in some run, else NaN and ""."""
    per_run = _run_certificates(evaluation)
    counts: list[float] = []
    texts: list[str] = []
    for i in frame.index:
        env, algo = frame.loc[i, "env"], frame.loc[i, "algo"]
        mine = per_run[(per_run["env"] == env) & (per_run["algo"] == algo)]
        if not (has_shield(algo) and bool(frame.loc[i, "shielded"])) or mine.empty:
            counts.append(math.nan)
            texts.append("")
            continue
        runs = frame.loc[i, "_run_ids"]
        certified = dict.fromkeys(runs, None) | {
            int(r.run): bool(r.certified) for r in mine.itertuples(index=False)
        }
        tested = {int(r.run): int(r.cert_episodes) > 0 for r in mine.itertuples(index=False)}
        counts.append(float(sum(bool(flag) for flag in certified.values())))
        texts.append(
            certificate_text(
                certified,
                max_risk=float(frame.loc[i, "max_risk"]),
                delta=float(mine["cert_delta"].max()),
                tested=tested,
            )
        )
    return frame.assign(certified_runs=counts, **{CERTIFICATE_COLUMN: texts})


def _format(value: float) -> str:
    return f"{value:.3g}"


def _mean_cell(frame: pd.DataFrame, index: int, metric: str) -> str:
    mean, low, high = (frame.loc[index, f"{metric}_{part}"] for part in ("mean", "low", "high"))
    if math.isnan(mean):
        return "–"
    if math.isnan(low):
        return _format(mean)
    return f"{_format(mean)} [{_format(low)}, {_format(high)}]"


def _probability_cell(frame: pd.DataFrame, index: int, column: str) -> str:
    estimate = frame.loc[index, column]
    if pd.isna(estimate):
        return "–"
    low, high = frame.loc[index, f"{column}_low"], frame.loc[index, f"{column}_high"]
    return f"{_format(estimate)} [{_format(low)}, {_format(high)}]"


def _horizons(frame: pd.DataFrame) -> list[int]:
    prefix = "p_violation_h"
    return sorted(
        int(c.removeprefix(prefix))
        for c in frame.columns
        if c.startswith(prefix) and c.removeprefix(prefix).isdigit()
    )


BEYOND = "†"
"""Mark of a horizon beyond the constraint horizon (beyond the constraint) in the tables."""


def _beyond(frame: pd.DataFrame, horizon: int) -> pd.Series:
    """Per row: whether `horizon` lies beyond the row's constraint horizon."""
    if "constraint_horizon" not in frame.columns:
        return pd.Series(False, index=frame.index)
    bound = pd.to_numeric(frame["constraint_horizon"], errors="coerce")
    return bound.notna() & (horizon > bound)


def _runs_cell(frame: pd.DataFrame, index: int) -> str:
    """Mean of the runs' rates at the constraint horizon, its between-run interval, and the
    runs' own rates (run order)."""
    horizon = frame.loc[index, "constraint_horizon"]
    column = f"p_violation_h{int(horizon)}_runs" if not pd.isna(horizon) else ""
    if column not in frame.columns or pd.isna(frame.loc[index, column]):
        return "–"
    low, high = frame.loc[index, f"{column}_low"], frame.loc[index, f"{column}_high"]
    cell = f"{_format(frame.loc[index, column])} [{_format(low)}, {_format(high)}]"
    rates = json.loads(frame.loc[index, "run_p_violation"])
    if len(rates) == 1:
        return f"{cell} (one run: pooled interval)"
    return f"{cell} ({', '.join(_format(r) for r in rates)})"


def _header_and_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    horizons = _horizons(frame)
    verdict = "constraint" in frame.columns
    header = ["env", "policy", "runs"]
    if verdict:
        header += ["max_risk", "H", "constraint", "P(viol. ≤ H) across runs (per run)"]
    certificates = CERTIFICATE_COLUMN in frame.columns and frame[CERTIFICATE_COLUMN].any()
    if certificates:
        header.append(CERTIFICATE_COLUMN)
    header += list(MEAN_METRICS.values())
    beyond = {h: _beyond(frame, h) for h in horizons}
    # A column beyond every row's constraint is marked in its header, else the cells beyond.
    marked = {h: bool(len(frame)) and bool(beyond[h].all()) for h in horizons}
    header += [f"P(viol. ≤ {h}){BEYOND if marked[h] else ''}" for h in horizons]
    split = "collision_share" in frame.columns and frame["collision_share"].notna().any()
    if split:
        header.append("collisions")
    rows = []
    for i in frame.index:
        cells = [str(frame.loc[i, "env"]), str(frame.loc[i, "policy"]), str(frame.loc[i, "runs"])]
        if verdict:
            bound, horizon = frame.loc[i, "max_risk"], frame.loc[i, "constraint_horizon"]
            cells += [
                "–" if pd.isna(bound) else _format(bound),
                "–" if pd.isna(horizon) else str(int(horizon)),
                str(frame.loc[i, "constraint"] or "–"),
                _runs_cell(frame, i),
            ]
        if certificates:
            cells.append(str(frame.loc[i, CERTIFICATE_COLUMN] or "–"))
        cells += [_mean_cell(frame, i, metric) for metric in MEAN_METRICS]
        cells += [
            _probability_cell(frame, i, f"p_violation_h{h}")
            + (BEYOND if beyond[h][i] and not marked[h] else "")
            for h in horizons
        ]
        if split:
            share = frame.loc[i, "collision_share"]
            cells.append("–" if pd.isna(share) else f"{share:.0%}")
        rows.append(cells)
    return header, rows


def _notes(frame: pd.DataFrame, family: CertificateFamily | None = None) -> list[str]:
    """What the cells mean, with this table's horizons and confidence; `family`: the
    experiment's certificates taken together."""
    notes = [
        "Returns and costs: mean across runs, 95% t-interval across runs in brackets (none "
        "with one run).",
    ]
    if "constraint" in frame.columns:
        confidence = frame["confidence"].min()
        episodes = ", ".join(str(int(n)) for n in sorted(frame["eval_episodes"].unique()))
        pairs = frame[["env", "constraint_horizon"]].drop_duplicates()
        where = ", ".join(f"{e}: H = {int(h)}" for e, h in pairs.itertuples(index=False))
        notes += [
            "P(viol. ≤ h): probability of a violation within h steps, pooled over the runs' "
            f"evaluation episodes (violations and episodes summed; {episodes} episodes per "
            f"policy), {confidence:.0%} Clopper-Pearson interval in brackets: an interval for "
            "these runs' policies.",
            "H: the constraint horizon, the steps the constraint P(violation within H steps) "
            "≤ max_risk covers (the runs' constraint_horizon: the task's episode cap max_steps "
            f"unless the config sets it; {where}).",
            "P(viol. ≤ H) across runs: runs as the unit, the mean of the runs' violation rates "
            f"within H with a {confidence:.0%} Student-t interval over the runs (runs - 1 "
            "degrees of freedom), widened to contain the pooled Clopper-Pearson interval and "
            "clipped to [0, 1] (with one run: the pooled interval only); in parentheses each "
            "run's rate, in run order. It says where another run of the same training may "
            "land; the pooled interval speaks only of these runs' policies.",
            "constraint: judged exactly at H against max_risk: met = the upper end of the "
            "interval across runs ≤ max_risk; point = only the mean of the runs' rates ≤ "
            "max_risk; not met = that mean > max_risk.",
        ]
        if any(_beyond(frame, h).any() for h in _horizons(frame)):
            notes.append(
                f"{BEYOND}: beyond the constraint horizon H (beyond the constraint): what the "
                "policies do after the steps the constraint covers; no verdict is taken there."
            )
    if CERTIFICATE_COLUMN in frame.columns and frame[CERTIFICATE_COLUMN].any():
        statement = CERTIFICATE_STATEMENT.format(horizon="H", max_risk="max_risk")
        note = (
            "certificate: the number of a shielded policy's runs whose deployed shield passed "
            "the fixed-sequence binomial test that ends its training, on calibration episodes "
            "in the real env that nothing else uses: a count, not a joint claim. Each run's "
            f"certificate is a per-run, unconditional statement: {statement} (H = the "
            "constraint horizon, delta = the run's shield_credible_delta / certificate_family, "
            "the level it tested at); it is not a "
            "probability that a run which was certified meets max_risk. Not tested: the "
            "shield ran no calibration episodes."
        )
        if family is not None:
            note += f" {family.statement()}"
        notes.append(note)
    if "collision_share" in frame.columns and frame["collision_share"].notna().any():
        notes.append(
            "collisions: of the episodes that violated within the constraint horizon, the share "
            "whose first violation is a collision between agents (the rest: hazards, leaving "
            "the road)."
        )
    notes.append("Dashes mark quantities that were not measured.")
    return notes


_TEXT_COLUMNS = ("env", "policy", "constraint", CERTIFICATE_COLUMN)


def summary_markdown(frame: pd.DataFrame, *, family: CertificateFamily | None = None) -> str:
    """The summary as a Markdown table followed by what its cells mean (`family`: the
    experiment's certificates together, stated in the certificate note)."""
    header, rows = _header_and_rows(frame)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if h in _TEXT_COLUMNS else "---:" for h in header) + "|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join([*lines, "", *(f"- {note}" for note in _notes(frame, family)), ""])


def _latex_escape(text: str) -> str:
    for char, escaped in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
    ):
        text = text.replace(char, escaped)
    return text.replace("≤", r"$\leq$").replace("–", "--").replace(BEYOND, r"$^\dagger$")


def _latex(frame: pd.DataFrame, family: CertificateFamily | None = None) -> str:
    header, rows = _header_and_rows(frame)
    lines = [f"% {note}" for note in _notes(frame, family)]
    lines += [
        r"\begin{tabular}{" + "".join("l" if h in _TEXT_COLUMNS else "r" for h in header) + "}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_latex_escape(c) for c in cells) + r" \\" for cells in rows]
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


# The kind of every value of a floor record that is not a number (NaN allowed).
_FLOOR_KINDS = {
    "env": str,
    "method": str,
    "horizon": int,
    "first_seed": int,
    "episodes": int,
    "violations": int,
}


def read_floor(path: str | Path) -> Floor:
    """A floor record (`src.analysis.floor.load_floor`) with every value of its kind: text
    for `env` and `method`, integers for the counts, numbers (NaN allowed) for the rest.
    Raises `CorruptFileError` (a `ValueError`), one line naming the file, the key and the
    value, otherwise."""
    file = Path(path)
    try:
        floor = load_floor(file)
    except PersistenceError:
        raise
    except (TypeError, ValueError) as error:
        raise CorruptFileError(
            " ".join(str(error).split())[:500], path=file, format=".json"
        ) from None
    for name in Floor.__dataclass_fields__:
        value = getattr(floor, name)
        kind = _FLOOR_KINDS.get(name, float)
        if kind is str:
            good, words = isinstance(value, str), "a string"
        elif kind is int:
            good, words = is_int(value), "an integer"
        else:
            good = isinstance(value, int | float) and not isinstance(value, bool)
            words = "a number (NaN for none)"
        if not good:
            raise CorruptFileError(
                f"{file}: {name}={shown(value)} must be {words}", path=file, format=".json"
            )
    return floor


def floor_frame(floors: Sequence[Floor], summary: pd.DataFrame) -> pd.DataFrame:
    """One row per env with a floor record: the floor next to `max_risk`, and the verdict.

    `ippo_goals` is unconstrained ippo's evaluation goals per episode at the floor's horizon
    (NaN when ippo was not trained: the greedy team's goals are the reference then).
    """
    rows = []
    for floor in floors:
        mine = summary[summary["env"] == floor.env] if "max_risk" in summary else summary[:0]
        bound = float(mine["max_risk"].min()) if len(mine) else math.nan
        ippo = mine[(mine["algo"] == "ippo") & ~mine["shielded"].astype(bool)]
        ippo_goals = float(ippo["eval_goals"].iloc[0]) if len(ippo) else math.nan
        verdict = (
            None if math.isnan(bound) else feasible(floor, max_risk=bound, ippo_goals=ippo_goals)
        )
        rows.append(
            {
                "env": floor.env,
                "max_risk": bound,
                "floor_method": floor.method,
                "floor_horizon": floor.horizon,
                "floor": floor.p_violation,
                "floor_upper": floor.p_upper,
                "floor_goals": floor.goals,
                "ippo_goals": ippo_goals,
                "greedy_goals": floor.greedy_goals,
                "feasible": verdict,
            }
        )
    return pd.DataFrame(rows, columns=list(_FLOOR_COLUMNS))


_FLOOR_COLUMNS = (
    "env",
    "max_risk",
    "floor_method",
    "floor_horizon",
    "floor",
    "floor_upper",
    "floor_goals",
    "ippo_goals",
    "greedy_goals",
    "feasible",
)


NO_FLOOR = "not computed: the task has no careful team (src/envs/witness.py)"
"""The floor cell of a task without a witness: the careful team plays the grid tasks only."""


def floor_markdown(floors: pd.DataFrame) -> str:
    """The floors as a Markdown table followed by what its cells mean."""
    lines = [
        "| env | max_risk | floor P(viol. ≤ H) [upper] | H | goals: careful team / ippo "
        "| feasible (floor ≤ max_risk / 4) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in floors.itertuples(index=False):
        bound = "–" if math.isnan(row.max_risk) else _format(row.max_risk)
        if row.floor_method == "none":
            lines.append(f"| {row.env} | {bound} | {NO_FLOOR} | – | – | – |")
            continue
        reference = row.ippo_goals if not math.isnan(row.ippo_goals) else row.greedy_goals
        share = row.floor_goals / reference if reference > 0 else math.nan
        verdict = {True: "yes", False: "no", None: "–"}[row.feasible]
        lines.append(
            f"| {row.env} | {bound} | {_format(row.floor)} "
            f"[{_format(row.floor_upper)}] | {row.floor_horizon} | {row.floor_goals:.1f} / "
            f"{reference:.1f} = {share:.2f} | {verdict} |"
        )
    notes = [
        "floor: violation rate within H of a careful, centralised, fully observing team "
        "(src/envs/witness.py) on every run's evaluation layouts; it bounds the least risk of "
        "a team that still works from above. Upper: its one-sided Clopper-Pearson bound at the "
        "evaluation's confidence.",
        "goals: goals per episode within H of the careful team and of unconstrained ippo (of a "
        "greedy team where ippo was not trained); feasible: the upper bound ≤ max_risk / 4 and "
        f"the careful team keeps at least {MIN_GOAL_SHARE:.0%} of the reference goals.",
    ]
    return "\n".join([*lines, "", *(f"- {note}" for note in notes), ""])


def make_summary(tables_dir: str | Path, *, floors: Sequence[str | Path] = ()) -> None:
    """Write `summary.csv`, `summary.md` and `summary.tex` from the tables in `tables_dir`.

    `max_risk` and the constraint horizons come from the run configs stored in the tables'
    metadata. `floors` are the envs' floor records (`src.analysis.floor`): `summary.md` shows
    them next to `max_risk` and `summary.csv` carries each env's `floor`, `floor_upper` and
    `feasible`.
    """
    history_table = load_table(tables_dir, "history")
    history = history_table.to_pandas()
    evaluation = load_table(tables_dir, "eval").to_pandas()
    configs = run_configs(history_table)
    frame = summary_frame(
        history,
        evaluation,
        max_risk=max_risk_of_runs(configs),
        horizons=constraint_horizons(configs) if len(evaluation) else {},
    )
    family = certificate_family(evaluation, configs)
    floor_rows = floor_frame([read_floor(path) for path in floors], frame)
    if len(floor_rows):
        frame = frame.merge(
            floor_rows[["env", "floor", "floor_upper", "feasible"]], on="env", how="left"
        )
    out = Path(tables_dir)
    with atomic_output(out / "summary.csv") as tmp:
        frame.to_csv(tmp, index=False)
    markdown = summary_markdown(frame, family=family)
    if len(floor_rows):
        markdown += "\n## Risk floors\n\n" + floor_markdown(floor_rows)
    write_text(markdown, out / "summary.md")
    write_text(_latex(frame, family), out / "summary.tex")
