"""The grid's measured cost: benchmark files read inside the results folder, the wall time
without pauses, the comparison with the estimate and the resources set from the peaks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.grid_measured import (
    busy_hours,
    estimate,
    job_records,
    render_markdown,
    scheduled_hours,
    summarise,
)
from src.containment import ContainmentError

CONFIG = {
    "envs": ["hazard_grid"],
    "algos": ["ippo", "shield"],
    "num_runs": 2,
    "resources": {"train": {"runtime": 60, "mem_mb": 2000}},
}
HEAD = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write_job(
    folder: Path,
    algo: str,
    run: int,
    stage: str,
    *,
    wall: float,
    cpu: float,
    rss: float,
    ended: float,
) -> Path:
    path = folder / "runs" / "hazard_grid" / algo / f"run{run}" / "logs" / f"{stage}.benchmark.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEAD + f"{wall}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t90\t{cpu}\n")
    os.utime(path, (ended, ended))
    return path


def write_resumed_log(folder: Path, run: int, after: int, of: int) -> Path:
    """ippo run `run`'s training log of an attempt that resumed after update `after` of `of`."""
    path = folder / "runs" / "hazard_grid" / "ippo" / f"run{run}" / "logs" / "train.log"
    path.write_text(
        "1970-01-01T02:00:00.000Z INFO     [train] resumed results/paper/runs/x from its "
        f"checkpoint after update {after} of {of} (checkpoint/update-{after:06d})\n"
    )
    return path


def test_records_sums_and_resources_of_a_partly_run_grid(tmp_path: Path) -> None:
    write_job(tmp_path, "ippo", 0, "train", wall=100, cpu=90, rss=400, ended=1000)
    write_job(tmp_path, "ippo", 0, "evaluate", wall=10, cpu=9, rss=500, ended=1010)
    write_job(tmp_path, "ippo", 1, "train", wall=120, cpu=108, rss=410, ended=1100)
    # Paused or sharing a core: its wall time is twice its CPU time.
    write_job(tmp_path, "shield", 0, "train", wall=720, cpu=360, rss=900, ended=5000)
    records = job_records(tmp_path, CONFIG)
    assert len(records) == 4
    estimated = {("hazard_grid", "ippo"): {"train_h": 0.01, "evaluate_h": 0.01}}
    summary = summarise(records, CONFIG, estimated)
    ippo, shield = summary["pairs"]
    # Run 0 alone has both jobs: its 99 CPU-s per run against the estimate's 72.
    assert ippo["runs"] == 1 and ippo["cpu_hours"] == pytest.approx(207 / 3600)
    assert ippo["per_run_hours"] == pytest.approx(99 / 3600)
    assert ippo["ratio"] == pytest.approx(99 / 72) and ippo["off"]
    assert shield["runs"] == 0 and shield["ratio"] is None and not shield["off"]
    # Training CPU per job against ippo's: 360 s against the mean of 90 s and 108 s.
    assert shield["train_vs_ippo"] == pytest.approx(360 / 99) and ippo["train_vs_ippo"] == 1
    train = summary["rules"][0]  # its longest job by CPU time, what it takes on a core alone
    assert (train["rule"], train["jobs"], train["slowest_s"], train["peak_mb"]) == (
        "train",
        3,
        360,
        900,
    )
    assert (train["runtime_min"], train["mem_mb"]) == (12, 1400)
    assert (train["configured_runtime_min"], train["configured_mem_mb"]) == (60, 2000)
    assert summary["expected_jobs"] == 8
    text = render_markdown(summary, "config/paper.yaml", "header")
    assert (
        "1.38x (off by more than 30%) | 1.0x |" in text
        and "| – | 3.6x |" in text
        and "| train | 3 | 6.0 | 900 | 12 | 1400 |" in text
    )


def test_busy_hours_leave_out_pauses_and_count_overlaps_once() -> None:
    jobs = [
        {"ended": 100.0, "wall_s": 100.0},  # 0-100
        {"ended": 150.0, "wall_s": 100.0},  # 50-150: overlaps the first
        {"ended": 10_000.0, "wall_s": 200.0},  # after a pause
    ]
    assert busy_hours(jobs) == pytest.approx(350 / 3600)


