"""The summary table: per-run metrics, across-run intervals, CSV/Markdown/LaTeX output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from src.analysis.aggregate import aggregate
from src.analysis.tables import (
    final_training_metrics,
    make_summary,
    mean_interval,
    summary_frame,
    summary_markdown,
)
from src.schemas import certificate_columns
from src.stats import clopper_pearson_interval
from tests.analysis.synthetic import HORIZONS, make_certificate, write_experiment


def test_mean_interval_known_values() -> None:
    # [1, 2, 3]: mean 2, sd 1, t_{0.975, 2} = 4.302653 -> half-width 4.302653 / sqrt(3).
    mean, low, high = mean_interval(np.array([1.0, 2.0, 3.0]))
    assert mean == 2.0
    assert high - mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean - low == pytest.approx(high - mean)
    mean, low, high = mean_interval(np.array([5.0]))
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(x) for x in mean_interval(np.array([])))


def history_rows(run: int, returns: list[float], algo: str = "ippo") -> list[dict]:
    return [
        {
            "env": "e",
            "algo": algo,
            "run": run,
            "episode": i,
            "t_end": 10 * (i + 1),
            "team_return": r,
            "cost": 0.0,
        }
        for i, r in enumerate(returns)
    ]


def test_final_training_metrics_use_the_last_tenth_of_episodes() -> None:
    returns = list(range(20))  # the last 10% are episodes 18 and 19
    frame = final_training_metrics(pd.DataFrame(history_rows(0, returns)))
    assert frame.loc[0, "train_return"] == pytest.approx(18.5)
    short = final_training_metrics(pd.DataFrame(history_rows(0, [3.0, 7.0])))
    assert short.loc[0, "train_return"] == 7.0  # at least one episode


def eval_rows(run: int, algo: str, shielded: bool, k: dict[int, int], n: int = 100) -> list[dict]:
    return [
        {
            "env": "e",
            "algo": algo,
            "run": run,
            "shielded": shielded,
            "horizon": h,
            "n": n,
            "violations": v,
            "p_violation": v / n,
            "confidence": 0.95,
            "mean_return": 10.0 * h,
            "mean_cost": v / n,
        }
        for h, v in k.items()
    ]


def test_summary_frame_hand_checked() -> None:
    history = pd.DataFrame(
        history_rows(0, [1.0] * 10)
        + history_rows(1, [3.0] * 10)
        + history_rows(0, [5.0] * 10, algo="shield")
    )
    evaluation = pd.DataFrame(
        eval_rows(0, "ippo", False, {1: 10, 5: 20})
        + eval_rows(1, "ippo", False, {1: 30, 5: 40})
        + eval_rows(0, "shield", True, {1: 0, 5: 2})  # upper end 0.07
        + eval_rows(0, "shield", False, {1: 20, 5: 50})
    )
    max_risk = pd.DataFrame(
        {"env": "e", "algo": ["ippo", "ippo", "shield"], "run": [0, 1, 0], "max_risk": 0.1}
    )
    frame = summary_frame(history, evaluation, max_risk=max_risk, horizons={"e": 5})
    assert frame[["algo", "shielded", "policy", "runs"]].values.tolist() == [
        ["ippo", False, "ippo", 2],
        ["shield", True, "shield", 1],
        ["shield", False, "shield (shield off)", 1],
    ]
    ippo = frame.iloc[0]
    assert ippo["train_return_mean"] == 2.0
    assert ippo["eval_return_mean"] == 50.0  # mean return at the largest horizon
    # Pooled over the two runs: 40 of 200 at H = 1, 60 of 200 at H = 5, with the
    # Clopper-Pearson interval of the sums (a t-interval across the runs' 0.1 and 0.3 would
    # be 0.2 +- 1.27).
    assert (ippo["violations_h1"], ippo["eval_episodes"]) == (40, 200)
    assert ippo["p_violation_h1"] == pytest.approx(0.2)
    assert ippo["p_violation_h5"] == pytest.approx(0.3)
    low, high = (float(b) for b in clopper_pearson_interval(k=40, n=200, confidence=0.95))
    assert (ippo["p_violation_h1_low"], ippo["p_violation_h1_high"]) == pytest.approx((low, high))
    # The verdict is taken at the env's constraint horizon, here H = 5.
    assert frame["constraint_horizon"].tolist() == [5, 5, 5]
    assert frame["constraint"].tolist() == ["not met", "met", "not met"]
    shield_off = frame.iloc[2]
    assert math.isnan(shield_off["train_return_mean"])  # trained shielded: no own training
    assert shield_off["p_violation_h5"] == 0.5


@pytest.mark.parametrize(
    ("k", "max_risk", "verdict"),
    [
        (0, 0.05, "met"),  # 0 of 100: upper end 0.036
        (3, 0.05, "point"),  # 3 of 100: 0.03, upper end 0.085
        (8, 0.05, "not met"),
        (5, 0.05, "point"),  # the estimate equal to max_risk still meets it
    ],
)
def test_verdict_of_one_run_compares_its_exact_interval_with_max_risk(
    k: int, max_risk: float, verdict: str
) -> None:
    history = pd.DataFrame(history_rows(0, [1.0, 2.0]))
    evaluation = pd.DataFrame(eval_rows(0, "ippo", False, {50: k, 100: k, 200: 100}))
    bounds = pd.DataFrame({"env": ["e"], "algo": ["ippo"], "run": [0], "max_risk": [max_risk]})
    frame = summary_frame(history, evaluation, max_risk=bounds, horizons={"e": 100})
    assert frame.loc[0, "constraint_horizon"] == 100  # not 200, where every episode violates
    assert frame.loc[0, "constraint"] == verdict
    assert frame.loc[0, "max_risk"] == max_risk
    # Without max_risk there is no verdict.
    assert summary_frame(history, evaluation, horizons={"e": 100}).loc[0, "constraint"] == ""


def test_summary_without_evaluation_keeps_training_columns() -> None:
    history = pd.DataFrame(history_rows(0, [1.0, 2.0]))
    evaluation = pd.DataFrame(
        columns=[
            "env",
            "algo",
            "run",
            "shielded",
            "horizon",
            "p_violation",
            "mean_return",
            "mean_cost",
        ]
    )
    frame = summary_frame(history, evaluation)
    assert frame["train_return_mean"].tolist() == [2.0]
    assert not any(c.startswith("p_violation") for c in frame.columns)


def test_summary_of_empty_history_is_an_error() -> None:
    with pytest.raises(ValueError, match="history table is empty"):
        summary_frame(pd.DataFrame(history_rows(0, [])), pd.DataFrame())


def test_make_summary_writes_csv_markdown_and_latex(tmp_path: Path) -> None:
    run_dirs = write_experiment(tmp_path, envs=("hazard_grid",), runs=2, eval_episodes=40)
    aggregate(run_dirs, tmp_path / "tables")
    make_summary(tmp_path / "tables")
    csv = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert len(csv) == 4  # ippo, ippo_lag, shield on, shield off
    assert {f"p_violation_h{h}{part}" for h in HORIZONS for part in ("", "_low", "_high")} <= set(
        csv.columns
    )
    assert csv["eval_episodes"].tolist() == [80] * 4  # two runs of 40 episodes, pooled
    assert csv["max_risk"].tolist() == [0.1] * 4  # from the run configs
    assert set(csv["constraint"]) <= {"met", "point", "not met"}
    markdown = (tmp_path / "tables" / "summary.md").read_text()
    assert markdown.count("\n| hazard_grid |") == 4
    assert "P(viol. ≤ 200)" in markdown and "| constraint |" in markdown
    assert "Clopper-Pearson" in markdown and "hazard_grid: H = 100" in markdown
    assert "| max_risk | H | constraint | P(viol. ≤ H) across runs (per run) |" in markdown
    assert "P(viol. ≤ 200)† |" in markdown  # beyond the constraint horizon
    assert "†: beyond the constraint horizon H (beyond the constraint)" in markdown
    latex = (tmp_path / "tables" / "summary.tex").read_text()
    assert "\\begin{tabular}" in latex and "hazard\\_grid" in latex
    assert latex.count("\\\\") == 5  # header and four rows


def test_make_summary_without_tables_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"history\.parquet"):
        make_summary(tmp_path)


def certificate_rows(rows: list[dict], certificate: dict | None) -> list[dict]:
    """`rows` with the eval columns of a certificate dict (None: a run without one)."""
    return [{**row, **certificate_columns(certificate)} for row in rows]


def test_certificate_column_counts_the_certified_runs() -> None:
    history = pd.DataFrame(
        history_rows(0, [1.0] * 10)
        + history_rows(0, [5.0] * 10, algo="shield")
        + history_rows(1, [5.0] * 10, algo="shield")
    )
    evaluation = pd.DataFrame(
        certificate_rows(eval_rows(0, "ippo", False, {1: 1, 100: 5}), None)
        + certificate_rows(
            eval_rows(0, "shield", True, {1: 0, 100: 2})
            + eval_rows(0, "shield", False, {1: 2, 100: 9}),
            make_certificate(0, certified=True),
        )
        + certificate_rows(
            eval_rows(1, "shield", True, {1: 0, 100: 3})
            + eval_rows(1, "shield", False, {1: 2, 100: 9}),
            make_certificate(1, certified=False),
        )
    )
    max_risk = pd.DataFrame(
        {"env": "e", "algo": ["ippo", "shield", "shield"], "run": [0, 0, 1], "max_risk": 0.1}
    )
    frame = summary_frame(history, evaluation, max_risk=max_risk, horizons={"e": 100})
    frame = frame.set_index("policy")
    assert frame.loc["shield", "certificate"] == (
        "1/2 runs certified (each its own test: ≤ 0.1 at delta = 0.05; run 1: no certificate)"
    )
    assert frame.loc["shield", "certified_runs"] == 1 and frame.loc["shield", "runs"] == 2
    # Only the deployed policy of a shielded algorithm is certified, never ippo or the base.
    for policy in ("ippo", "shield (shield off)"):
        assert frame.loc[policy, "certificate"] == ""
        assert math.isnan(frame.loc[policy, "certified_runs"])
    markdown = summary_markdown(frame.reset_index())
    header = markdown.splitlines()[0]
    assert "| constraint | P(viol. ≤ H) across runs (per run) | certificate |" in header
    assert "| 1/2 runs certified (each its own test: ≤ 0.1 at delta = 0.05; run 1: no " in markdown
    assert "a count, not a joint claim" in markdown
    # The per-run statement, unconditional, never "holds given that the run was certified".
    assert (
        "Each run's certificate is a per-run, unconditional statement: with probability >= "
        "1 - delta over its calibration episodes, the test does not certify an allowance whose "
        "P(violation within H steps of an episode, reset seeds drawn like the calibration "
        "ones) exceeds max_risk"
    ) in markdown


def test_certificate_column_names_untested_and_missing_runs() -> None:
    history = pd.DataFrame(
        history_rows(0, [5.0] * 10, algo="shield")
        + history_rows(1, [5.0] * 10, algo="shield")
        + history_rows(2, [5.0] * 10, algo="shield")
    )
    evaluation = pd.DataFrame(
        certificate_rows(
            eval_rows(0, "shield", True, {100: 0}), make_certificate(0, certified=True)
        )
        + certificate_rows(
            eval_rows(1, "shield", True, {100: 0}),
            make_certificate(1, certified=False, episodes=0, delta=0.1),
        )
        # A run from before the certificate (eval table without the columns): null.
        + certificate_rows(eval_rows(2, "shield", True, {100: 0}), None)
    )
    frame = summary_frame(history, evaluation, horizons={"e": 100})
    # Without max_risk the bound is named; the delta is the largest of the runs (0.1).
    assert frame.loc[0, "certificate"] == (
        "1/3 runs certified (each its own test: ≤ max_risk at delta = 0.1; run 1: not tested; "
        "run 2: no certificate)"
    )
    assert frame.loc[0, "certified_runs"] == 1


def test_summary_without_certificates_has_no_certificate_cells() -> None:
    history = pd.DataFrame(history_rows(0, [1.0] * 10, algo="shield"))
    evaluation = pd.DataFrame(eval_rows(0, "shield", True, {100: 1}))  # no cert_* columns
    frame = summary_frame(history, evaluation, horizons={"e": 100})
    assert frame["certificate"].tolist() == [""]
    assert "certificate" not in summary_markdown(frame).splitlines()[0]


def test_make_summary_states_the_certificates(tmp_path: Path) -> None:
    run_dirs = write_experiment(
        tmp_path, envs=("hazard_grid",), runs=2, eval_episodes=20, certified={0: True, 1: True}
    )
    aggregate(run_dirs, tmp_path / "tables")
    make_summary(tmp_path / "tables")
    csv = pd.read_csv(tmp_path / "tables" / "summary.csv").set_index("policy")
    assert csv.loc["shield", "certified_runs"] == 2 and csv.loc["shield", "runs"] == 2
    cell = "2/2 runs certified (each its own test: ≤ 0.1 at delta = 0.05)"
    assert csv.loc["shield", "certificate"] == cell
    assert csv[["certified_runs", "certificate"]].drop(index="shield").isna().all().all()
    markdown = (tmp_path / "tables" / "summary.md").read_text()
    assert f"| {cell} |" in markdown
    # The two certificates together, from the configs' shield_credible_delta (0.05 each).
    assert "all hold together with probability >= 1 - 2 × 0.05 = 0.9 (Bonferroni)" in markdown
    assert "`joint_certificates: true` in the workflow config (each run then tests at 0.05 / 2" in (
        markdown
    )
    latex = (tmp_path / "tables" / "summary.tex").read_text()
    assert "2/2 runs certified (each its own test: $\\leq$ 0.1 at delta = 0.05)" in latex


@pytest.mark.parametrize(("horizon", "verdict"), [(200, "not met"), (100, "met")])
def test_the_verdict_is_taken_exactly_at_the_constraint_horizon(horizon: int, verdict: str) -> None:
    """Horizons [1, 10, 50, 100, 200], one run of 100 episodes: none violates within 100
    steps (upper end 1 - 0.025 ** (1 / 100) = 0.036 <= 0.05), all within 200. The verdict
    follows the constraint horizon of the configs; the horizon beyond it is marked."""
    history = pd.DataFrame(history_rows(0, [1.0, 2.0]))
    evaluation = pd.DataFrame(eval_rows(0, "ippo", False, {1: 0, 10: 0, 50: 0, 100: 0, 200: 100}))
    bounds = pd.DataFrame({"env": ["e"], "algo": ["ippo"], "run": [0], "max_risk": [0.05]})
    frame = summary_frame(history, evaluation, max_risk=bounds, horizons={"e": horizon})
    assert frame.loc[0, "constraint_horizon"] == horizon
    assert frame.loc[0, "constraint"] == verdict
    header = summary_markdown(frame).splitlines()[0]
    assert ("P(viol. ≤ 200)†" in header) == (horizon == 100)
    assert "P(viol. ≤ 100)†" not in header


def test_an_evaluation_without_the_constraint_horizon_is_refused() -> None:
    history = pd.DataFrame(history_rows(0, [1.0, 2.0]))
    evaluation = pd.DataFrame(eval_rows(0, "ippo", False, {1: 0, 10: 0, 50: 0, 100: 0, 200: 9}))
    with pytest.raises(ValueError, match=r"env e: the evaluation lacks the constraint horizon"):
        summary_frame(history, evaluation, horizons={"e": 150})
    with pytest.raises(ValueError, match="constraint horizon of every env is needed"):
        summary_frame(history, evaluation)


def test_met_is_decided_on_the_interval_across_runs() -> None:
    """Two runs with 4 and 12 of 200 violating within 100 steps: pooled, 16 of 400 has the
    upper end 0.064 <= 0.1, but the runs' rates 0.02 and 0.06 have mean 0.04 and, with
    t(0.975, 1) = 12.7062 and sd / sqrt(2) = 0.02, the interval [0.04 - 0.2541, 0.04 + 0.2541]
    = [0, 0.2941] across runs: only the mean meets max_risk, "point"."""
    history = pd.DataFrame(history_rows(0, [1.0]) + history_rows(1, [1.0]))
    evaluation = pd.DataFrame(
        eval_rows(0, "ippo", False, {100: 4}, n=200) + eval_rows(1, "ippo", False, {100: 12}, n=200)
    )
    bounds = pd.DataFrame({"env": "e", "algo": "ippo", "run": [0, 1], "max_risk": 0.1})
    row = summary_frame(history, evaluation, max_risk=bounds, horizons={"e": 100}).iloc[0]
    assert row["p_violation_h100"] == pytest.approx(0.04)
    assert row["p_violation_h100_high"] < 0.1  # the pooled interval alone would say "met"
    half = 12.706204736174705 * 0.02
    assert row["p_violation_h100_runs"] == pytest.approx(0.04)
    assert row["p_violation_h100_runs_low"] == 0.0
    assert row["p_violation_h100_runs_high"] == pytest.approx(0.04 + half)
    assert row["constraint"] == "point"
    assert (row["run_ids"], row["run_p_violation"]) == ("[0, 1]", "[0.02, 0.06]")
    markdown = summary_markdown(pd.DataFrame([row]))
    assert "| point | 0.04 [0, 0.294] (0.02, 0.06) |" in markdown
    assert "met = the upper end of the interval across runs ≤ max_risk" in markdown


def test_runs_that_disagree_on_the_constraint_horizon_are_refused(tmp_path: Path) -> None:
    run_dirs = write_experiment(tmp_path, envs=("hazard_grid",), algos=("ippo",), runs=2)
    config = json.loads((run_dirs[1] / "config.json").read_text())
    (run_dirs[1] / "config.json").write_text(json.dumps({**config, "constraint_horizon": 200}))
    aggregate(run_dirs, tmp_path / "tables")
    with pytest.raises(ValueError, match=r"env hazard_grid: its runs disagree on the constraint"):
        make_summary(tmp_path / "tables")
