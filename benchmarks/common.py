"""What every benchmark shares: where its results go, the clocks and loops it times with, the
tables it writes, and the configs, runs and episodes it measures. A benchmark script holds
what it measures and its section's words; what it does the way another one does lives here.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import torch
import yaml

from src.algos.metrics import SHIELD_ARMED
from src.analysis.files import write_text
from src.config.run import RunConfig, make_run_config
from src.config.workflow import check_workflow_config
from src.envs.registry import make_vector_env
from src.evaluation.episodes import EpisodeBatch, first_violation_steps
from src.evaluation.evaluate import collect_episodes
from src.runfiles import RunFiles

T = TypeVar("T")
K = TypeVar("K")
ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = Path(__file__).with_name("BENCHMARKS.md")
OUT = Path(__file__).with_name("out")
CONFIG = ROOT / "config" / "config.yaml"  # the default experiment
PAPER = ROOT / "config" / "paper.yaml"  # the paper's experiment
ACTION_BLOCK = 64  # distinct pre-drawn action arrays a timed loop cycles through

# ------------------------------------------------------------------ sections and results


def markers(name: str) -> tuple[str, str]:
    """The HTML comments that delimit benchmark `name`'s block in BENCHMARKS.md."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(
    name: str, body: str, *, heading: str = "", intro: str = "", path: Path = BENCHMARKS_MD
) -> None:
    """Replace the block of benchmark `name` in `path` atomically, leaving the others alone; a
    missing file or block is created, the block appended after `heading` and `intro`."""
    start, end = markers(name)
    block = f"{start}\n{body}\n{end}"
    text = (
        path.read_text() if path.exists() else "# Benchmarks\n\nRun them all with `make bench`.\n"
    )
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        preface = "".join(f"{part}\n\n" for part in (heading, intro) if part)
        text = text.rstrip("\n") + f"\n\n{preface}{block}\n"
    write_text(text, path)


def save_results(
    name: str,
    results: Mapping[str, Any],
    markdown: str,
    *,
    quick: bool,
    out: Path = OUT,
    path: Path = BENCHMARKS_MD,
    heading: str = "",
    intro: str = "",
) -> None:
    """Print benchmark `name`'s `markdown`, save its `results` as `<out>/<name>.json`
    (`<name>_quick.json` for a smoke run or a run not recorded) and, unless `quick`, make
    `markdown` its section of `path` (`heading` and `intro` where the section is new)."""
    print(markdown)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2, default=float) + "\n"
    write_text(text, out / f"{name}{'_quick' if quick else ''}.json")
    if not quick:
        write_section(name, markdown, heading=heading, intro=intro, path=path)


# ------------------------------------------------------------------ machine, clocks and timing


class Clock:
    """Wall and CPU seconds of this process since the clock started, and the load average
    then. The machine is shared: CPU time counts only this process's work and is the steadier
    figure; wall time is what a user waits."""

    def __init__(self) -> None:
        """Start now."""
        self.load = list(os.getloadavg())
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    @property
    def wall(self) -> float:
        """Wall seconds so far."""
        return time.perf_counter() - self._wall

    @property
    def cpu(self) -> float:
        """CPU seconds of this process so far."""
        return time.process_time() - self._cpu

    def rates(self, steps: int) -> dict[str, float]:
        """`steps` per wall second and per CPU second so far."""
        return {"steps_per_s": steps / self.wall, "steps_per_cpu_s": steps / self.cpu}

    def machine(self) -> dict[str, Any]:
        """`machine_info` of the load at the start, with the seconds so far."""
        return {**machine_info(self.load), "wall_seconds": self.wall, "cpu_seconds": self.cpu}