def test_an_evaluation_is_scheduled_after_its_training() -> None:
    records = [
        {"env": "e", "algo": "a", "run": 0, "stage": "evaluate", "cpu_s": 3600.0},
        {"env": "e", "algo": "a", "run": 0, "stage": "train", "cpu_s": 3600.0},
    ]
    assert scheduled_hours(records, cores=8) == pytest.approx(2.0)


def test_a_benchmark_file_that_links_outside_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    outside = write_job(tmp_path / "elsewhere", "ippo", 0, "train", wall=1, cpu=1, rss=1, ended=1)
    link = folder / "runs" / "hazard_grid" / "ippo" / "run0" / "logs" / "train.benchmark.tsv"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    with pytest.raises(ContainmentError):
        job_records(folder, CONFIG)


def test_a_file_that_is_not_a_benchmark_is_named(tmp_path: Path) -> None:
    path = write_job(tmp_path, "ippo", 0, "train", wall=1, cpu=1, rss=1, ended=1)
    path.write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match=r"train\.benchmark\.tsv: not a Snakemake benchmark file"):
        job_records(tmp_path, CONFIG)


def test_the_estimate_is_read_from_the_paper_grid_section(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(
        "# Benchmarks\n\n<!-- paper_grid:start -->\ntext\n\n"
        "| env | algo | CPU-s / update, unarmed | train CPU-h | evaluate CPU-h | CPU-h / run |\n"
        "|---|---|---:|---:|---:|---:|\n"
        "| spread | ippo | 0.14 | 0.04 | 0.001 | 0.04 |\n"
        "| **total** | | | | | **1.0** |\n\n<!-- paper_grid:end -->\n"
    )
    assert estimate(path) == {("spread", "ippo"): {"train_h": 0.04, "evaluate_h": 0.001}}
    path.write_text("# Benchmarks\n")
    with pytest.raises(ValueError, match="no paper_grid section"):
        estimate(path)
    section = "# B\n\n<!-- paper_grid:start -->\n{}\n<!-- paper_grid:end -->\n"
    path.write_text(section.format("| env | algo | train CPU-h |\n|---|---|---:|\n"))
    with pytest.raises(ValueError, match=r"lacks the columns \['evaluate CPU-h'\]"):
        estimate(path)
    head = "| env | algo | train CPU-h | evaluate CPU-h |\n|---|---|---:|---:|\n"
    path.write_text(section.format(head + "| spread | ippo | n/a | 0.1 |\n"))
    with pytest.raises(ValueError, match="a paper_grid row without its CPU-hours"):
        estimate(path)


def test_a_resumed_training_counts_its_earlier_attempts_from_their_logs(tmp_path: Path) -> None:
    write_job(tmp_path, "ippo", 0, "train", wall=100, cpu=90, rss=400, ended=10_000)
    logs = tmp_path / "runs" / "hazard_grid" / "ippo" / "run0" / "logs"
    # Attempt 1 ran 00:00:00-00:10:00, attempt 2 00:20:00-00:25:00 (1970-01-01, UTC).
    (logs / "train.1.log").write_text(
        "1970-01-01T00:00:00.000Z INFO     [train] training\n"
        "Traceback (most recent call last): a line without a timestamp\n"
        "1970-01-01T00:10:00.000Z INFO     [train] update 10/20\n"
    )
    (logs / "train.2.log").write_text(
        "1970-01-01T00:20:00.000Z INFO     [train] resumed\n"
        "1970-01-01T00:25:00.000Z INFO     [train] update 15/20\n"
    )
    (logs / "train.log").write_text("1970-01-01T02:00:00.000Z INFO     [train] resumed\n")
    (record,) = job_records(tmp_path, {**CONFIG, "threads": 2})
    assert record["attempts"] == 3 and record["earlier"] == [(0.0, 600.0), (1200.0, 1500.0)]
    # The last attempt's measured CPU, and the earlier ones' wall time on 2 threads at most.
    assert record["cpu_s"] == pytest.approx(90 + 2 * 900)
    assert busy_hours([record]) == pytest.approx((600 + 300 + 100) / 3600)
    summary = summarise([record], CONFIG, {})
    assert (summary["resumed"], summary["earlier_attempts"]) == (1, 2)
    assert summary["pairs"][0]["resumed"] == 1
    text = render_markdown(summary, "config/paper.yaml", "header")
    assert "more than one attempt (resumed): 1; their earlier attempts (2) count 0.25 h" in text


def test_an_attempt_log_without_a_timestamp_is_named(tmp_path: Path) -> None:
    write_job(tmp_path, "ippo", 0, "train", wall=1, cpu=1, rss=1, ended=1)
    log = tmp_path / "runs" / "hazard_grid" / "ippo" / "run0" / "logs" / "train.1.log"
    log.write_text("no timestamp here\n")
    with pytest.raises(ValueError, match=r"train\.1\.log: no timestamped line"):
        job_records(tmp_path, CONFIG)
    # An empty log, an attempt stopped before its first line, adds nothing.
    log.write_text("")
    (record,) = job_records(tmp_path, CONFIG)
    assert record["earlier"] == [] and record["cpu_s"] == pytest.approx(1)


def test_an_attempt_log_that_links_outside_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    write_job(folder, "ippo", 0, "train", wall=1, cpu=1, rss=1, ended=1)
    outside = tmp_path / "elsewhere.log"
    outside.write_text("1970-01-01T00:00:00.000Z INFO     [train] x\n")
    link = folder / "runs" / "hazard_grid" / "ippo" / "run0" / "logs" / "train.1.log"
    link.symlink_to(outside)
    with pytest.raises(ContainmentError):
        job_records(folder, CONFIG)


def test_a_resumed_training_costs_as_one_attempt_its_last_attempt_scaled(tmp_path: Path) -> None:
    for run, resumed_at in ((0, 25), (1, None)):
        write_job(tmp_path, "ippo", run, "train", wall=100, cpu=90, rss=400, ended=10_000)
        write_job(tmp_path, "ippo", run, "evaluate", wall=5, cpu=6, rss=300, ended=10_100)
        logs = tmp_path / "runs" / "hazard_grid" / "ippo" / f"run{run}" / "logs"
        if resumed_at is not None:
            (logs / "train.1.log").write_text(
                "1970-01-01T00:00:00.000Z INFO     [train] training\n"
                "1970-01-01T00:10:00.000Z INFO     [train] update 30/100\n"
            )
            write_resumed_log(tmp_path, run, resumed_at, 100)
    records = job_records(tmp_path, CONFIG)
    trains = {r["run"]: r for r in records if r["stage"] == "train"}
    # As it ran: the last attempt plus the earlier one's wall time; as one attempt: the last
    # attempt's 90 s for 75 of 100 updates, scaled to 120 s.
    assert trains[0]["cpu_s"] == pytest.approx(90 + 600)
    assert trains[0]["one_attempt_cpu_s"] == pytest.approx(120)
    assert trains[1]["one_attempt_cpu_s"] == pytest.approx(90)
    summary = summarise(
        records, CONFIG, {("hazard_grid", "ippo"): {"train_h": 0.03, "evaluate_h": 0.0}}
    )
    (pair,) = [p for p in summary["pairs"] if p["algo"] == "ippo"]
    assert pair["cpu_hours"] == pytest.approx((690 + 90 + 12) / 3600)
    assert pair["per_run_hours"] == pytest.approx((120 + 90 + 12) / 2 / 3600)
    assert pair["ratio"] == pytest.approx((120 + 90 + 12) / 2 / 3600 / 0.03)
    (train_rule,) = [r for r in summary["rules"] if r["rule"] == "train"]
    assert train_rule["slowest_s"] == pytest.approx(120)


def test_a_last_attempt_that_trained_nothing_is_left_out_of_the_per_run_cost(
    tmp_path: Path,
) -> None:
    write_job(tmp_path, "ippo", 0, "train", wall=100, cpu=3, rss=400, ended=10_000)
    write_job(tmp_path, "ippo", 0, "evaluate", wall=5, cpu=6, rss=300, ended=10_100)
    write_resumed_log(tmp_path, 0, 100, 100)
    records = job_records(tmp_path, CONFIG)
    assert [r["one_attempt_cpu_s"] for r in records if r["stage"] == "train"] == [None]
    (pair,) = [p for p in summarise(records, CONFIG, {})["pairs"] if p["algo"] == "ippo"]
    assert pair["runs"] == 1 and pair["per_run_hours"] is None


def test_a_resumption_past_the_runs_last_update_is_named(tmp_path: Path) -> None:
    write_job(tmp_path, "ippo", 0, "train", wall=100, cpu=90, rss=400, ended=10_000)
    write_resumed_log(tmp_path, 0, 120, 100)
    with pytest.raises(ValueError, match=r"train\.log: resumed after update 120 of 100"):
        job_records(tmp_path, CONFIG)
