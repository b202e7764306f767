"""An experiment's results in marl-eval's JSON format (`tables/marl_eval.json`).

marl-eval (instadeepai/marl-eval, README "Data Structure for Raw Experiment data") reads, and
BenchMARL and Mava write, one nested object:

    {environment: {task: {algorithm: {run: {step_u: {"step_count": int, metric: [values]},
                                            ..., "absolute_metrics": {metric: [values]}}}}}}

Here the environment is `ENVIRONMENT` ("safe_marl"), a task is an env of the experiment, an
algorithm is a policy of the summary table (`shield` and `shield (shield off)` for a shielded
algorithm: the deployed policy and its base policy) and a run is `run_{idx}`. The steps are
the run's training, one per policy update (`step_{update}`, `step_count` its env steps), each
metric a one-element list: the mean over the training episodes that finished in that update
(the history's episodes whose `t_end` falls in it). `absolute_metrics` are the final
evaluation's episodes, one value per episode in episode order (`eval_episodes.parquet`).

Metrics (docs/schemas.md, "`tables/marl_eval.json`"): `return` and `cost` (team return and
cost of the episode), `violation_within_{h}` for every evaluated horizon h (1 if the episode's
first violation is within h steps, else 0) and `shield_interventions` (agent-steps whose action
the shield replaced; 0 where no shield acts), in the steps and in `absolute_metrics` alike, as
marl-eval needs; the steps add `violation_rate` (share of the update's episodes with a
violation) and `episodes` (how many finished in the update). marl-eval also needs every
policy, run and task of an environment to have the same metrics: a metric some run lacks
(another horizon set, a policy that does not report its interventions) is left out of all.

An update in which no training episode finished repeats the means of the latest update before
it that had some (of the first one that had some, for the updates before it) with `episodes`
[0], so that every run of a task has a step per update; a run in which no training episode
finished has no steps, only `absolute_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from src.algos.registry import algorithm_names, get_algorithm
from src.config.recorded import read_run_config
from src.core.io import save_to_file
from src.runfiles import RunFiles
from src.schemas import EVAL_EPISODES_SCHEMA, HISTORY_SCHEMA, UPDATES_SCHEMA, read_parquet

__all__ = [
    "ABSOLUTE_METRICS",
    "ENVIRONMENT",
    "STEP_ONLY_METRICS",
    "marl_eval_data",
    "policy_name",
    "run_entries",
    "violation_metric",
    "write_marl_eval",
]

ENVIRONMENT = "safe_marl"
"""marl-eval's environment name: the family of every task of the pipeline."""

ABSOLUTE_METRICS = "absolute_metrics"
"""marl-eval's key of the final evaluation in a run."""

STEP_ONLY_METRICS = ("violation_rate", "episodes")
"""Metrics of the training steps that the final evaluation has no counterpart of."""


def violation_metric(horizon: int) -> str:
    """The name of the violation indicator within `horizon` steps."""
    return f"violation_within_{int(horizon)}"


def policy_name(algo: str, shielded: bool) -> str:
    """The policy as the summary table names it: the algorithm, or `algo (shield off)` for a
    shielded algorithm's base policy (as `src.analysis.style.policy_label`)."""
    has_shield = algo in algorithm_names() and get_algorithm(algo).shielded
    return f"{algo} (shield off)" if has_shield and not shielded else algo


def _update_means(
    history: pa.Table, updates: pa.Table, horizons: Sequence[int]
) -> list[tuple[str, dict[str, Any]]]:
    """(step key, step) per update: the means over the training episodes that finished in
    it, the means of the nearest update that had some when none did (module docstring)."""
    update = np.asarray(updates.column("update").to_pylist(), dtype=np.int64)
    global_step = np.asarray(updates.column("global_step").to_pylist(), dtype=np.int64)
    order = np.argsort(update, kind="stable")
    update, global_step = update[order], global_step[order]
    t_end = np.asarray(history.column("t_end").to_pylist(), dtype=np.int64)
    values = {
        "return": np.asarray(history.column("team_return").to_pylist(), dtype=np.float64),
        "cost": np.asarray(history.column("cost").to_pylist(), dtype=np.float64),
        "violated": np.asarray(history.column("violated").to_pylist(), dtype=bool),
        "first": np.asarray(history.column("first_violation_step").to_pylist(), dtype=np.int64),
        "replaced": np.asarray(
            history.column("shield_interventions").to_pylist(), dtype=np.float64
        ),
    }
    # Episode e finished in update u when global_step[u - 1] < t_end[e] <= global_step[u]
    # (t_end is 1-based, global_step counts the env steps taken when the update ran).
    which = np.searchsorted(global_step, t_end, side="left")
    counts = [int(np.count_nonzero(which == index)) for index in range(update.size)]
    means: dict[int, dict[str, float]] = {}
    for index, count in enumerate(counts):
        if count == 0:
            continue
        mask = which == index
        first = values["first"][mask]
        means[index] = {
            "return": float(values["return"][mask].mean()),
            "cost": float(values["cost"][mask].mean()),
            **{violation_metric(h): float(((first >= 1) & (first <= h)).mean()) for h in horizons},
            "shield_interventions": float(values["replaced"][mask].mean()),
            "violation_rate": float(values["violated"][mask].mean()),
        }
    if not means:
        return []
    measured = sorted(means)
    steps = []
    for index in range(update.size):
        source = max((j for j in measured if j <= index), default=measured[0])
        step: dict[str, Any] = {"step_count": int(global_step[index])}
        step.update({name: [value] for name, value in means[source].items()})
        step["episodes"] = [counts[index]]
        steps.append((f"step_{int(update[index])}", step))
    return steps


