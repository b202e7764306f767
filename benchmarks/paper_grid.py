"""Cost of the paper grid (`config/paper.yaml`): CPU-hours per job, per seed group, in total.

The paper config is resolved as the workflow resolves it: `check_workflow_config` fills the
schema's defaults (e.g. `shield_version` v0, `wm_version` v0, `lag_version` pid) and checks
the config, then `resolve_run_config` builds the run config of run 0 of every (env, algo), the
dict the train rule passes to `train_run`. For every (env, algo), in this one process with
torch on one thread, CPU time measured with `time.process_time()`:

1. train: `train_run` with that run config and a reduced `timesteps` (checkpoints and the run
   folder's files included). The process's CPU time is read after every policy update (a
   training callback); the difference between two readings is the CPU time of one update.
   Updates with the shield armed (the trainer's `shield/armed` metric) and without it form two
   phases, each costed by the mean of its updates; the first update (env reset, first calls)
   is left out of its phase's mean when that phase has others. What the run spent beyond the
   phase means (set-up, the first update's extra, the final writes) is a fixed cost per job.
   `ippo` and `ippo_lag` train `--updates` updates (one phase). `shield` trains
   `--measure-patience` updates unarmed, then `--armed-updates` armed: the measured run arms
   after `--measure-patience` updates instead of the config's `shield_patience`, so that the
   short run measures both phases (arming at 64 would measure only the unarmed one). The
   armed updates measured are the first ones, with the policy still far from the shield's
   corrections, when the filter searches most often. The projected job still
   arms at the config's `shield_patience`: `min(patience, updates)` unarmed updates, the rest
   armed, plus the fixed cost. `shield/seconds` (filter) and `shield/model_seconds` (model
   fits) are the trainer's wall-clock metrics, reported only as a breakdown of armed updates.
2. evaluate: `evaluate_run` on the run folder, as the evaluate rule runs it, with one batch of
   `--eval-episodes` episodes (shielded algorithms: with the shield on and off), scaled
   linearly to the config's `final_policy_eval_episodes`. The shield's cost is per copy-step;
   the unshielded policies' small cost per episode is a little higher in a batch smaller than
   the workflow's batches of 100, so theirs is slightly overestimated.
3. render: `render_run` with the config's `render.episodes`, CPU time of this process and of
   its finished children (the video encoder).
4. job start-up: a fresh interpreter importing the jobs' modules, measured once, added to
   every train, evaluate and render job.

Every run (seed) of a pair is costed as run 0. The wall time on 8 cores comes from a list
schedule of every job of the grid, longest ready job first, each evaluate and render job after
its train job, each train job holding `threads` cores (as Snakemake grants them) for its
single-thread CPU time; the same schedule with one core per train job is given too. Export,
aggregate, figures, report and the wandb upload are not measured.

Run: `python -m benchmarks.paper_grid` (or `python -m benchmarks.run_all paper_grid`); the
default budget takes about 3 minutes on a quiet 2-core machine, most of it the `intersection`
shield. `--quick` is a smoke test on `hazard_grid` with smaller updates (its numbers estimate
nothing). Results go to `benchmarks/out/paper_grid.json` (`paper_grid_quick.json`) and, except
with `--quick`, the section between the paper_grid markers of BENCHMARKS.md.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import copy  # noqa: E402
import heapq  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

from benchmarks.common import machine_info, write_section  # noqa: E402
from src.algos.ippo import IPPO  # noqa: E402
from src.algos.metrics import SHIELD_ARMED, SHIELD_MODEL_SECONDS, SHIELD_SECONDS  # noqa: E402
from src.algos.registry import get_algorithm  # noqa: E402
from src.algos.train import train_run  # noqa: E402
from src.config.base import VERSION_KEYS  # noqa: E402
from src.config.run import RunConfig  # noqa: E402
from src.config.workflow import check_workflow_config, resolve_run_config  # noqa: E402
from src.core.logging import configure_logging  # noqa: E402
from src.evaluation.evaluate import evaluate_run  # noqa: E402
from src.evaluation.render import render_run  # noqa: E402
from src.runfiles import RunFiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
PAPER_CONFIG = ROOT / "config" / "paper.yaml"
SECTION = "paper_grid"
SECTION_HEADING = "## Paper grid cost"
SECTION_INTRO = (
    "CPU-hours and 8-core wall time of the full `config/paper.yaml` grid, extrapolated from "
    "short measured runs of every (env, algo) with the workflow's run configs "
    "(`benchmarks/paper_grid.py`)."
)
TARGET_CPU_HOURS = 10.0  # the budget for the whole paper grid, shield_dec included
CORES = 8  # cores of the machine the grid is planned for
# The measured budget of the full run (about 3 minutes on a quiet 2-core machine).
BUDGET: dict[str, int | None] = {
    "updates": 16,  # updates of an algorithm without a shield
    "measure_patience": 3,  # unarmed shield updates before the measured run arms
    "armed_updates": 3,  # armed shield updates
    "eval_episodes": 20,  # evaluation episodes, one batch (the shield's cost is per copy-step)
    "render_episodes": None,  # None: the config's render.episodes
}
# --quick: a smoke test. The workflow config's values it replaces, and its budget.
QUICK_OVERRIDES: dict[str, Any] = {
    "envs": ["hazard_grid"],
    # Episodes short enough that the measured runs finish some (a run that finishes none is
    # refused); the constraint horizon, their cap, among the evaluated horizons.
    "base": {"rollouts": 16, "final_policy_eval_horizons": [1, 10, 32]},
    "env_params": {"hazard_grid": {"n_agents": 3, "max_steps": 32}},
    "algo_params": {"shield": {"critic_steps": 2, "model_epochs": 2.0}},
}
QUICK_BUDGET: dict[str, int | None] = {
    "updates": 3,
    "measure_patience": 2,
    "armed_updates": 1,
    "eval_episodes": 5,
    "render_episodes": 1,
}
# Modules a job imports before its work starts (the scripts of the train, evaluate, render rules).
JOB_IMPORTS = "import src.algos.train, src.evaluation.evaluate, src.evaluation.render"


# ---------------------------------------------------------------- the workflow's config


def load_workflow_config(
    path: Path = PAPER_CONFIG, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The workflow config at `path` with defaults filled and checked, as the workflow does it.

    `overrides` (only `--quick` has them) replace top-level keys before the check; a mapping
    is merged into the config's mapping of the same key, one level deep.
    """
    config = yaml.safe_load(path.read_text())
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping):
            config[key] = {**config.get(key, {}), **value}
        else:
            config[key] = copy.deepcopy(value)
    return check_workflow_config(config, check_components=True)


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


