"""docs/results.md from a finished experiment: setup from the configs, table, every figure."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from src.analysis.aggregate import aggregate, load_table
from src.analysis.constraint import compare_policies, run_configs
from src.analysis.figures import FIGURE_NAMES, make_figures
from src.analysis.floor import Floor, write_floor
from src.analysis.results_doc import (
    FIGURE_GUIDE,
    RESULTS_FOLDER,
    _change,
    _code_path_line,
    _returns_across_runs,
    _returns_against_ippo,
    _shield_line,
    certificate_lines,
    comparison_sentence,
    experiment_dir,
    main,
    md_escape,
    passing_violations,
    return_ratio,
    shield_comparison,
    write_results_doc,
)
from src.analysis.tables import NO_FLOOR, make_summary
from src.containment import ContainmentError
from src.schemas import certificate_columns
from tests.analysis.synthetic import make_certificate, write_experiment


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results") / "results" / "demo"
    run_dirs = write_experiment(
        root, envs=("hazard_grid",), runs=2, eval_episodes=30, certified={0: True, 1: False}
    )
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    make_figures(root / "tables", root / "figures")
    return root


def test_every_figure_is_described() -> None:
    assert set(FIGURE_GUIDE) == set(FIGURE_NAMES)


def test_page_holds_setup_table_and_every_figure(experiment: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / RESULTS_FOLDER).mkdir(parents=True)
    (docs / RESULTS_FOLDER / "old_figure.png").write_bytes(b"stale")
    page = write_results_doc(experiment, docs)
    text = page.read_text()
    assert page == docs / "results.md"
    # The setup comes from the run configs in the tables.
    assert "envs `hazard_grid`; algorithms `ippo`, `ippo_lag`, `shield`; 2 run(s)" in text
    assert "`max_risk` = 0.1" in text and "30 episodes per final policy" in text
    # The summary table as make_summary wrote it.
    assert (experiment / "tables" / "summary.md").read_text().strip() in text
    for name in FIGURE_NAMES:
        copy = docs / RESULTS_FOLDER / f"{name}.png"
        assert copy.read_bytes() == (experiment / "figures" / f"{name}.png").read_bytes()
        heading, description = FIGURE_GUIDE[name]
        assert f"![{heading}]({RESULTS_FOLDER}/{name}.png)" in text and description in text
    assert not (docs / RESULTS_FOLDER / "old_figure.png").exists()


def test_command_line_finds_the_experiment_of_a_config(
    experiment: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"results_dir": str(experiment.parent), "experiment_tag": "demo"})
    )
    assert experiment_dir(config) == experiment
    main([str(config), str(tmp_path / "docs")])
    assert "wrote" in capsys.readouterr().out
    assert f"on `{config}`" in (tmp_path / "docs" / "results.md").read_text()


def test_missing_outputs_are_named(experiment: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run the workflow first"):
        write_results_doc(tmp_path, tmp_path / "docs")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "summary.md").write_text("| t |")
    # Which figures it must find is read from the tables.
    with pytest.raises(FileNotFoundError, match=r"history\.parquet"):
        write_results_doc(tmp_path, tmp_path / "docs")
    for table in (experiment / "tables").glob("*.parquet"):
        shutil.copy(table, tmp_path / "tables" / table.name)
    with pytest.raises(FileNotFoundError, match="lacks the figures"):
        write_results_doc(tmp_path, tmp_path / "docs")
    bad = tmp_path / "bad.yaml"
    bad.write_text("envs: [hazard_grid]\n")
    with pytest.raises(ValueError, match="results_dir and experiment_tag"):
        experiment_dir(bad)


def test_page_says_what_the_run_shows(experiment: Path, tmp_path: Path) -> None:
    text = write_results_doc(experiment, tmp_path / "docs").read_text()
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    section = text.split("## What this run shows", 1)[1].split("## Figures", 1)[0]
    # Every policy is listed with its pooled risk and its risk across runs at the constraint
    # horizon, in the summary's order: a listing, not a ranking.
    line = next(x for x in section.splitlines() if x.startswith("- `hazard_grid`"))
    assert line.startswith("- `hazard_grid`: P(violation within 100 steps) per policy, pooled")
    positions = [
        line.index(f"{md_escape(r.policy)} {r.p_violation_h100:.3f} [")
        for r in summary.itertuples()
    ]
    assert positions == sorted(positions)
    for r in summary.itertuples():
        assert f", across runs {r.p_violation_h100_runs:.3f} [" in line
    assert "lowest first" not in section and "not ranked" in section
    # The horizon beyond the constraint horizon is said to be beyond the constraint.
    assert "Evaluated horizons beyond the constraint horizon 100 (200) are beyond the" in section
    # Comparisons only from the paired test, every pair of the four policies.
    assert "exact McNemar test gives p = min(1, 2 P(Bin(b + c, 1/2) <= min(b, c)))" in section
    assert "(6 pairs on this page" in section
    pairs = [x for x in section.splitlines() if x.startswith("  - ")]
    assert len(pairs) == 6
    for pair in pairs:
        assert (" is safer than " in pair and "(McNemar p " in pair) or (
            " do not differ detectably (p " in pair
        ), pair
    assert "Evaluation return relative to ippo's" in section
    # The synthetic shields never arm (shield_patience beyond their updates).
    assert "the shield never armed" in section


def test_page_states_each_shield_runs_certificate(experiment: Path, tmp_path: Path) -> None:
    text = write_results_doc(experiment, tmp_path / "docs").read_text()
    section = text.split("## Certificates of the shields", 1)[1].split("## Figures", 1)[0]
    assert "fixed-sequence testing" in section
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert lines == [
        "- `hazard_grid`, `shield` run 0: certified: with the deployed allowance 0.02, 8 of "
        "200 calibration episodes violated within 100 steps (p = 0.0001 <= delta = 0.05), so "
        "the test certified P(violation within 100 steps) <= `max_risk` = 0.1 for this run, "
        "in the per-run sense stated above.",
        "- `hazard_grid`, `shield` run 1: no certificate: with the most cautious allowance "
        "0.02, 40 of 200 calibration episodes violated within 100 steps (p = 0.97 > delta = "
        "0.05); the shield deploys that allowance without a guarantee of `max_risk` = 0.1: on "
        "200 episodes a rung passes with at most 12 violating (0.060, 0.60 x `max_risk`), and "
        "its most cautious rung violated in 0.200 (2.00 x `max_risk`) of them.",
    ]
    # Each certificate is worded as the per-run, unconditional statement of its test, never as
    # holding given that the run was certified.
    assert (
        "Each run's certificate is a per-run, unconditional statement about its test: with "
        "probability >= 1 - delta over its calibration episodes, the test does not certify an "
        "allowance whose P(violation within H steps of an episode, reset seeds drawn like the "
        "calibration ones) exceeds `max_risk` (H = the constraint horizon, delta = the level it "
        "tested at, `shield_credible_delta` / `certificate_family` from the run's config)."
    ) in section
    assert "holds with confidence" not in text and "A certified run's deployed policy" not in text
    # Both runs tested an allowance at delta 0.05: together at least 1 - 2 x 0.05 = 0.9.
    assert (
        "The experiment's 2 certificates (its 2 shielded runs that tested an allowance) all "
        "hold together with probability >= 1 - 2 × 0.05 = 0.9 (Bonferroni); a joint statement "
        "at 1 - 0.05 needs `joint_certificates: true` in the workflow config (each run then "
        "tests at 0.05 / 2 = 0.025)."
    ) in section
    # The section comes after what the run shows and before the figures.
    assert text.index("## What this run shows") < text.index("## Certificates of the shields")


def test_the_count_a_rung_passes_with_is_the_certificates_own_test() -> None:
    # docs/design.md, section 6.3: 12 of 200 and 83 of 1000 at max_risk 0.1; 4 of 200 and 37
    # of 1000 at 0.05; one episode passes with none.
    passing = [
        passing_violations(n, max_risk=risk, delta=0.05)
        for n, risk in ((200, 0.1), (1000, 0.1), (200, 0.05), (1000, 0.05), (1, 0.05))
    ]
    assert passing == [12, 83, 4, 37, -1]


def _eval_rows(run: int, certificate: dict | None) -> list[dict]:
    base = {"env": "spread", "algo": "shield", "run": run, "horizon": 100}
    return [{**base, "shielded": mode, **certificate_columns(certificate)} for mode in (1, 0)]


def test_certificate_lines_of_untested_and_uncertified_runs() -> None:
    evaluation = pd.DataFrame(
        _eval_rows(0, make_certificate(0, certified=False, episodes=0))
        + _eval_rows(1, None)  # a run without a certificate: no line
    )
    assert certificate_lines(evaluation, []) == [
        "- `spread`, `shield` run 0: no certificate (not tested: the shield ran no calibration "
        "episodes); it deploys the allowance 0.02 that training ended with."
    ]
    assert certificate_lines(pd.DataFrame(_eval_rows(1, None)), []) == []
    # Tables from before the certificate columns: nothing to state.
    assert certificate_lines(pd.DataFrame([{"env": "spread", "run": 0}]), []) == []


def test_page_without_certificates_has_no_certificate_section(tmp_path: Path) -> None:
    root = tmp_path / "results" / "plain"
    run_dirs = write_experiment(root, envs=("hazard_grid",), algos=("ippo",), runs=1)
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    make_figures(root / "tables", root / "figures")
    text = write_results_doc(root, tmp_path / "docs").read_text()
    assert "## Certificates" not in text and "## Figures" in text


def test_an_experiment_without_ippo_lag_has_no_multiplier_figure_and_says_so(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results" / "unconstrained"
    run_dirs = write_experiment(root, envs=("hazard_grid",), algos=("ippo", "shield"), runs=1)
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    paths = make_figures(root / "tables", root / "figures")
    assert "lagrange_multiplier" not in {path.stem for path in paths}
    assert not list((root / "figures").glob("lagrange_multiplier.*"))
    docs = tmp_path / "docs"
    (docs / RESULTS_FOLDER).mkdir(parents=True)
    (docs / RESULTS_FOLDER / "lagrange_multiplier.png").write_bytes(b"an earlier page's")
    text = write_results_doc(root, docs).read_text()
    heading, description = FIGURE_GUIDE["lagrange_multiplier"]
    (line,) = [ln for ln in text.splitlines() if ln.startswith("Not drawn")]
    assert line == (
        f"Not drawn, for want of data: *{heading}* (no run logs a Lagrange multiplier "
        "(safety/lambda): no algorithm of the experiment learns one)."
    )
    assert f"### {heading}" not in text and description not in text
    assert not (docs / RESULTS_FOLDER / "lagrange_multiplier.png").exists()
    for name in set(FIGURE_NAMES) - {"lagrange_multiplier"}:
        assert f"({RESULTS_FOLDER}/{name}.png)" in text
        assert (docs / RESULTS_FOLDER / f"{name}.png").is_file()

    # A figure the tables have data for is still required.
    (root / "figures" / "shield_interventions.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks the figures \['shield_interventions'\]"):
        write_results_doc(root, docs)


def _benchmark(run_dir: Path, stage: str, cpu: float) -> None:
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    (logs / f"{stage}.benchmark.tsv").write_text(f"s\tcpu_time\n{2 * cpu}\t{cpu}\n")


def test_shields_compared_side_by_side_with_their_cost(tmp_path: Path) -> None:
    root = tmp_path / "results" / "two"
    run_dirs = write_experiment(
        root, envs=("hazard_grid",), algos=("ippo", "shield", "shield_dec"), runs=2
    )
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    make_figures(root / "tables", root / "figures")
    runs = {(d.parent.name, d.name): d for d in run_dirs}
    _benchmark(runs["shield", "run0"], "train", 40.0)
    _benchmark(runs["shield", "run1"], "train", 50.0)
    _benchmark(runs["shield_dec", "run0"], "train", 30.0)  # run 1 without one: mean of run 0
    _benchmark(runs["shield_dec", "run1"], "evaluate", 7.0)
    configs = run_configs(load_table(root / "tables", "history"))
    table = shield_comparison(root, configs)
    summary = pd.read_csv(root / "tables" / "summary.csv").set_index("policy")
    rows = [line.split(" | ") for line in table[2:]]
    assert [(r[1], r[2]) for r in rows] == [
        ("shield", "central"),
        ("shield\\_dec", "decentralised"),
    ]
    # The synthetic runs log no AUC.
    assert [r[3] for r in rows] == ["–"] * 2
    for row, algo in zip(rows, ("shield", "shield_dec"), strict=True):
        p = summary.loc[algo, "p_violation_h100"]
        assert row[4].startswith(f"{p:.3f} [")
        ratio = summary.loc[algo, "eval_return_mean"] / summary.loc["ippo", "eval_return_mean"]
        assert row[6] == f"{ratio:.2f}x"  # both returns positive: their ratio
    # CPU seconds: means over the runs that have a benchmark file; filter seconds: the
    # synthetic updates log 0.25 (run 0) and 0.5 (run 1) s per update, 12 updates.
    assert rows[0][8:] == ["45", "4", "– |"]
    assert rows[1][8:] == ["30", "4", "7 |"]
    # With a single shielded algorithm there is nothing to compare.
    assert shield_comparison(root, [c for c in configs if c["algo"] != "shield_dec"]) == []
    page = write_results_doc(root, tmp_path / "docs").read_text()
    assert "## Shields compared" in page and "\n".join(table) in page


def test_shield_comparison_reads_no_benchmark_file_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "results" / "linked"
    run_dirs = write_experiment(root, envs=("hazard_grid",), algos=("shield", "shield_dec"), runs=1)
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    outside = tmp_path / "elsewhere.tsv"
    outside.write_text("s\tcpu_time\n1\t1\n")
    (run_dirs[0] / "logs").mkdir(exist_ok=True)
    (run_dirs[0] / "logs" / "train.benchmark.tsv").symlink_to(outside)
    with pytest.raises(ContainmentError, match="link"):
        shield_comparison(root, run_configs(load_table(root / "tables", "history")))


def test_the_coordination_is_the_one_the_run_recorded() -> None:
    """Who decides is read from the shield section the run recorded, whoever set it: the
    algorithm (shield_dec fixes it), its algo_params, or the section's default; so an
    algorithm the registry does not know is right too."""
    from src.analysis.results_doc import _coordination
    from src.config.run import RunConfig, make_run_config

    def recorded(algo: str, **params: str) -> dict:
        return RunConfig.from_dict(make_run_config(algo=algo, algo_params=params)).to_dict()

    assert _coordination(recorded("shield")) == "central"
    assert _coordination(recorded("shield", coordination="decentralised")) == "decentralised"
    assert _coordination(recorded("shield_dec")) == "decentralised"
    # An algorithm whose shield decides decentralised by default, unknown to this registry:
    # its algo_params are empty, its recorded section says it.
    unregistered = {**recorded("shield_dec"), "algo": "my_shield"}
    assert unregistered["algo_params"] == {}
    assert _coordination(unregistered) == "decentralised"
    assert _coordination(recorded("ippo")) == "–"


def test_the_auc_cell_is_the_mean_over_runs_of_their_last_auc() -> None:
    from src.algos.metrics import SHIELD_AUC_TEAM
    from src.analysis.results_doc import _auc

    nan = float("nan")
    updates = pd.DataFrame(
        {
            "run": [0, 0, 1, 1, 2, 2],
            "update": [1, 2, 1, 2, 1, 2],
            SHIELD_AUC_TEAM: [0.5, 0.6, 0.7, 0.8, nan, nan],  # run 2: never scored
        }
    )
    assert _auc(updates) == "0.70"
    assert _auc(updates.iloc[:0]) == "–"
    assert _auc(updates.drop(columns=[SHIELD_AUC_TEAM])) == "–"


def test_the_setup_names_the_code_path_the_runs_trained_on() -> None:
    """One entry per distinct fingerprint of the runs' recorded kernels; a mix is flagged and a
    run that recorded none reads `unrecorded`."""
    pinned = {
        "fingerprint": "0fef11f9e267a361",
        "MKL_CBWR": "COMPATIBLE",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "openblas_core": "Haswell",
    }
    same = _code_path_line([{"kernels": pinned}, {"kernels": dict(pinned)}])
    assert same.startswith(
        "- code path: `0fef11f9e267a361` (MKL_CBWR=COMPATIBLE, ATEN_CPU_CAPABILITY=avx2, "
        "ONEDNN_MAX_CPU_ISA=AVX2, openblas_core=Haswell); a machine reproduces"
    )
    mixed = _code_path_line([{"kernels": pinned}, {"git_commit": "abc"}])
    assert "`unrecorded`" in mixed and "the runs differ" in mixed


def test_returns_are_compared_with_ippos_by_difference_when_not_all_positive() -> None:
    """A shield at -49.6 against ippo at -24.8 is 24.8 worse, not "2.00x"; positive returns
    keep their ratio."""
    assert return_ratio(92.8, 97.7) == "0.95x"
    assert return_ratio(-49.6, -24.8) == "-24.8"
    assert return_ratio(10.0, -5.0) == "+15.0"
    negative = _returns_against_ippo([("shield", -49.6), ("ippo_lag", -20.0)], -24.8)
    assert negative.startswith("Evaluation return minus ippo's (-24.8): shield -24.8, ")
    assert "ippo_lag +4.8" in negative and "x" not in negative.split("(")[1]
    positive = _returns_against_ippo([("shield", 92.8)], 97.7)
    assert positive == "Evaluation return relative to ippo's: shield 0.95x."


def test_returns_are_shown_with_their_interval_across_runs() -> None:
    rows = pd.DataFrame(
        {
            "policy": ["ippo", "shield"],
            "eval_return_mean": [125.0, 110.1],
            "eval_return_low": [124.2, 91.2],
            "eval_return_high": [125.4, 129.0],
        }
    )
    rows.loc[2] = ["ippo_lag", 50.0, float("nan"), float("nan")]  # one run: no interval
    assert _returns_across_runs(rows).endswith(
        ": ippo 125 [124, 125], shield 110 [91.2, 129], ippo\\_lag 50."
    )


def test_interventions_that_rise_are_not_said_to_fall() -> None:
    assert _change(1341.2, 1388.9) == (
        "rise from 1,341 (first three armed updates) to 1,389 (last three)"
    )
    assert _change(476.0, 165.0).startswith("fall from 476 ")
    assert _change(12.2, 11.9) == "stay at 12 (first three armed updates and last three)"


def test_a_shield_that_never_armed_is_said_so() -> None:
    """With shield_patience >= the run's updates no training episode starts armed: the page
    says the shield never armed instead of an empty list."""
    config = {"algo": "shield", "shield_patience": 8, "num_envs": 4, "rollouts": 16}
    history = pd.DataFrame(
        {"env": "hazard_grid", "algo": "shield", "t_start": [0, 100, 400], "violated": False}
    )
    updates = pd.DataFrame(columns=["env", "algo", "global_step", "update"])
    line = _shield_line("hazard_grid", history, updates, [config])
    assert line.startswith("no training episode starts after env step 512, where the shield")
    assert "never armed" in line and "violating: ." not in line


def test_a_task_without_a_floor_is_said_to_have_none(tmp_path: Path) -> None:
    """A task the careful team does not play (here `spread`) gets a sentence saying why its
    floor is missing, not a silent gap."""
    root = tmp_path / "results" / "nofloor"
    run_dirs = write_experiment(root, envs=("spread",), algos=("ippo",), runs=1, eval_episodes=30)
    aggregate(run_dirs, root / "tables")
    floor = Floor(
        env="spread",
        horizon=100,
        first_seed=1_000_000,
        episodes=30,
        confidence=0.95,
        method="none",
        violations=0,
        p_violation=math.nan,
        p_upper=math.nan,
        goals=math.nan,
        greedy_p_violation=math.nan,
        greedy_goals=math.nan,
    )
    write_floor(floor, tmp_path / "spread.floor.json")
    make_summary(root / "tables", floors=[tmp_path / "spread.floor.json"])
    make_figures(root / "tables", root / "figures")
    text = write_results_doc(root, tmp_path / "docs").read_text()
    assert f"  Risk floor: {NO_FLOOR}, so whether `max_risk` = " in text


def test_the_code_path_line_writes_no_markup_from_a_run_folder() -> None:
    """Recorded kernel settings that are not plain tokens (a run folder may come from anyone)
    read `unrecognised` on the page."""
    planted = {"fingerprint": "<img src=x>", "MKL_CBWR": "[a](http://x)"}
    line = _code_path_line([{"kernels": planted}])
    assert "<img" not in line and "](" not in line
    assert line.startswith("- code path: `unrecognised` (MKL_CBWR=unrecognised, ")


def _three_policies() -> list:
    """One run of 20 episodes of the shield (violating in none), its base policy (in episodes
    0..9) and `zeta` (in 18 and 19), compared pair by pair."""
    rows = [
        {
            "env": "grid",
            "algo": algo,
            "run": 0,
            "shielded": shielded,
            "horizon": 100,
            "n": 20,
            "violations": len(episodes),
            "confidence": 0.95,
            "violating_episodes": episodes,
        }
        for algo, shielded, episodes in (
            ("shield", True, []),
            ("shield", False, list(range(10))),
            ("zeta", False, [18, 19]),
        )
    ]
    configs = [
        {
            "env_name": "grid",
            "algo": algo,
            "run_idx": 0,
            "constraint_horizon": 100,
            "final_policy_eval_seed_offset": 1000,
        }
        for algo in ("shield", "zeta")
    ]
    return compare_policies(pd.DataFrame(rows), configs, {"grid": 100})


def test_the_page_says_safer_only_when_the_holm_adjusted_mcnemar_test_does() -> None:
    """Pairs (b, c): shield against its base (0, 10): p = 2 / 2^10, Holm x 3 = 0.00586;
    the base against zeta (10, 2): p = 2 (1 + 12 + 66) / 2^12 = 0.0386, Holm x 2 = 0.0771 >
    0.05, so no difference is claimed although the unadjusted p is below 0.05."""
    names = {
        ("shield", True): "shield",
        ("shield", False): "shield (shield off)",
        ("zeta", False): "zeta",
    }
    sentences = [comparison_sentence(c, alpha=0.05, names=names) for c in _three_policies()]
    assert sentences[0] == (
        "shield is safer than shield (shield off) (McNemar p = 0.00586, Holm-adjusted; "
        "episodes where only one violated: shield 0, shield (shield off) 10)"
    )
    assert sentences[2] == (
        "shield (shield off) and zeta do not differ detectably (p = 0.0771, Holm-adjusted; "
        "episodes where only one violated: shield (shield off) 10, zeta 2)"
    )
    assert sentences[1].startswith("shield and zeta do not differ detectably (p = 0.5, ")


def test_a_named_page_carries_its_figures_and_the_tables_it_was_made_from(
    experiment: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    page = write_results_doc(experiment, docs, config_file="config/paper.yaml", name="paper")
    text = page.read_text()
    assert page == docs / "paper.md" and not (docs / "results.md").exists()
    assert "`make paper` runs the workflow" in text and "`config/paper.yaml`" in text
    for table in ("summary.csv", "eval.parquet"):
        copy = docs / "paper" / table
        assert copy.read_bytes() == (experiment / "tables" / table).read_bytes()
        assert f"[`{table}`](paper/{table})" in text
    heading = FIGURE_GUIDE["violation_vs_horizon"][0]
    assert f"![{heading}](paper/violation_vs_horizon.png)" in text
    with pytest.raises(ValueError, match=r"page name '\.\./x'"):
        write_results_doc(experiment, docs, name="../x")
