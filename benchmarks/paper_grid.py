"""Cost of the paper grid (`config/paper.yaml`): CPU-hours per job, per seed group, in total.

Run 0 of every (env, algo), resolved as the workflow resolves it, measured briefly in this
process on one thread: training's CPU seconds per update, unarmed and armed (the measured run
arms where the grid's runs arm, after their `shield_patience` updates: armed earlier, on a
policy trained for a few updates and models fitted on their data, the filter works longer per
update than the grid's runs ever do), plus a fixed rest; `evaluate_run` on one batch,
scaled to the config's episodes; `render_run` with its encoder; a fresh job's start-up. The
projection costs every run as run 0 and schedules every job of the grid on 8 cores (longest
ready job first, evaluation and render after training).

Run: `python -m benchmarks.paper_grid` (about 20 minutes); `--quick` a smoke run on
`hazard_grid`. Results go to `benchmarks/out/paper_grid.json` and the paper_grid section of
BENCHMARKS.md.
"""

from __future__ import annotations

import heapq
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    OUT,
    PAPER,
    ROOT,
    AfterUpdate,
    Clock,
    arguments,
    armed_updates,
    cpu_seconds,
    met,
    save_results,
    table,
    workflow_config,
)
from src.algos.ippo import IPPO
from src.algos.metrics import SHIELD_ARMED, SHIELD_MODEL_SECONDS, SHIELD_SECONDS
from src.algos.registry import get_algorithm
from src.algos.train import train_run
from src.config.base import VERSION_KEYS
from src.config.run import RunConfig
from src.config.workflow import resolve_run_config
from src.core.logging import configure_logging
from src.evaluation.evaluate import evaluate_run
from src.evaluation.render import render_run
from src.runfiles import RunFiles

TARGET_CPU_HOURS = 10.0  # the budget for the whole paper grid, shield_dec included
CORES = 8  # cores of the machine the grid is planned for
BUDGET: dict[str, int | None] = {
    "updates": 16,  # updates of an algorithm without a shield
    # Unarmed shield updates before the measured run arms; None: the run's own shield_patience.
    "measure_patience": None,
    "armed_updates": 8,  # armed shield updates
    "eval_episodes": 20,  # evaluation episodes, one batch (the shield's cost is per copy-step)
    "render_episodes": None,  # None: the config's render.episodes
}
QUICK_OVERRIDES: dict[str, Any] = {
    "envs": ["hazard_grid"],
    # Episodes short enough that the measured runs finish some (a run that finishes none is
    # refused); the constraint horizon, their cap, among the evaluated horizons.
    "base": {"rollouts": 16, "final_policy_eval_horizons": [1, 10, 32]},
    "env_params": {"hazard_grid": {"n_agents": 3, "max_steps": 32}},
    "algo_params": {"shield": {"critic_steps": 2, "model_epochs": 2.0}},
}
"""--quick: the workflow config's values it replaces."""
QUICK_BUDGET: dict[str, int | None] = {
    "updates": 3,
    "measure_patience": 2,
    "armed_updates": 1,
    "eval_episodes": 5,
    "render_episodes": 1,
}
JOB_IMPORTS = "import src.algos.train, src.evaluation.evaluate, src.evaluation.render"
"""Modules a job imports before its work starts (the scripts of the train, evaluate, render
rules)."""

# ---------------------------------------------------------------- measuring


def measured_config(
    target: RunConfig, *, updates: int, eval_episodes: int, patience: int | None = None
) -> dict[str, Any]:
    """`target` (flat) with `updates` policy updates, `eval_episodes` evaluation episodes and,
    for a shield, `patience` updates before it arms."""
    flat = target.to_dict()
    flat["timesteps"] = updates * target.ppo.steps_per_update
    flat["final_policy_eval_episodes"] = eval_episodes
    if patience is not None:
        flat["shield_patience"] = patience
    return RunConfig.from_dict(flat).to_dict()