# ---------------------------------------------------------------- measuring


class UpdateClock:
    """A training callback reading this process's CPU time after every policy update."""

    def __init__(self) -> None:
        """No readings yet."""
        self.marks: list[float] = []
        self.armed: list[bool] = []

    def on_epoch_end(self, trainer: IPPO, epoch: int) -> None:
        """Nothing mid-update."""

    def on_update_end(self, trainer: IPPO) -> None:
        """CPU seconds so far and whether the shield filtered this update's rollout."""
        self.marks.append(time.process_time())
        self.armed.append(bool(trainer.updates[-1].get(SHIELD_ARMED) or False))


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
        "unarmed": means["unarmed"],
        "armed": means["armed"],
        "fixed": max(0.0, finished - started - costed),
        "intervals": intervals,
        "unarmed_updates": armed.count(False),
        "armed_updates": armed.count(True),
    }


def cpu_with_children() -> float:
    """CPU seconds of this process and of its children that have finished."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def startup_seconds() -> float:
    """CPU seconds of a fresh interpreter importing the modules of the workflow's jobs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", JOB_IMPORTS],
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_pair(
    workflow: Mapping[str, Any],
    env: str,
    algo: str,
    *,
    updates: int,
    measure_patience: int,
    armed_updates: int,
    eval_episodes: int,
    render_episodes: int,
    work_dir: Path,
) -> dict[str, Any]:
    """Train, evaluate and render run 0 of (env, algo) on the measured budget; CPU seconds.

    A shield arms after `min(measure_patience, shield_patience)` updates of the measured run
    and trains `armed_updates` armed updates; other algorithms train `updates` updates.
    """
    target = resolve_run_config(workflow, env, algo, 0)
    patience = arm_at = None
    measured = updates
    if target.shield is not None:
        patience = target.shield.shield_patience
        arm_at = min(measure_patience, patience)
        measured = arm_at + armed_updates
    eval_episodes = min(eval_episodes, target.evaluation.episodes)
    config = measured_config(target, updates=measured, eval_episodes=eval_episodes, patience=arm_at)
    run_dir = work_dir / env / algo / "run0"
    clock = UpdateClock()
    train_started = time.process_time()
    train_run(config, run_dir, progress=False, callbacks=[clock], threads=1)
    train_finished = time.process_time()
    costs = phase_costs(train_started, clock.marks, clock.armed, train_finished)
    if patience is not None and costs["armed"] is None:
        raise RuntimeError(f"{env}/{algo}: the shield never armed in {measured} updates")
    files = RunFiles(run_dir)
    rows = json.loads(files.updates_json.read_text())
    armed_rows = [row for row in rows if row.get(SHIELD_ARMED)]

    started = time.process_time()
    evaluate_run(run_dir, files.eval)
    eval_seconds = time.process_time() - started

    started = cpu_with_children()
    render_run(run_dir, files.videos, episodes=render_episodes)
    render_seconds = cpu_with_children() - started

    return {
        "env": env,
        "algo": algo,
        "run_config": {
            key: target.to_dict()[key]
            for key in (
                "n_agents",
                "num_envs",
                "rollouts",
                "timesteps",
                "learning_epochs",
                "mini_batches",
                "threads",
                "checkpoint_every",
                "final_policy_eval_episodes",
                "env_params",
                "algo_params",
            )
        },
        "versions": {key: target.version(key) for key in get_algorithm(algo).version_keys},
        "updates": target.ppo.num_updates,
        "patience": patience,
        "eval_episodes": target.evaluation.episodes,
        "eval_modes": len(get_algorithm(algo).eval_modes),
        "render_episodes": int(workflow["render"]["episodes"]),
        "measured": {
            "updates": measured,
            "shield_patience": arm_at,
            **costs,
            "train_seconds": train_finished - train_started,
            "eval_episodes": eval_episodes,
            "eval_seconds": eval_seconds,
            "render_episodes": render_episodes,
            "render_seconds": render_seconds,
            "filter_wall_seconds_per_armed_update": _mean_of(armed_rows, SHIELD_SECONDS),
            "model_wall_seconds_per_armed_update": _mean_of(armed_rows, SHIELD_MODEL_SECONDS),
        },
    }