def machine_info(load_before: Sequence[float]) -> dict[str, Any]:
    """The machine a benchmark ran on, with the load average before it and now."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
    }


def measured_by(command: str, m: Mapping[str, Any], libraries: str, threads: str) -> str:
    """The first sentences of a rate section: the `command` (quoted as it should read), date,
    machine `m`, `libraries`, `threads`, the time it took and the load averages."""
    load = {when: ", ".join(f"{v:.2f}" for v in m[f"load_{when}"]) for when in ("before", "after")}
    return (
        f"Measured by {command} on {m['date']}, {m['processor']}, {m['cpus']} logical CPUs, "
        f"Python {m['python']}, {libraries}; {threads}, {m['wall_seconds']:.0f} s in total. "
        f"Load average (1, 5, 15 min) before: {load['before']}; after: {load['after']}."
    )


def cpu_seconds(call: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[float, T]:
    """CPU seconds of this process for one `call(*args, **kwargs)`, and its result."""
    started = time.process_time()
    result = call(*args, **kwargs)
    return time.process_time() - started, result


def best_times(
    calls: Mapping[str, Callable[[], object]],
    *,
    repeats: int,
    clock: Callable[[], float] = time.process_time,
) -> dict[str, float]:
    """The fastest of `repeats` rounds of each call (seconds of `clock`, CPU by default); every
    round calls them all in turn, so that a change of load hits them alike."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for key, call in calls.items():
            started = clock()
            call()
            best[key] = min(best[key], clock() - started)
    return best


def best_rates(
    steps: Mapping[K, Callable[[int], None]], *, min_seconds: float, repeats: int
) -> dict[K, tuple[float, float]]:
    """The best (wall, CPU) rates of calls `step(i)` of each stepper over `repeats` windows of
    at least `min_seconds` (and one batch of calls), the steppers' windows taken in turns."""
    if min_seconds < 0 or repeats < 1:
        raise ValueError(f"need min_seconds >= 0 and repeats >= 1, got {min_seconds}, {repeats}")
    best = dict.fromkeys(steps, (0.0, 0.0))
    for _ in range(repeats):
        for key, step in steps.items():
            calls, batch, clock = 0, 8, Clock()
            while not calls or clock.wall < min_seconds:
                for _ in range(batch):
                    step(calls)
                    calls += 1
                batch = min(batch * 2, 4096)
            wall, cpu = calls / clock.wall, calls / max(clock.cpu, 1e-9)
            best[key] = (max(best[key][0], wall), max(best[key][1], cpu))
    return best


def patch(owner: Any, name: str, new: Any) -> Callable[[], None]:
    """Set `owner.name = new`; returns the undo (what the instance held before, if anything)."""
    missing = object()
    before = vars(owner).get(name, missing)
    setattr(owner, name, new)
    return lambda: delattr(owner, name) if before is missing else setattr(owner, name, before)


class CpuSplit:
    """CPU seconds spent in chosen methods of chosen objects (wrapped until `restore`)."""

    def __init__(self) -> None:
        """No method wrapped yet."""
        self.seconds: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, method: str, key: str | None = None) -> None:
        """Add the CPU time of every call of `owner.method` to `seconds[key]` (key: `method`)."""
        original, key = getattr(owner, method), key or method

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] += time.process_time() - started

        self._undo.append(patch(owner, method, timed))

    def snapshot(self) -> dict[str, float]:
        """The totals so far."""
        return dict(self.seconds)

    def restore(self) -> None:
        """Unwrap every method."""
        while self._undo:
            self._undo.pop()()


class AfterUpdate:
    """A training callback that calls `then(trainer)` after every policy update."""

    def __init__(self, then: Callable[[Any], None]) -> None:
        """Call `then` after each update."""
        self.then = then

    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        """Nothing mid-update."""

    def on_update_end(self, trainer: Any) -> None:
        """The update is complete and counted."""
        self.then(trainer)


def cycling(step: Callable[[Any], object], actions: Sequence[Any]) -> Callable[[int], None]:
    """A stepper: call i steps with `actions[i % len(actions)]`."""
    return lambda i: step(actions[i % len(actions)])  # type: ignore[return-value]


def dict_loop(envs: Sequence[Any]) -> Callable[[Sequence[Sequence[Any]]], None]:
    """The loop a user writes with PettingZoo alone: every ParallelEnv of `envs` (reset first
    with its index as seed) stepped with a dict of its row of actions, reset when it ends."""
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    agents = list(envs[0].possible_agents)

    def step(actions: Sequence[Sequence[Any]]) -> None:
        for env, row in zip(envs, actions, strict=True):
            env.step(dict(zip(agents, row, strict=True)))
            if not env.agents:
                env.reset()

    return step