def _absolute(episodes: pa.Table, shielded: bool, horizons: Sequence[int]) -> dict[str, list]:
    """The final evaluation's episodes of one shield mode, in episode order."""
    rows = sorted(
        (row for row in episodes.to_pylist() if bool(row["shielded"]) == shielded),
        key=lambda row: row["episode"],
    )
    first = [int(row["first_violation_step"]) for row in rows]
    metrics: dict[str, list] = {
        "return": [float(row["team_return"]) for row in rows],
        "cost": [float(row["cost"]) for row in rows],
        **{violation_metric(h): [int(1 <= f <= h) for f in first] for h in horizons},
    }
    replaced = [row["shield_interventions"] for row in rows]
    if all(value is not None for value in replaced):
        metrics["shield_interventions"] = [int(value) for value in replaced]
    return metrics


def run_entries(run_dir: str | Path) -> tuple[str, int, dict[str, dict[str, Any]]]:
    """(task, run index, {policy: run entry}) of one run folder: its training steps (shared by
    a shielded algorithm's two policies) and each policy's `absolute_metrics`.

    Reads config.json (the run config it records, `src.config.recorded.read_run_config`: its
    horizons and the shield modes its final policy was evaluated in, `RunConfig.eval_modes`),
    history.parquet, updates.parquet and eval_episodes.parquet.
    """
    files = RunFiles(run_dir)
    _, config = read_run_config(files)
    horizons = list(config.evaluation.horizons)
    history = read_parquet(files.history, HISTORY_SCHEMA)
    updates = read_parquet(files.updates, UPDATES_SCHEMA)
    episodes = read_parquet(files.eval_episodes, EVAL_EPISODES_SCHEMA)
    steps = _update_means(history, updates, horizons)
    policies = {}
    for shielded in config.eval_modes:
        entry: dict[str, Any] = {key: dict(value) for key, value in steps}
        entry[ABSOLUTE_METRICS] = _absolute(episodes, shielded, horizons)
        policies[policy_name(config.algo, shielded)] = entry
    return config.env_name, config.run_idx, policies


def _common_metrics(data: Mapping[str, Any]) -> set[str]:
    """The absolute metrics every run entry of `data` has."""
    sets = [
        set(entry[ABSOLUTE_METRICS])
        for task in data.values()
        for runs in task.values()
        for entry in runs.values()
    ]
    return set.intersection(*sets) if sets else set()


def marl_eval_data(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The marl-eval object of the runs in `run_dirs` (module docstring)."""
    if isinstance(run_dirs, str | Path) or len(run_dirs) == 0:
        raise ValueError(f"run_dirs must be a non-empty list of run folders, got {run_dirs!r}")
    tasks: dict[str, dict[str, dict[str, Any]]] = {}
    seen: dict[tuple[str, str, int], Path] = {}
    for run_dir in run_dirs:
        task, run, policies = run_entries(run_dir)
        for policy, entry in policies.items():
            identity = (task, policy, run)
            if identity in seen:
                raise ValueError(
                    f"run {identity} appears twice: {seen[identity]} and {Path(run_dir)}"
                )
            seen[identity] = Path(run_dir)
            tasks.setdefault(task, {}).setdefault(policy, {})[f"run_{run}"] = entry
    # marl-eval reads every metric of the first run entry in every other one.
    keep = _common_metrics(tasks)
    kept_in_steps = keep | {"step_count", *STEP_ONLY_METRICS}
    for runs in (r for task in tasks.values() for r in task.values()):
        for entry in runs.values():
            for key, metrics in entry.items():
                kept = keep if key == ABSOLUTE_METRICS else kept_in_steps
                for name in [name for name in metrics if name not in kept]:
                    del metrics[name]
    return {ENVIRONMENT: tasks}


def write_marl_eval(run_dirs: Sequence[str | Path], path: str | Path) -> dict[str, Any]:
    """Write the marl-eval object of `run_dirs` to `path` (JSON, atomically); returns it. All
    runs are read and checked before anything is written."""
    data = marl_eval_data(run_dirs)
    target = Path(path)
    save_to_file(data, target.parent, target.name)
    return data
