"""The safety constraint in the results: its horizon, `max_risk`, violation probabilities and
their intervals, the verdict, paired comparisons of policies, the family of certificates.

The safe methods are asked for P(some agent violates within H steps of an episode) <=
`max_risk`, H the constraint horizon (docs/design.md, section 7). Both come from the run configs
stored in the aggregated tables' Parquet metadata, never from a default: H is each run's
`constraint_horizon` (the workflow sets it to the task's episode cap `max_steps` unless the
config sets it; a config without the key gives `env_params["max_steps"]`), and all runs of an
env must agree. The verdict is taken exactly at H: an evaluation without that horizon is refused,
never judged at a shorter one. Evaluated horizons beyond H are beyond the constraint.

Two intervals per policy and horizon:
- *pooled*: with k_r violating episodes out of n_r in run r, k / n with k = sum k_r and
  n = sum n_r, and the two-sided Clopper-Pearson interval of (k, n): an interval for these
  particular runs' policies (their average violation probability, each run weighted by its
  episodes), within [0, 1] whatever the number of runs;
- *between runs* (`src.stats.between_run_interval`): runs as the unit, the mean of the runs'
  rates k_r / n_r with a Student-t interval over the runs (runs - 1 degrees of freedom, at the
  evaluation's confidence), widened to contain the pooled interval and clipped to [0, 1]: where
  the risk of the training method (another run of it) may lie. With one run it is the pooled
  interval only.

Verdict per policy at H (`constraint_status`): "met" when the upper end of the between-run
interval is <= `max_risk`, "point" when only the mean of the runs' rates is, "not met"
otherwise.

Comparisons (`compare_policies`): every algorithm is evaluated on the same reset seeds (run r's
episode i has seed `final_policy_eval_seed_offset + r * N + i`), so run r of policy A pairs
with run r of policy B episode by episode. "A is safer than B" is said only from the exact
McNemar test (`src.stats.exact_mcnemar`) of b = episodes where A violates within H and B does
not against c = the reverse, pooled over the runs both have, with Holm's adjustment over every
pair stated. Runs that cannot be paired (different N or seed offset, a run missing in one
policy, no per-episode outcomes) are left out with a note.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from src.analysis.aggregate import CONFIGS_METADATA_KEY
from src.config.base import recorded_constraint_horizon
from src.schemas import VIOLATING_EPISODES
from src.stats import between_run_interval, clopper_pearson_interval, exact_mcnemar, holm_adjust

__all__ = [
    "CERTIFICATE_STATEMENT",
    "MET",
    "NOT_MET",
    "POINT",
    "CertificateFamily",
    "Comparison",
    "between_runs",
    "certificate_family",
    "compare_policies",
    "constraint_horizons",
    "constraint_status",
    "judged_horizon",
    "max_risk_by_env",
    "max_risk_of_runs",
    "pooled_rate",
    "pooled_violations",
    "run_configs",
    "run_constraint_horizon",
]


MET, POINT, NOT_MET = "met", "point", "not met"

CERTIFICATE_STATEMENT = (
    "with probability >= 1 - delta over its calibration episodes, the test does not certify an "
    "allowance whose P(violation within {horizon} steps of an episode, reset seeds drawn like "
    "the calibration ones) exceeds {max_risk}"
)
"""What each run's certificate says: a per-run statement about the test, unconditional (not a
probability that a run which was certified meets `max_risk`); format it with `horizon` and
`max_risk`."""


def run_configs(table: pa.Table) -> list[dict]:
    """The run configs stored in an aggregated table's metadata (empty if it has none)."""
    metadata = table.schema.metadata or {}
    if CONFIGS_METADATA_KEY not in metadata:
        return []
    configs = json.loads(metadata[CONFIGS_METADATA_KEY])
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ValueError(
            f"metadata {CONFIGS_METADATA_KEY!r} must hold a JSON list of run configs, "
            f"got {type(configs).__name__}"
        )
    return configs


