"""The paper grid's cost as it ran, against its estimate: CPU-hours per (env, algo), the wall
time, and the longest job and the peak memory of each rule, from which `resources` are set.

It reads what Snakemake measured while the grid ran: the benchmark file of every training and
evaluation job (`runs/{env}/{algo}/run{i}/logs/{train,evaluate}.benchmark.tsv`: wall seconds,
CPU seconds of the job's processes, peak resident memory; the file's modification time is when
the job ended), read as regular files inside the results folder only. The estimate is the table
of `benchmarks/paper_grid.py`'s section of BENCHMARKS.md ("Paper grid cost"), per run of each
(env, algo); a measured cost more than 30% off it is flagged.

- CPU-hours: the sum over the jobs found, as they ran (below); per (env, algo) also the mean
  per run as one attempt would cost it, next to the estimate's train + evaluate CPU-hours per
  run, and the mean one-attempt CPU time of its training jobs against `ippo`'s on the same env
  (what a shield's training costs over ippo's). A resumed training costs as one attempt its
  last attempt's CPU time scaled to all of its updates, N / (N - k) when that attempt resumed
  after update k of N (its log, `logs/train.log`, says so). Rendering and
  the experiment's small jobs (export, aggregate, figures, report, upload) have no benchmark
  file and are not counted.
- A training stopped and resumed (a grid run over several sittings) has one benchmark file, of
  its last attempt: Snakemake writes it when the job ends. Its earlier attempts are counted
  from their logs (`logs/train.<n>.log`, kept by the training, `src.algos.train`): each
  attempt's wall time from the first to the last timestamp of its log, times the config's
  `threads` (a job cannot use more CPU than that), an upper bound of its CPU time. So a
  resumed job counts its work up to the kill, the updates after its last checkpoint, which
  the next attempt trains again, included: the cost as the grid ran. An evaluation stopped
  part-way starts again and leaves no record of the stopped attempt; it is not counted.
- Wall time: the time during which at least one measured job ran (the union of the jobs'
  intervals), so a grid run in several sittings does not count the pauses; and the greedy
  schedule of the measured jobs, each as one attempt, on 8 cores (`paper_grid.list_schedule`,
  evaluation after its training).
- Resources: per rule, the longest job (as one attempt where that is known) and the peak
  memory, the config's `runtime` and `mem_mb`, and the values they are set from: runtime 2x the
  longest job, memory 1.5x the peak (both rounded up), within the 3x and 2x that the grid's
  resources may ask. A job's length is its CPU time divided by the config's `threads` for
  training (one thread: on a core of its own, as a cluster gives it, a job's wall time is its
  CPU time), not the wall time measured here, which is longer wherever jobs shared cores or
  the grid was paused.

Run: `python -m benchmarks.grid_measured [--config config/paper.yaml] [--results FOLDER]
[--write]` (`--write` records the section `grid_measured_{experiment_tag}` in BENCHMARKS.md).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.common import (
    BENCHMARKS_MD,
    PAPER,
    ROOT,
    Clock,
    arguments,
    markers,
    save_results,
    table,
    workflow_config,
)
from benchmarks.paper_grid import CORES, Job, list_schedule
from src.containment import inside, open_regular

STAGES = ("train", "evaluate")
"""The rules whose jobs Snakemake measures (a `benchmark:` file per run)."""
OFF_BY = 0.3
"""A measured cost further than this share from its estimate is flagged."""
RUNTIME_FACTOR, MEMORY_FACTOR = 2.0, 1.5
"""`resources` set from the measurement: runtime this many times the slowest job, memory this
many times the peak (at most 3x and 2x)."""
ESTIMATE_COLUMNS = ("env", "algo", "train CPU-h", "evaluate CPU-h")
"""The columns of the estimate's table that the comparison reads."""
BENCHMARK_BYTES = 1024**2
"""The largest benchmark file read (a job's has two lines)."""
ATTEMPT_LOG = re.compile(r"train\.([0-9]+)\.log")
"""The log of an earlier training attempt, `logs/train.<n>.log` (`src.algos.train`)."""
LOG_BYTES = 256 * 1024**2
"""The largest attempt log read (a full paper run logs about 100 KB)."""
STAMP = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")
"""The timestamp that starts a log line (`src.core.logging`)."""
RESUMED = re.compile(rb"\] resumed .* from its checkpoint after update ([0-9]+) of ([0-9]+)")
"""The line with which a training attempt says where it resumed (`src.algos.train`)."""