def phase_costs(
    started: float, marks: Sequence[float], armed: Sequence[bool], finished: float
) -> dict[str, Any]:
    """Mean CPU seconds per update of each phase (unarmed, armed) and the fixed rest.

    `marks[i]` is the CPU clock after update i, `armed[i]` its phase; `started` and `finished`
    are the clock before and after the whole run. The first update is left out of its phase's
    mean when that phase has other updates. `fixed` is the run's total minus every update
    costed at its phase's mean, at least 0. A phase without updates has mean None.
    """
    if len(marks) != len(armed) or not marks:
        raise ValueError(f"need one phase per reading, got {len(marks)} and {len(armed)}")
    intervals = [b - a for a, b in zip([started, *marks[:-1]], marks, strict=True)]
    means: dict[str, float | None] = {}
    for name, phase in (("unarmed", False), ("armed", True)):
        members = [i for i, flag in enumerate(armed) if flag == phase]
        if len(members) > 1:
            members = [i for i in members if i > 0]
        means[name] = sum(intervals[i] for i in members) / len(members) if members else None
    costed = sum(means["armed" if flag else "unarmed"] or 0.0 for flag in armed)
    return {
        **means,
        "fixed": max(0.0, finished - started - costed),
        "intervals": intervals,
        "unarmed_updates": armed.count(False),
        "armed_updates": armed.count(True),
    }


def children_cpu() -> float:
    """CPU seconds of this process's children that have finished."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def startup_seconds() -> float:
    """CPU seconds of a fresh interpreter importing the modules of the workflow's jobs."""
    before = children_cpu()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", JOB_IMPORTS], cwd=ROOT, check=True, env=env)
    return children_cpu() - before