def max_risk_of_runs(configs: Iterable[dict]) -> pd.DataFrame:
    """One row per run config: `env`, `algo`, `run`, `max_risk`."""
    rows = [
        {
            "env": str(config["env_name"]),
            "algo": str(config["algo"]),
            "run": int(config["run_idx"]),
            "max_risk": float(config["max_risk"]),
        }
        for config in configs
    ]
    return pd.DataFrame(rows, columns=["env", "algo", "run", "max_risk"])


def max_risk_by_env(configs: Iterable[dict]) -> dict[str, tuple[float, ...]]:
    """Per env, the distinct `max_risk` values of its runs in increasing order."""
    frame = max_risk_of_runs(configs)
    return {
        str(env): tuple(sorted(float(v) for v in group["max_risk"].unique()))
        for env, group in frame.groupby("env", sort=True)
    }


def _run_name(config: Mapping[str, Any]) -> str:
    return f"{config.get('env_name')}/{config.get('algo')}/run{config.get('run_idx')}"


def run_constraint_horizon(config: Mapping[str, Any]) -> int:
    """The steps a run's constraint covers: its config's `constraint_horizon`, else (a config
    from before the key) its env's episode cap `env_params["max_steps"]`.

    >>> run_constraint_horizon({"constraint_horizon": 200, "env_params": {"max_steps": 100}})
    200
    >>> run_constraint_horizon({"env_params": {"max_steps": 100}})
    100
    """
    horizon = recorded_constraint_horizon(config)
    if horizon is not None:
        return horizon
    raise ValueError(
        f"run {_run_name(config)}: its config sets neither constraint_horizon nor "
        "env_params.max_steps, so the horizon its constraint covers is unknown"
    )