# ------------------------------------------------------------------ tables and verdicts


def table(head: str, align: str, rows: Iterable[str | Sequence[object]]) -> list[str]:
    """The lines of a Markdown table: its `head`, `align` one letter per column (`l` or `r`),
    then `rows`; the head and a row are strings of cells joined by " | ", or a row its cells (an
    empty cell is one space wide)."""

    def line(cells: str | Sequence[object]) -> str:
        cells = cells.split(" | ") if isinstance(cells, str) else cells
        return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"

    separator = "|" + "|".join("---:" if side == "r" else "---" for side in align) + "|"
    return [line(head), separator, *(line(row) for row in rows)]


def met(ok: bool, missed: str = "NOT met") -> str:
    """A target's verdict."""
    return "met" if ok else missed


# ------------------------------------------------------------------ configs, runs and episodes


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1, or an error that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def arguments(doc: str, *, quick: bool = False, write: bool = False) -> argparse.ArgumentParser:
    """A benchmark's command line, described by the first line of its docstring `doc`: with
    `--quick` (a smoke run that writes no section) and `--write` (record the section) if asked."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if quick:
        parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    if write:
        parser.add_argument("--write", action="store_true", help="write the BENCHMARKS.md section")
    return parser


def experiment(path: Path = CONFIG) -> dict[str, Any]:
    """A workflow config as written (the default experiment's unless `path`)."""
    return yaml.safe_load(path.read_text())


def workflow_config(
    path: Path = PAPER, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The workflow config at `path` with defaults filled and checked, as the workflow does it;
    `overrides` (a smoke run's) replace top-level keys first, a mapping merged one level deep."""
    config = experiment(path)
    for key, value in (overrides or {}).items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, Mapping) else value
    return check_workflow_config(copy.deepcopy(config), check_components=True)


def run_config(
    experiment: Mapping[str, Any], env_name: str, algo: str, **base: Any
) -> dict[str, Any]:
    """Run 0's config of (`env_name`, `algo`) in a workflow config as written, with `base`
    values (those not None) over its `base`; wandb off."""
    values = {k: v for k, v in experiment["base"].items() if k != "use_wandb"}
    values |= {k: v for k, v in base.items() if v is not None}
    env_params = dict(experiment["env_params"][env_name])
    return make_run_config(
        env_name=env_name,
        algo=algo,
        n_agents=env_params.pop("n_agents"),
        env_params=env_params,
        algo_params=dict(experiment.get("algo_params", {}).get(algo, {})),
        threads=experiment.get("threads", 1),
        **values,
    )


def armed_updates(run_dir: Path) -> list[dict[str, Any]]:
    """The metrics of a run's updates whose rollout the shield filtered."""
    rows = json.loads(RunFiles(run_dir).updates_json.read_text())
    return [row for row in rows if row.get(SHIELD_ARMED)]


def deployed(evaluation: pd.DataFrame, horizon: int | None = None) -> pd.Series:
    """The evaluation row of the deployed policy (shielded, if the run has a shield) at
    `horizon` (default: the first)."""
    rows = evaluation[evaluation["shielded"] | ~evaluation["shielded"].any()]
    return rows[rows["horizon"] == horizon].iloc[0] if horizon is not None else rows.iloc[0]


def play(
    actor: Any, config: RunConfig, seeds: Sequence[int], *, max_steps: int, batch_size: int
) -> EpisodeBatch:
    """One episode of `actor` on `config`'s env per reset seed, at most `max_steps` steps,
    `batch_size` copies at a time, the actor seeded with the first seed (`collect_episodes`, as
    the evaluation plays them)."""
    params = config.env.constructor_params(max_steps=max_steps)
    return collect_episodes(
        make_vec=lambda copies: make_vector_env(
            config.env_name, num_envs=copies, seed=None, **params
        ),
        actor=actor,
        seeds=list(seeds),
        max_steps=max_steps,
        batch_size=batch_size,
        actor_seed=int(seeds[0]),
    )


def violating(batch: EpisodeBatch) -> int:
    """Episodes of `batch` with a violation."""
    return int((first_violation_steps(batch.violation, batch.length) > 0).sum())