def _mean_of(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """Mean of `key` over `rows` (None when no row has it)."""
    values = [float(row[key]) for row in rows if row.get(key) is not None]
    return sum(values) / len(values) if values else None


def measure_pair(
    workflow: Mapping[str, Any], env: str, algo: str, budget: Mapping[str, int], work_dir: Path
) -> dict[str, Any]:
    """Train, evaluate and render run 0 of (env, algo) on the measured `budget`; CPU seconds.

    A shield arms after `min(measure_patience, shield_patience)` updates of the measured run
    (`shield_patience` where `measure_patience` is None) and trains `armed_updates` armed
    updates; other algorithms train `updates` updates.
    """
    target = resolve_run_config(workflow, env, algo, 0)
    patience = arm_at = None
    measured = budget["updates"]
    if target.shield is not None:
        patience = target.shield.shield_patience
        arm_at = min(budget["measure_patience"] or patience, patience)
        measured = arm_at + budget["armed_updates"]
    eval_episodes = min(budget["eval_episodes"], target.evaluation.episodes)
    config = measured_config(target, updates=measured, eval_episodes=eval_episodes, patience=arm_at)
    run_dir = work_dir / env / algo / "run0"
    files = RunFiles(run_dir)
    marks: list[float] = []  # the CPU clock after every update
    armed: list[bool] = []  # whether the shield filtered the update's rollout

    def read(trainer: IPPO) -> None:
        marks.append(time.process_time())
        armed.append(bool(trainer.updates[-1].get(SHIELD_ARMED) or False))

    train_started = time.process_time()
    train_run(config, run_dir, progress=False, callbacks=[AfterUpdate(read)], threads=1)
    train_finished = time.process_time()
    costs = phase_costs(train_started, marks, armed, train_finished)
    if patience is not None and costs["armed"] is None:
        raise RuntimeError(f"{env}/{algo}: the shield never armed in {measured} updates")
    eval_seconds, _ = cpu_seconds(evaluate_run, run_dir, files.eval)
    started = time.process_time() + children_cpu()  # the video encoder included
    render_run(run_dir, files.videos, episodes=budget["render_episodes"])
    render_seconds = time.process_time() + children_cpu() - started
    armed = armed_updates(run_dir)
    return {
        "env": env,
        "algo": algo,
        "run_config": target.to_dict(),
        "versions": {key: target.version(key) for key in get_algorithm(algo).version_keys},
        "updates": target.ppo.num_updates,
        "patience": patience,
        "eval_episodes": target.evaluation.episodes,
        "render_episodes": int(workflow["render"]["episodes"]),
        "measured": {
            "updates": measured,
            "shield_patience": arm_at,
            **costs,
            "train_seconds": train_finished - train_started,
            "eval_episodes": eval_episodes,
            "eval_seconds": eval_seconds,
            "render_episodes": budget["render_episodes"],
            "render_seconds": render_seconds,
            "filter_wall_seconds_per_armed_update": _mean_of(armed, SHIELD_SECONDS),
            "model_wall_seconds_per_armed_update": _mean_of(armed, SHIELD_MODEL_SECONDS),
        },
    }


# ---------------------------------------------------------------- extrapolating


def project_train_seconds(
    *,
    fixed: float,
    unarmed: float | None,
    armed: float | None,
    updates: int,
    patience: int | None,
) -> float:
    """CPU seconds of a training job of `updates` updates.

    Without a shield (`patience` None) every update costs `unarmed`; with one, the first
    `min(patience, updates)` updates cost `unarmed` and the rest `armed`. Plus `fixed`.
    """
    before = updates if patience is None else min(patience, updates)
    after = updates - before
    if before and unarmed is None:
        raise ValueError(f"{before} unarmed updates but no unarmed cost")
    if after and armed is None:
        raise ValueError(f"{after} armed updates but no armed cost")
    return fixed + before * (unarmed or 0.0) + after * (armed or 0.0)


def scale_linearly(seconds: float, measured: int, target: int) -> float:
    """`seconds` measured for `measured` items, scaled to `target` items."""
    if measured < 1:
        raise ValueError(f"measured must be >= 1, got {measured}")
    return seconds * target / measured


def project_pair(pair: Mapping[str, Any], *, startup: float, num_runs: int) -> dict[str, float]:
    """CPU seconds of each job of one run of `pair`, the run's total and its hours per seeds."""
    m = pair["measured"]
    train = startup + project_train_seconds(
        fixed=m["fixed"],
        unarmed=m["unarmed"],
        armed=m["armed"],
        updates=pair["updates"],
        patience=pair["patience"],
    )
    evaluate = startup + scale_linearly(
        m["eval_seconds"], m["eval_episodes"], pair["eval_episodes"]
    )
    render = startup + scale_linearly(
        m["render_seconds"], m["render_episodes"], pair["render_episodes"]
    )
    job = train + evaluate + render
    return {
        "train_seconds": train,
        "eval_seconds": evaluate,
        "render_seconds": render,
        "run_seconds": job,
        "run_cpu_hours": job / 3600,
        "seeds_cpu_hours": num_runs * job / 3600,
    }


@dataclass(frozen=True)
class Job:
    """One job of a schedule: its duration, the cores it holds, the job it must follow."""

    seconds: float
    cores: int = 1
    after: int | None = None


def list_schedule(jobs: Sequence[Job], cores: int) -> float:
    """Makespan of a greedy list schedule of `jobs` on `cores` cores.

    Whenever cores free up, the ready jobs (those whose `after` job has finished) start
    longest first, each one that fits into the free cores; without dependencies and with one
    core per job this is the longest-processing-time (LPT) schedule.
    """
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    followers: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        if not 1 <= job.cores <= cores:
            raise ValueError(f"job {index} needs {job.cores} cores of {cores}")
        if job.after is not None:
            if not 0 <= job.after < len(jobs) or job.after == index:
                raise ValueError(f"job {index} follows job {job.after}, which is not another job")
            followers.setdefault(job.after, []).append(index)
    ready = [index for index, job in enumerate(jobs) if job.after is None]
    running: list[tuple[float, int]] = []
    free, now, done = cores, 0.0, 0
    while done < len(jobs):
        ready.sort(key=lambda index: (-jobs[index].seconds, index))
        waiting = []
        for index in ready:
            if jobs[index].cores <= free:
                free -= jobs[index].cores
                heapq.heappush(running, (now + jobs[index].seconds, index))
            else:
                waiting.append(index)
        ready = waiting
        if not running:
            raise ValueError("some jobs can never start (their dependencies form a cycle)")
        now, index = heapq.heappop(running)
        free += jobs[index].cores
        done += 1
        ready += followers.get(index, [])
    return now


def grid_jobs(pairs: Sequence[Mapping[str, Any]], *, num_runs: int, train_cores: int) -> list[Job]:
    """Every train, evaluate and render job of the grid (`num_runs` runs of each pair)."""
    jobs: list[Job] = []
    for pair in pairs:
        p = pair["projected"]
        for _ in range(num_runs):
            train = len(jobs)
            jobs.append(Job(p["train_seconds"], cores=train_cores))
            jobs.append(Job(p["eval_seconds"], after=train))
            jobs.append(Job(p["render_seconds"], after=train))
    return jobs


def totals(
    pairs: Sequence[Mapping[str, Any]], *, num_runs: int, threads: int, cores: int = CORES
) -> dict[str, Any]:
    """Grid CPU-hours, the target check and the wall time on `cores` cores."""
    cpu_hours = sum(pair["projected"]["seeds_cpu_hours"] for pair in pairs)
    granted = min(threads, cores)
    as_configured = list_schedule(grid_jobs(pairs, num_runs=num_runs, train_cores=granted), cores)
    one_core = list_schedule(grid_jobs(pairs, num_runs=num_runs, train_cores=1), cores)
    return {
        "cpu_hours": cpu_hours,
        "target_cpu_hours": TARGET_CPU_HOURS,
        "within_target": cpu_hours <= TARGET_CPU_HOURS,
        "cores": cores,
        "train_cores": granted,
        "wall_hours": as_configured / 3600,
        "wall_hours_one_core_per_train_job": one_core / 3600,
        "jobs": 3 * num_runs * len(pairs),
    }


# ---------------------------------------------------------------- the benchmark


def benchmark(*, quick: bool = False) -> dict[str, Any]:
    """Measure every (env, algo) of the paper config (`quick`: with `QUICK_OVERRIDES`, on
    `QUICK_BUDGET`) and project the grid."""
    torch.set_num_threads(1)
    clock = Clock()
    workflow = workflow_config(PAPER, QUICK_OVERRIDES if quick else None)
    budget = dict(QUICK_BUDGET if quick else BUDGET)
    budget["render_episodes"] = budget["render_episodes"] or int(workflow["render"]["episodes"])
    startup = startup_seconds()
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in workflow["envs"]:
            for algo in workflow["algos"]:
                pair_clock = Clock()
                pair = measure_pair(workflow, env, algo, budget, Path(tmp))
                pair["projected"] = project_pair(
                    pair, startup=startup, num_runs=workflow["num_runs"]
                )
                pairs.append(pair)
                print(
                    f"{env}/{algo}: {pair['measured']['updates']} updates measured in "
                    f"{pair_clock.wall:.0f} s; {pair['projected']['run_cpu_hours']:.2f} CPU-h per "
                    "run",
                    flush=True,
                )
    first, base = pairs[0]["run_config"], workflow["base"]
    return {
        "config": str(PAPER.relative_to(ROOT)),
        "quick": quick,
        "quick_overrides": QUICK_OVERRIDES if quick else None,
        "experiment": {
            **{key: workflow[key] for key in ("envs", "algos", "num_runs", "threads")},
            **{key: first[key] for key in ("timesteps", "num_envs", "rollouts")},
            **{key: first[key] for key in ("learning_epochs", "mini_batches")},
            "shield_patience": base["shield_patience"],
            "eval_episodes": base["final_policy_eval_episodes"],
            "eval_horizons": list(base["final_policy_eval_horizons"]),
            "render_episodes": workflow["render"]["episodes"],
            "versions": {key: base[key] for key in VERSION_KEYS},
        },
        "budget": budget,
        "startup_seconds": startup,
        "pairs": pairs,
        "totals": totals(pairs, num_runs=workflow["num_runs"], threads=workflow["threads"]),
        "machine": {**clock.machine(), "seconds": clock.wall},
    }


def _count(n: int, noun: str) -> str:
    """`n noun`, the noun in the plural unless n is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def render_markdown(r: Mapping[str, Any]) -> str:
    """The BENCHMARKS.md section: machine, config, budget, the table and the totals."""
    m, x, b, t = r["machine"], r["experiment"], r["budget"], r["totals"]
    command = "python -m benchmarks.paper_grid" + (" --quick" if r["quick"] else "")
    versions = ", ".join(f"`{key}` {value}" for key, value in x["versions"].items())
    updates = r["pairs"][0]["updates"]
    arm = b["measure_patience"] or x["shield_patience"]
    split = [
        f"{p['env']} {_number(p['measured']['filter_wall_seconds_per_armed_update'])} s filter + "
        f"{_number(p['measured']['model_wall_seconds_per_armed_update'])} s model fits"
        for p in r["pairs"]
        if p["measured"]["filter_wall_seconds_per_armed_update"] is not None
    ]
    lines = [
        f"`{command}` on {m['date']}: {m['platform']}, {m['cpus']} CPUs, Python "
        f"{m['python']}, torch {m['torch']} on {_count(m['torch_threads'], 'thread')}; "
        f"load average {m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after; "
        f"{m['seconds'] / 60:.1f} min in total.",
        "",
        f"Config `{r['config']}`, resolved as the workflow resolves it (schema defaults "
        f"filled: {versions}): {_count(len(x['envs']), 'env')} x "
        f"{_count(len(x['algos']), 'algorithm')} x {_count(x['num_runs'], 'run')}; "
        f"{x['timesteps']:,} env steps = {updates} updates of {x['num_envs']} copies x "
        f"{x['rollouts']} steps, {x['learning_epochs']} epochs x {x['mini_batches']} "
        f"minibatches; the shield arms after {x['shield_patience']} "
        f"updates; {x['eval_episodes']:,} evaluation episodes up to "
        f"{max(x['eval_horizons'])} steps; {_count(x['render_episodes'], 'rendered episode')}; "
        f"`threads: {x['threads']}`."
        + (
            f" Quick run: {json.dumps(r['quick_overrides'])} replace the config's values."
            if r["quick"]
            else ""
        ),
        "",
        f"Measured budget per (env, algo), run 0: `ippo` and `ippo_lag` {b['updates']} "
        f"updates; `shield` {arm} unarmed + "
        f"{b['armed_updates']} armed updates (the measured run arms after "
        f"{arm} updates, the projected job after {x['shield_patience']}); "
        f"evaluation of the short-trained policy on {b['eval_episodes']} episodes (one "
        f"batch), scaled to {x['eval_episodes']:,}; one render job of "
        f"{_count(b['render_episodes'], 'episode')}; job start-up "
        f"{r['startup_seconds']:.1f} CPU-s.",
        "",
        *table(
            "env | algo | CPU-s / update, unarmed | CPU-s / update, armed | train CPU-h | "
            f"evaluate CPU-h | render CPU-s | CPU-h / run | CPU-h / {x['num_runs']} runs",
            "llrrrrrrr",
            [
                *(
                    f"{p['env']} | {p['algo']} | {_number(p['measured']['unarmed'])} | "
                    f"{_number(p['measured']['armed'])} | "
                    f"{p['projected']['train_seconds'] / 3600:.2f} | "
                    f"{p['projected']['eval_seconds'] / 3600:.3f} | "
                    f"{p['projected']['render_seconds']:.0f} | "
                    f"{p['projected']['run_cpu_hours']:.2f} | "
                    f"{p['projected']['seeds_cpu_hours']:.2f}"
                    for p in r["pairs"]
                ),
                ["**total**", *[""] * 7, f"**{t['cpu_hours']:.1f}**"],
            ],
        ),
        "",
        f"- Total: {t['cpu_hours']:.1f} CPU-hours over {t['jobs']} jobs (target <= "
        f"{t['target_cpu_hours']:.0f}): {met(t['within_target'])}.",
        f"- Wall time on {t['cores']} cores: {t['wall_hours']:.1f} h with each train job "
        + (
            "on one core (`threads: 1`)"
            if t["train_cores"] == 1
            else f"holding {t['train_cores']} cores (`threads: {x['threads']}`), "
            f"{t['wall_hours_one_core_per_train_job']:.1f} h with one core per train job "
            "(`threads: 1`)"
        )
        + ". Greedy list schedule, longest ready job first; every job runs for its "
        "single-thread CPU time.",
        "- Per-update CPU seconds: differences of `time.process_time()` read after every "
        "update (checkpoints included), mean over each phase without the first update; "
        "`ippo` and `ippo_lag` have no shield, so all their updates are in the unarmed column."
        + (
            " The shield's own wall-clock metrics per armed update (`shield/seconds`, "
            "`shield/model_seconds`): " + "; ".join(split) + "."
            if split
            else ""
        ),
        "- Not measured: export, aggregate, figures, report and wandb upload (one small job "
        "per run or per experiment); how the cost of an update changes later in a run (the "
        f"armed phase is measured in its first {b['armed_updates']} updates after "
        f"{arm} unarmed ones"
        + (
            f", the projected job's after {x['shield_patience']}"
            if arm != x["shield_patience"]
            else ""
        )
        + ", where the shield still overrides most often, and the evaluation and render jobs "
        "on the short-trained policy); CPU time torch spends on extra threads when a job gets "
        "more than one.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: measure, print the Markdown, save JSON, update BENCHMARKS.md.

    `argv` None means the defaults (`benchmarks.run_all` calls `main()` without arguments).
    """
    parser = arguments(__doc__, quick=True)
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON result")
    args = parser.parse_args(list(argv) if argv is not None else [])
    # The trainer's per-update log lines would bury the table.
    configure_logging(console_enabled=False, file_enabled=False)
    results = benchmark(quick=args.quick)
    save_results(
        "paper_grid",
        results,
        render_markdown(results),
        quick=args.quick,
        out=args.out,
        heading="## Paper grid cost",
        intro="CPU-hours and 8-core wall time of the full `config/paper.yaml` grid, "
        "extrapolated from short measured runs of every (env, algo) with the workflow's run "
        "configs (`benchmarks/paper_grid.py`).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