def job_records(folder: Path, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One record per measured job of the grid in `folder`: env, algo, run, stage, wall and CPU
    seconds, peak memory (MB) and the time it ended. Jobs without a benchmark file (not run
    yet) are left out."""
    records = []
    for env in config["envs"]:
        for algo in config["algos"]:
            for run in range(int(config["num_runs"])):
                for stage in STAGES:
                    relative = Path(
                        "runs", env, algo, f"run{run}", "logs", f"{stage}.benchmark.tsv"
                    )
                    try:
                        with open_regular(folder, relative, limit=BENCHMARK_BYTES) as handle:
                            ended = os.fstat(handle.fileno()).st_mtime
                            measured = pd.read_csv(handle, sep="\t")
                    except FileNotFoundError:
                        continue
                    if measured.empty or not {"s", "cpu_time", "max_rss"} <= set(measured):
                        raise ValueError(f"{folder / relative}: not a Snakemake benchmark file")
                    last = measured.iloc[-1]
                    train = stage == "train"
                    earlier = earlier_attempts(folder, relative.parent) if train else []
                    earlier_s = sum(end - start for start, end in earlier)
                    threads = int(config.get("threads", 1)) if train else 1
                    share = last_attempt_share(folder, relative.parent) if train else 1.0
                    records.append(
                        {
                            "env": env,
                            "algo": algo,
                            "run": run,
                            "stage": stage,
                            "wall_s": float(last["s"]),
                            "cpu_s": float(last["cpu_time"]) + threads * earlier_s,
                            "one_attempt_cpu_s": float(last["cpu_time"]) / share if share else None,
                            "max_rss_mb": float(last["max_rss"]),
                            "ended": ended,
                            "attempts": 1 + len(earlier),
                            "earlier": earlier,
                        }
                    )
    return records


def earlier_attempts(folder: Path, logs: Path) -> list[tuple[float, float]]:
    """(start, end) in seconds since the epoch of each earlier training attempt whose log is in
    `logs` (relative to `folder`, listed inside it): the first and the last timestamp of its
    log. An empty log (an attempt stopped before it wrote a line) adds nothing; a log with
    lines but no timestamp is an error naming it."""
    spans = []
    with os.scandir(inside(folder, logs)) as entries:
        names = sorted(
            (int(match.group(1)), entry.name)
            for entry in entries
            if (match := ATTEMPT_LOG.fullmatch(entry.name))
        )
    for _, name in names:
        first = last = None  # the first and the latest timestamp read
        empty = True
        with open_regular(folder, logs / name, limit=LOG_BYTES) as handle:
            for line in handle:
                empty = False
                if match := STAMP.match(line):
                    last = match.group(1)
                    first = first or last
        if empty:
            continue
        if first is None or last is None:
            raise ValueError(f"{folder / logs / name}: no timestamped line in this attempt log")
        start, end = (datetime.fromisoformat(s.decode()).timestamp() for s in (first, last))
        spans.append((start, end))
    return spans


def last_attempt_share(folder: Path, logs: Path) -> float:
    """The share of the run's updates that its last training attempt trained: 1 when its log
    (`logs/train.log`, relative to `folder`, read inside it) does not say it resumed, or is not
    there; (N - k) / N when it resumed after update k of N. A resumption line with k > N or
    N = 0 is an error naming the log."""
    log = logs / "train.log"
    try:
        with open_regular(folder, log, limit=LOG_BYTES) as handle:
            for line in handle:
                if match := RESUMED.search(line):
                    done, total = (int(group) for group in match.groups())
                    if not 0 <= done <= total or total == 0:
                        raise ValueError(
                            f"{folder / log}: resumed after update {done} of {total}, which "
                            "is not an update of the run"
                        )
                    return (total - done) / total
    except FileNotFoundError:
        pass
    return 1.0


def busy_hours(records: Sequence[Mapping[str, Any]]) -> float:
    """Hours during which at least one of the jobs ran (the union of their intervals, earlier
    attempts included)."""
    spans = sorted(
        [(r["ended"] - r["wall_s"], r["ended"]) for r in records]
        + [span for r in records for span in r.get("earlier", ())]
    )
    total, reach = 0.0, -math.inf
    for start, end in spans:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 3600


def scheduled_hours(records: Sequence[Mapping[str, Any]], cores: int = CORES) -> float:
    """The greedy schedule's makespan (hours) of the measured jobs on `cores` cores, each on
    one core for its CPU seconds as one attempt (as it ran where that is not known), an
    evaluation after its run's training."""
    jobs: list[Job] = []
    trained: dict[tuple[str, str, int], int] = {}
    for r in sorted(records, key=lambda r: r["stage"] != "train"):
        key = (r["env"], r["algo"], r["run"])
        after = trained.get(key) if r["stage"] == "evaluate" else None
        if r["stage"] == "train":
            trained[key] = len(jobs)
        seconds = r.get("one_attempt_cpu_s")
        jobs.append(Job(r["cpu_s"] if seconds is None else seconds, after=after))
    return list_schedule(jobs, cores) / 3600 if jobs else 0.0


def estimate(path: Path = BENCHMARKS_MD) -> dict[tuple[str, str], dict[str, float]]:
    """The paper_grid section's estimate per (env, algo): train and evaluate CPU-hours of one
    run. A section without its table is an error naming the file."""
    start, end = markers("paper_grid")
    text = path.read_text()
    if start not in text or end not in text:
        raise ValueError(f"{path}: no paper_grid section; run python -m benchmarks.paper_grid")
    lines = [line for line in text[text.index(start) : text.index(end)].splitlines()]
    head = next((i for i, line in enumerate(lines) if line.startswith("| env | algo |")), None)
    if head is None:
        raise ValueError(f"{path}: the paper_grid section has no table of (env, algo)")
    names = [cell.strip() for cell in lines[head].strip("|").split("|")]
    lacking = [name for name in ESTIMATE_COLUMNS if name not in names]
    if lacking:
        raise ValueError(f"{path}: the paper_grid table lacks the columns {lacking}")
    out = {}
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        values = [c.strip() for c in line.strip("|").split("|")]
        cells = dict(zip(names, values, strict=False))
        if len(values) != len(names) or not cells["env"]:
            raise ValueError(f"{path}: a paper_grid row that is not one of the table: {line}")
        if cells["env"].startswith("**"):
            continue  # the total
        try:
            out[(cells["env"], cells["algo"])] = {
                "train_h": float(cells["train CPU-h"]),
                "evaluate_h": float(cells["evaluate CPU-h"]),
            }
        except ValueError:
            raise ValueError(f"{path}: a paper_grid row without its CPU-hours: {line}") from None
    return out


def summarise(
    records: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any],
    estimated: Mapping[tuple[str, str], Mapping[str, float]],
) -> dict[str, Any]:
    """Per (env, algo): runs measured, CPU-hours, mean per run against the estimate; per rule:
    the slowest job, the peak memory and the resources set from them; the totals."""
    frame = pd.DataFrame(list(records))
    pairs = []
    for env in config["envs"]:
        for algo in config["algos"]:
            mine = frame[(frame["env"] == env) & (frame["algo"] == algo)] if len(frame) else frame
            complete = {
                run
                for run in range(int(config["num_runs"]))
                if len(mine) and set(mine[mine["run"] == run]["stage"]) == set(STAGES)
            }
            row: dict[str, Any] = {"env": env, "algo": algo, "runs": len(complete)}
            row["cpu_hours"] = float(mine["cpu_s"].sum()) / 3600 if len(mine) else 0.0
            # A run's jobs as one attempt would cost them (a resumed training's last attempt
            # scaled to all its updates); runs whose last attempt trained nothing are left out.
            per_run = None
            if complete:
                both = mine[mine["run"].isin(complete)]
                known = both.groupby("run")["one_attempt_cpu_s"].agg(lambda s: s.notna().all())
                if known.any():
                    costed = both[both["run"].isin(known[known].index)]
                    per_run = float(costed["one_attempt_cpu_s"].sum()) / 3600 / int(known.sum())
            guess = estimated.get((env, algo))
            row["per_run_hours"] = per_run
            row["estimate_hours"] = guess["train_h"] + guess["evaluate_h"] if guess else None
            row["ratio"] = (
                per_run / row["estimate_hours"] if per_run and row["estimate_hours"] else None
            )
            row["off"] = row["ratio"] is not None and abs(row["ratio"] - 1) > OFF_BY
            trained = mine[mine["stage"] == "train"] if len(mine) else mine
            one_attempt = trained["one_attempt_cpu_s"].dropna() if len(trained) else trained
            row["train_per_run_s"] = float(one_attempt.mean()) if len(one_attempt) else None
            row["resumed"] = int((trained["attempts"] > 1).sum()) if len(trained) else 0
            pairs.append(row)
    # Each algorithm's training against ippo's on the same env: mean CPU per training job.
    ippo_train = {p["env"]: p["train_per_run_s"] for p in pairs if p["algo"] == "ippo"}
    for row in pairs:
        mine, theirs = row["train_per_run_s"], ippo_train.get(row["env"])
        row["train_vs_ippo"] = mine / theirs if mine and theirs else None
    rules = []
    for stage in STAGES:
        mine = frame[frame["stage"] == stage] if len(frame) else frame
        if not len(mine):
            continue
        asked = config.get("resources", {}).get(stage, {})
        threads = int(config.get("threads", 1)) if stage == "train" else 1
        # As one attempt, or as it ran where that is not known.
        lengths = mine["one_attempt_cpu_s"].fillna(mine["cpu_s"])
        slowest = float(lengths.max()) / threads
        peak = float(mine["max_rss_mb"].max())
        rules.append(
            {
                "rule": stage,
                "jobs": len(mine),
                "slowest_s": slowest,
                "peak_mb": peak,
                "runtime_min": math.ceil(RUNTIME_FACTOR * slowest / 60),
                "mem_mb": 100 * math.ceil(MEMORY_FACTOR * peak / 100),
                "configured_runtime_min": asked.get("runtime"),
                "configured_mem_mb": asked.get("mem_mb"),
            }
        )
    expected = len(config["envs"]) * len(config["algos"]) * int(config["num_runs"]) * len(STAGES)
    return {
        "pairs": pairs,
        "rules": rules,
        "jobs": len(records),
        "resumed": sum(1 for r in records if r.get("attempts", 1) > 1),
        "earlier_attempts": sum(r.get("attempts", 1) - 1 for r in records),
        "earlier_hours": sum(end - start for r in records for start, end in r.get("earlier", ()))
        / 3600,
        "expected_jobs": expected,
        "cpu_hours": float(frame["cpu_s"].sum()) / 3600 if len(frame) else 0.0,
        "busy_hours": busy_hours(records),
        "scheduled_hours": scheduled_hours(records),
        "cores": CORES,
    }