def constraint_horizons(configs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Per env, the constraint horizon of its runs (`run_constraint_horizon`); runs of one env
    that disagree are refused, naming the env and every value with its runs.

    >>> constraint_horizons([{"env_name": "grid", "constraint_horizon": 100}])
    {'grid': 100}
    """
    found: dict[str, dict[int, list[str]]] = {}
    for config in configs:
        env = str(config["env_name"])
        horizon = run_constraint_horizon(config)
        found.setdefault(env, {}).setdefault(horizon, []).append(_run_name(config))
    for env, values in found.items():
        if len(values) > 1:
            listed = "; ".join(
                f"{h} ({', '.join(sorted(runs))})" for h, runs in sorted(values.items())
            )
            raise ValueError(
                f"env {env}: its runs disagree on the constraint horizon: {listed}; the "
                "results of one env are judged at one horizon"
            )
    return {env: next(iter(values)) for env, values in sorted(found.items())}


def judged_horizon(horizons: Mapping[str, int], env: str, evaluated: Iterable[int]) -> int:
    """The horizon at which env `env`'s constraint is judged: its constraint horizon
    (`horizons`, as `constraint_horizons` gives them), which the evaluation must have.

    Refuses an env without a constraint horizon and an evaluation that lacks it: the
    constraint is never judged at a shorter horizon.

    >>> judged_horizon({"grid": 200}, "grid", [1, 10, 50, 100, 200])
    200
    """
    if env not in horizons:
        raise ValueError(
            f"env {env}: no constraint horizon is known (no run config of the env gives "
            "constraint_horizon or env_params.max_steps)"
        )
    horizon = int(horizons[env])
    values = sorted({int(h) for h in evaluated})
    if horizon not in values:
        raise ValueError(
            f"env {env}: the evaluation lacks the constraint horizon H = {horizon} (evaluated "
            f"horizons: {values}); the constraint is judged only at H, never at a shorter "
            "horizon: add it to final_policy_eval_horizons and evaluate again"
        )
    return horizon


def pooled_rate(
    k: Sequence[float] | np.ndarray, n: Sequence[float] | np.ndarray, *, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate k / n and its Clopper-Pearson interval, element-wise; NaN where n is 0.

    >>> p, low, high = pooled_rate([3, 0], [10, 0], confidence=0.95)
    >>> p.tolist(), bool(np.isnan(low[1]))
    ([0.3, nan], True)
    """
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if k_arr.shape != n_arr.shape:
        raise ValueError(f"k and n must have one shape, got {k_arr.shape} and {n_arr.shape}")
    some = n_arr > 0
    estimate = np.full(k_arr.shape, np.nan)
    low = np.full(k_arr.shape, np.nan)
    high = np.full(k_arr.shape, np.nan)
    if np.any(some):
        estimate[some] = k_arr[some] / n_arr[some]
        low[some], high[some] = clopper_pearson_interval(
            k=k_arr[some], n=n_arr[some], confidence=confidence
        )
    return estimate, low, high


def pooled_violations(evaluation: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Evaluation rows pooled over runs: per group of `by`, k, n, runs, estimate and interval.

    `evaluation` has the columns of `eval.parquet`; each group's interval is at the smallest
    `confidence` of its rows (the widest interval when runs disagree). Returns the `by` columns
    plus `violations` (k), `n`, `runs`, `confidence`, `p_violation`, `ci_low`, `ci_high`.
    """
    columns = [*by, "violations", "n", "runs", "confidence", "p_violation", "ci_low", "ci_high"]
    if evaluation.empty:
        return pd.DataFrame(columns=columns)
    grouped = (
        evaluation.groupby(list(by), sort=True)
        .agg(
            violations=("violations", "sum"),
            n=("n", "sum"),
            runs=("run", "nunique"),
            confidence=("confidence", "min"),
        )
        .reset_index()
    )
    rows = []
    for confidence, part in grouped.groupby("confidence", sort=False):
        estimate, low, high = pooled_rate(
            part["violations"].to_numpy(), part["n"].to_numpy(), confidence=float(confidence)
        )
        rows.append(part.assign(p_violation=estimate, ci_low=low, ci_high=high))
    return pd.concat(rows).sort_index()[columns].reset_index(drop=True)


BETWEEN_COLUMNS = ("runs_mean", "runs_low", "runs_high", "run_ids", "run_rates")


def between_runs(evaluation: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Evaluation rows with runs as the unit: per group of `by`, the mean of the runs' violation
    rates and its between-run interval (`src.stats.between_run_interval`, at the smallest
    `confidence` of the group's rows).

    Returns the `by` columns plus `runs_mean`, `runs_low`, `runs_high`, `run_ids` (the runs, in
    increasing order) and `run_rates` (each run's k / n, in that order). A run must have one
    row per group.
    """
    columns = [*by, *BETWEEN_COLUMNS]
    if evaluation.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, group in evaluation.groupby(list(by), sort=True):
        if group["run"].duplicated().any():
            raise ValueError(f"{dict(zip(by, key, strict=True))}: a run has more than one row")
        ordered = group.sort_values("run")
        k = ordered["violations"].to_numpy(dtype=np.float64)
        n = ordered["n"].to_numpy(dtype=np.float64)
        mean, low, high = between_run_interval(
            k=k, n=n, confidence=float(ordered["confidence"].min())
        )
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "runs_mean": mean,
                "runs_low": low,
                "runs_high": high,
                "run_ids": [int(r) for r in ordered["run"]],
                "run_rates": (k / n).tolist(),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def constraint_status(*, estimate: float, upper: float, max_risk: float) -> str:
    """The verdict: "met" if `upper` <= `max_risk`, "point" if only `estimate` is, else "not met".

    The summary passes the mean of the runs' rates and the upper end of the between-run
    interval. A value that equals `max_risk` up to float rounding (the mean of rates 0.085,
    0.14 and 0.075 sums to 0.10000000000000002) is at it, not beyond. NaN in any argument
    (nothing measured) gives "".

    >>> pairs = [(0.02, 0.08), (0.05, 0.2), (0.3, 0.5), ((0.085 + 0.14 + 0.075) / 3, 0.2)]
    >>> [constraint_status(estimate=e, upper=u, max_risk=0.1) for e, u in pairs]
    ['met', 'point', 'not met', 'point']
    """
    if any(math.isnan(x) for x in (estimate, upper, max_risk)):
        return ""

    def within(value: float) -> bool:
        return value <= max_risk or math.isclose(value, max_risk, rel_tol=1e-9)

    if within(upper):
        return MET
    return POINT if within(estimate) else NOT_MET


Policy = tuple[str, bool]
"""A policy of the evaluation: (algorithm, shielded)."""


@dataclass(frozen=True)
class Comparison:
    """The paired comparison of two policies of one env at its constraint horizon."""

    env: str
    first: Policy
    second: Policy
    horizon: int
    first_only: int
    """b: paired episodes in which only `first` violated within the horizon."""
    second_only: int
    """c: paired episodes in which only `second` violated within the horizon."""
    runs: tuple[int, ...]
    """The runs paired (run r of `first` with run r of `second`)."""
    left_out: tuple[str, ...]
    """Why the other runs were left out of the pairing."""
    p_value: float
    """Exact two-sided McNemar p of (b, c); NaN when no run could be paired."""
    p_adjusted: float = math.nan
    """`p_value` Holm-adjusted over every comparison of `compare_policies` with a paired run."""

    def safer(self, alpha: float) -> Policy | None:
        """The safer policy when the adjusted p is <= `alpha`, else None."""
        if math.isnan(self.p_adjusted) or self.p_adjusted > alpha:
            return None
        return self.first if self.first_only < self.second_only else self.second


def _policy_order(policy: Policy) -> tuple[str, bool]:
    # As the summary: algorithms alphabetical, the deployed (shielded) policy first.
    return policy[0], not policy[1]


def _outcomes(row: pd.Series, where: str) -> set[int] | None:
    """The violating episodes of an eval row as a set (None when the row has none recorded),
    checked against its counts."""
    value = row.get(VIOLATING_EPISODES)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    episodes = {int(i) for i in value}
    if len(episodes) != len(value) or len(episodes) != int(row["violations"]):
        raise ValueError(f"{where}: violating_episodes does not match violations")
    if episodes and (min(episodes) < 0 or max(episodes) >= int(row["n"])):
        raise ValueError(f"{where}: violating_episodes lie outside 0 .. n - 1")
    return episodes


def _pair(
    rows: Mapping[Policy, pd.DataFrame],
    configs: Mapping[tuple[str, int], Mapping[str, Any]],
    first: Policy,
    second: Policy,
    *,
    env: str,
    horizon: int,
    label: Mapping[Policy, str],
) -> Comparison:
    """Pair run r of `first` with run r of `second` at `horizon`; b, c and the exact p."""
    b = c = 0
    paired: list[int] = []
    notes: list[str] = []
    mine = {p: rows[p].set_index("run") for p in (first, second)}
    for run in sorted(set(mine[first].index) | set(mine[second].index)):
        missing = [p for p in (first, second) if run not in mine[p].index]
        if missing:
            notes.append(f"{label[missing[0]]} has no run {run}")
            continue
        row = {p: mine[p].loc[run] for p in (first, second)}
        sizes = {int(row[p]["n"]) for p in row}
        offsets = {configs.get((p[0], run), {}).get("final_policy_eval_seed_offset") for p in row}
        outcomes = {p: _outcomes(row[p], f"{env}/{p[0]}/run{run}") for p in row}
        both = f"run {run} of {label[first]} and {label[second]}"
        if len(sizes) > 1:
            notes.append(
                f"{both}: different numbers of episodes ({row[first]['n']} and {row[second]['n']})"
            )
        elif None in offsets or len(offsets) > 1:
            notes.append(f"{both}: different or unknown evaluation seed offsets")
        elif any(value is None for value in outcomes.values()):
            without = [label[p] for p, value in outcomes.items() if value is None]
            notes.append(
                f"run {run} of {' and '.join(without)}: no per-episode outcomes "
                "(eval.parquet from before violating_episodes)"
            )
        else:
            b += len(outcomes[first] - outcomes[second])
            c += len(outcomes[second] - outcomes[first])
            paired.append(int(run))
    return Comparison(
        env=env,
        first=first,
        second=second,
        horizon=horizon,
        first_only=b,
        second_only=c,
        runs=tuple(paired),
        left_out=tuple(notes),
        p_value=exact_mcnemar(b, c) if paired else math.nan,
    )


def compare_policies(
    evaluation: pd.DataFrame,
    configs: Sequence[Mapping[str, Any]],
    horizons: Mapping[str, int],
    *,
    label: Mapping[Policy, str] | None = None,
) -> list[Comparison]:
    """Every pair of policies of every env, paired at the env's constraint horizon, with the
    exact McNemar p and its Holm adjustment over all the pairs returned that have a paired run.

    `evaluation` has the columns of `eval.parquet`; `configs` are the run configs (the seed
    offsets come from them); `horizons` the constraint horizons (`constraint_horizons`);
    `label` names the policies in the notes (default: "algo, shielded" or "algo, unshielded").
    Pairs follow the summary's order of the policies (algorithms alphabetical, a shielded
    algorithm's deployed policy before its base policy).
    """
    if evaluation.empty:
        return []
    by_run = {(str(c["env_name"]), str(c["algo"]), int(c["run_idx"])): c for c in configs}
    comparisons: list[Comparison] = []
    for env, env_rows in evaluation.groupby("env", sort=True):
        horizon = judged_horizon(horizons, str(env), env_rows["horizon"])
        at_h = env_rows[env_rows["horizon"] == horizon]
        rows = {
            (str(algo), bool(shielded)): group
            for (algo, shielded), group in at_h.groupby(["algo", "shielded"], sort=True)
        }
        policies = sorted(rows, key=_policy_order)
        names = {
            p: (label or {}).get(p, f"{p[0]}, {'shielded' if p[1] else 'unshielded'}")
            for p in policies
        }
        env_configs = {(a, r): c for (e, a, r), c in by_run.items() if e == env}
        for first, second in itertools.combinations(policies, 2):
            comparisons.append(
                _pair(
                    rows,
                    env_configs,
                    first,
                    second,
                    env=str(env),
                    horizon=horizon,
                    label=names,
                )
            )
    tested = [i for i, comparison in enumerate(comparisons) if comparison.runs]
    if tested:
        adjusted = holm_adjust([comparisons[i].p_value for i in tested])
        for i, p in zip(tested, adjusted, strict=True):
            comparisons[i] = _with_adjusted(comparisons[i], float(p))
    return comparisons


def _with_adjusted(comparison: Comparison, p: float) -> Comparison:
    return Comparison(**{**comparison.__dict__, "p_adjusted": p})


@dataclass(frozen=True)
class CertificateFamily:
    """The certificates of an experiment taken together: one per shielded run that tested an
    allowance, each at the level its run tested at."""

    runs: tuple[str, ...]
    """`env/algo/run{r}` of every run with a certificate attempt."""
    deltas: tuple[float, ...]
    """The level each run's certificate tested at (`shield_credible_delta` /
    `certificate_family` of its config), in the order of `runs`."""
    target: float = 0.05
    """The experiment's delta (the largest `shield_credible_delta` of its runs): the joint
    statement the configs ask for is at 1 - target."""

    @property
    def joint(self) -> float:
        """1 - the sum of the deltas: by Bonferroni, every certificate holds together with at
        least this probability (nothing when it is <= 0); rounded to 12 decimals, so that
        20 x 0.05 gives 0, not a rounding error in binary."""
        return round(1.0 - float(sum(self.deltas)), 12) + 0.0  # + 0.0: no "-0"

    def statement(self) -> str:
        """The family statement in words, and how to make it joint at 1 - target where it is
        not.

        >>> print(CertificateFamily(runs=("a", "b", "c"), deltas=(0.05,) * 3).statement())
        ... # doctest: +NORMALIZE_WHITESPACE
        The experiment's 3 certificates (its 3 shielded runs that tested an allowance) all
        hold together with probability >= 1 - 3 × 0.05 = 0.85 (Bonferroni); a joint
        statement at 1 - 0.05 needs `joint_certificates: true` in the workflow config (each
        run then tests at 0.05 / 3 = 0.0167).
        >>> print(CertificateFamily(runs=("a", "b"), deltas=(0.025,) * 2).statement())
        ... # doctest: +NORMALIZE_WHITESPACE
        The experiment's 2 certificates (its 2 shielded runs that tested an allowance) all
        hold together with probability >= 1 - 2 × 0.025 = 0.95 (Bonferroni: each run tested
        at 0.05 / 2, `joint_certificates`).
        """
        count = len(self.runs)
        if len(set(self.deltas)) == 1:
            bound = f"1 - {count} × {self.deltas[0]:g} = {self.joint:.3g}"
        else:
            bound = f"1 - ({' + '.join(f'{d:g}' for d in self.deltas)}) = {self.joint:.3g}"
        if count == 1:
            return (
                f"The experiment has one certificate ({self.runs[0]}): it holds with "
                f"probability >= {bound}, its own statement."
            )
        head = (
            f"The experiment's {count} certificates (its {count} shielded runs that tested an "
            f"allowance) all hold together with probability >= {bound}"
        )
        if self.joint >= 1.0 - self.target - 1e-12:
            return (
                f"{head} (Bonferroni: each run tested at {self.target:g} / {count}, "
                "`joint_certificates`)."
            )
        nothing = ", which promises nothing jointly" if self.joint <= 0 else ""
        return (
            f"{head} (Bonferroni){nothing}; a joint statement at 1 - {self.target:g} needs "
            f"`joint_certificates: true` in the workflow config (each run then tests at "
            f"{self.target:g} / {count} = {self.target / count:.3g})."
        )


def certificate_family(
    evaluation: pd.DataFrame, configs: Sequence[Mapping[str, Any]]
) -> CertificateFamily | None:
    """The experiment's certificate attempts: every run whose eval rows carry a certificate
    that tested an allowance (`cert_episodes` > 0), with the level it tested at (its config's
    `shield_credible_delta` / `certificate_family`; the certificate's `cert_delta` for a
    config without it). None when no run attempted one.
    """
    needed = {"env", "algo", "run", "certified", "cert_episodes", "cert_delta"}
    if evaluation.empty or not needed <= set(evaluation.columns):
        return None
    rows = evaluation[evaluation["certified"].notna()]
    by_run = {(str(c["env_name"]), str(c["algo"]), int(c["run_idx"])): c for c in configs}
    runs: list[str] = []
    deltas: list[float] = []
    targets: list[float] = []
    for (env, algo, run), group in rows.groupby(["env", "algo", "run"], sort=True):
        first = group.iloc[0]
        if pd.isna(first["cert_episodes"]) or int(first["cert_episodes"]) == 0:
            continue
        config = by_run.get((str(env), str(algo), int(run)), {})
        if "shield_credible_delta" in config:
            shared = int(config.get("algo_params", {}).get("certificate_family", 1))
            targets.append(float(config["shield_credible_delta"]))
            deltas.append(targets[-1] / shared)
        else:
            deltas.append(float(first["cert_delta"]))
            targets.append(deltas[-1])
        runs.append(f"{env}/{algo}/run{run}")
    if not runs:
        return None
    return CertificateFamily(runs=tuple(runs), deltas=tuple(deltas), target=max(targets))