def _mean_of(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """Mean of `key` over `rows` (None when no row has it)."""
    values = [float(row[key]) for row in rows if row.get(key) is not None]
    return sum(values) / len(values) if values else None


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


def benchmark(
    *,
    config_path: Path = PAPER_CONFIG,
    quick: bool = False,
    budget: Mapping[str, int | None] = BUDGET,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every (env, algo) of the config and project the grid (module docstring).

    `budget` holds `updates`, `measure_patience`, `armed_updates`, `eval_episodes` and
    `render_episodes` (None: the config's); `quick` applies `QUICK_OVERRIDES` to the config;
    `progress` gets one line per measured pair (default: printed at once).
    """
    say = progress or (lambda line: print(line, flush=True))
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    started = time.perf_counter()
    workflow = load_workflow_config(config_path, QUICK_OVERRIDES if quick else None)
    budget = dict(budget)
    if budget.get("render_episodes") is None:
        budget["render_episodes"] = int(workflow["render"]["episodes"])
    if min(int(value) for value in budget.values()) < 1:
        raise ValueError(f"every measured budget must be >= 1, got {budget}")
    startup = startup_seconds()
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in workflow["envs"]:
            for algo in workflow["algos"]:
                pair_started = time.perf_counter()
                pair = measure_pair(workflow, env, algo, **budget, work_dir=Path(tmp))
                pair["projected"] = project_pair(
                    pair, startup=startup, num_runs=workflow["num_runs"]
                )
                pairs.append(pair)
                say(
                    f"{env}/{algo}: {pair['measured']['updates']} updates measured in "
                    f"{time.perf_counter() - pair_started:.0f} s; "
                    f"{pair['projected']['run_cpu_hours']:.2f} CPU-h per run"
                )
    first = pairs[0]["run_config"]
    return {
        "config": str(
            config_path.relative_to(ROOT) if config_path.is_relative_to(ROOT) else config_path
        ),
        "quick": quick,
        "quick_overrides": QUICK_OVERRIDES if quick else None,
        "experiment": {
            "envs": list(workflow["envs"]),
            "algos": list(workflow["algos"]),
            "num_runs": workflow["num_runs"],
            "threads": workflow["threads"],
            "timesteps": first["timesteps"],
            "num_envs": first["num_envs"],
            "rollouts": first["rollouts"],
            "learning_epochs": first["learning_epochs"],
            "mini_batches": first["mini_batches"],
            "shield_patience": workflow["base"]["shield_patience"],
            "eval_episodes": workflow["base"]["final_policy_eval_episodes"],
            "eval_horizons": list(workflow["base"]["final_policy_eval_horizons"]),
            "render_episodes": workflow["render"]["episodes"],
            "versions": {key: workflow["base"][key] for key in VERSION_KEYS},
        },
        "budget": budget,
        "startup_seconds": startup,
        "pairs": pairs,
        "totals": totals(pairs, num_runs=workflow["num_runs"], threads=workflow["threads"]),
        "machine": {**machine_info(load_before), "seconds": time.perf_counter() - started},
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
        f"updates; `shield` {b['measure_patience']} unarmed + "
        f"{b['armed_updates']} armed updates (the measured run arms after "
        f"{b['measure_patience']} updates, the projected job after {x['shield_patience']}); "
        f"evaluation of the short-trained policy on {b['eval_episodes']} episodes (one "
        f"batch), scaled to {x['eval_episodes']:,}; one render job of "
        f"{_count(b['render_episodes'], 'episode')}; job start-up "
        f"{r['startup_seconds']:.1f} CPU-s.",
        "",
        "| env | algo | CPU-s / update, unarmed | CPU-s / update, armed | train CPU-h | "
        "evaluate CPU-h | render CPU-s | CPU-h / run | CPU-h / "
        f"{x['num_runs']} runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in r["pairs"]:
        s, p = pair["measured"], pair["projected"]
        lines.append(
            f"| {pair['env']} | {pair['algo']} | {_number(s['unarmed'])} | "
            f"{_number(s['armed'])} | {p['train_seconds'] / 3600:.2f} | "
            f"{p['eval_seconds'] / 3600:.3f} | {p['render_seconds']:.0f} | "
            f"{p['run_cpu_hours']:.2f} | {p['seeds_cpu_hours']:.2f} |"
        )
    lines.append(f"| **total** | | | | | | | | **{t['cpu_hours']:.1f}** |")
    met = "met" if t["within_target"] else "NOT met"
    lines += [
        "",
        f"- Total: {t['cpu_hours']:.1f} CPU-hours over {t['jobs']} jobs (target <= "
        f"{t['target_cpu_hours']:.0f}): {met}.",
        f"- Wall time on {t['cores']} cores: {t['wall_hours']:.1f} h with each train job "
        f"holding {t['train_cores']} cores (`threads: {x['threads']}`), "
        f"{t['wall_hours_one_core_per_train_job']:.1f} h with one core per train job "
        "(`threads: 1`). Greedy list schedule, longest ready job first; every job runs for "
        "its single-thread CPU time.",
        "- Per-update CPU seconds: differences of `time.process_time()` read after every "
        "update (checkpoints included), mean over each phase without the first update; "
        "`ippo` and `ippo_lag` have no shield, so all their updates are in the unarmed column."
        + _breakdown(r["pairs"]),
        "- Not measured: export, aggregate, figures, report and wandb upload (one small job "
        "per run or per experiment); how the cost of an update changes later in a run (the "
        "armed phase is measured right after arming, with models fitted on "
        f"{b['measure_patience']} updates of data instead of {x['shield_patience']}, and the "
        "evaluation and render jobs on the short-trained policy); CPU time torch spends on "
        "extra threads when a job gets more than one.",
    ]
    return "\n".join(lines)


def _breakdown(pairs: Sequence[Mapping[str, Any]]) -> str:
    """The shield's wall-clock split of an armed update (filter, model fits), if measured."""
    parts = [
        f"{pair['env']} {_number(pair['measured']['filter_wall_seconds_per_armed_update'])} s "
        f"filter + {_number(pair['measured']['model_wall_seconds_per_armed_update'])} s "
        "model fits"
        for pair in pairs
        if pair["measured"]["filter_wall_seconds_per_armed_update"] is not None
    ]
    if not parts:
        return ""
    return (
        " The shield's own wall-clock metrics per armed update (`shield/seconds`, "
        "`shield/model_seconds`): " + "; ".join(parts) + "."
    )


def write_json(results: Mapping[str, Any], path: Path) -> None:
    """Write `results` to `path` atomically (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: measure, print the Markdown, save JSON, update BENCHMARKS.md.

    `argv` None means the defaults (`benchmarks.run_all` calls `main()` without arguments).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=PAPER_CONFIG, help="workflow config")
    for key, help_text in (
        ("updates", "measured updates of ippo and ippo_lag"),
        ("measure_patience", "unarmed shield updates before the measured run arms"),
        ("armed_updates", "measured armed shield updates"),
        ("eval_episodes", "measured evaluation episodes"),
        ("render_episodes", "rendered episodes (default: the config's)"),
    ):
        flag = "--" + key.replace("_", "-")
        parser.add_argument(flag, type=int, default=BUDGET[key], dest=key, help=help_text)
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON result")
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the section from the saved JSON"
    )
    args = parser.parse_args(list(argv) if argv is not None else [])
    if args.render_only:
        saved = json.loads((args.out / "paper_grid.json").read_text())
        write_section(SECTION, render_markdown(saved), heading=SECTION_HEADING, intro=SECTION_INTRO)
        return 0
    budget = QUICK_BUDGET if args.quick else {key: getattr(args, key) for key in BUDGET}
    if any(value is not None and value < 1 for value in budget.values()):
        raise SystemExit(f"every measured budget must be >= 1, got {budget}")
    # The trainer's per-update log lines would bury the table.
    configure_logging(console_enabled=False, file_enabled=False)
    results = benchmark(config_path=args.config.resolve(), quick=args.quick, budget=budget)
    markdown = render_markdown(results)
    print(markdown)
    write_json(results, args.out / ("paper_grid_quick.json" if args.quick else "paper_grid.json"))
    if not args.quick:
        write_section(SECTION, markdown, heading=SECTION_HEADING, intro=SECTION_INTRO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