def _hours(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render_markdown(summary: Mapping[str, Any], config_path: str, header: str) -> str:
    """The section: per (env, algo), then per rule, then the totals."""
    lines = [
        header,
        "",
        f"`{config_path}` as it ran: {summary['jobs']} of its {summary['expected_jobs']} "
        "training and evaluation jobs measured by Snakemake (CPU seconds of each job's "
        "processes, peak resident memory)."
        + (
            ' Estimate: the "Paper grid cost" section\'s train + evaluate CPU-hours per run; '
            f"flagged where the measured mean per run is more than {OFF_BY:.0%} off it."
            if any(p["estimate_hours"] is not None for p in summary["pairs"])
            else " No estimate was made for these runs (`benchmarks/paper_grid.py` estimates "
            "the paper's grid only)."
        ),
        "",
        *table(
            "env | algo | runs measured | CPU-h as run | CPU-h / run, one attempt | estimate / run "
            "| measured / estimate | training / ippo's",
            "llrrrrrr",
            (
                f"{p['env']} | {p['algo']} | {p['runs']} | {p['cpu_hours']:.2f}"
                + (f" ({p['resumed']} resumed)" if p["resumed"] else "")
                + " | "
                f"{_hours(p['per_run_hours'])} | {_hours(p['estimate_hours'])} | "
                + ("–" if p["ratio"] is None else f"{p['ratio']:.2f}x")
                + (" (off by more than 30%)" if p["off"] else "")
                + " | "
                + ("–" if p["train_vs_ippo"] is None else f"{p['train_vs_ippo']:.1f}x")
                for p in summary["pairs"]
            ),
        ),
        "",
        *table(
            "rule | jobs | longest job (CPU min) | peak memory (MB) | runtime set (min) "
            "| mem_mb set | configured runtime / mem_mb",
            "lrrrrrl",
            (
                f"{r['rule']} | {r['jobs']} | {r['slowest_s'] / 60:.1f} | {r['peak_mb']:.0f} | "
                f"{r['runtime_min']} | {r['mem_mb']} | "
                f"{r['configured_runtime_min']} / {r['configured_mem_mb']}"
                for r in summary["rules"]
            ),
        ),
        "",
        f"- CPU-hours of the measured jobs: {summary['cpu_hours']:.2f}."
        + (
            f" Training jobs run in more than one attempt (resumed): {summary['resumed']}; their "
            f"earlier attempts ({summary['earlier_attempts']}) count "
            f"{summary['earlier_hours']:.2f} h, their wall time from their logs times the "
            "job's threads, an upper bound of their CPU time (module docstring)."
            if summary["resumed"]
            else ""
        ),
        f"- Wall time with at least one job running: {summary['busy_hours']:.2f} h (pauses "
        "between sittings not counted).",
        "- CPU-h / run, one attempt: the mean over the runs measured of what their jobs cost "
        "as one attempt each; a resumed training counts its last attempt's CPU time scaled to "
        "all of its updates (N / (N - k) after resuming at update k of N), not its earlier "
        "attempts, so the comparison with the estimate and the resources leave out the work "
        "that interruptions repeated.",
        "- Training / ippo's: the mean one-attempt CPU time of the algorithm's training jobs "
        "against that of ippo's on the same env.",
        f"- The measured jobs scheduled on {summary['cores']} cores (greedy, longest first, "
        f"each job on one core for its CPU time as one attempt): "
        f"{summary['scheduled_hours']:.2f} h.",
        f"- Resources set from the measurement: runtime {RUNTIME_FACTOR:g}x the longest job "
        "(its CPU time per thread: what it takes on cores of its own), memory "
        f"{MEMORY_FACTOR:g}x the peak, rounded up.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Read the grid's measurements, print the section, and record it with --write."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--config", type=Path, default=PAPER, help="the grid's workflow config")
    parser.add_argument(
        "--results", type=Path, help="the grid's results folder (default: the config's)"
    )
    args = parser.parse_args(argv)
    config = workflow_config(args.config)
    folder = args.results or ROOT / config["results_dir"] / config["experiment_tag"]
    records = job_records(folder, config)
    if not records:
        print(f"{folder}: no measured job yet", file=sys.stderr)
        return 1
    summary = summarise(records, config, estimate())
    clock = Clock()
    shown = args.config.resolve().relative_to(ROOT) if args.config.is_absolute() else args.config
    header = (
        f"`python -m benchmarks.grid_measured --config {shown}` on "
        f"{clock.machine()['date']}, from the grid's results folder."
    )
    text = render_markdown(summary, str(shown), header)
    name = f"grid_measured_{config['experiment_tag']}"
    save_results(
        name,
        {**summary, "records": records},
        text,
        quick=not args.write,
        heading=f"## Measured cost of `{shown}`",
        intro="What the experiment's jobs used as they ran, and the `resources` set from it "
        "(`benchmarks/grid_measured.py`).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
