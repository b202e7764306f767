"""Final-policy evaluation against the bare batched env-plus-policy loop it is built on.

``python -m benchmarks.run_all evaluation`` (or ``python -m benchmarks.evaluation``) trains a
tiny IPPO policy on ``hazard_grid``, then times, in turn and under the same load:

- the bare loop: ``make_vector_env`` with E copies, ``vec.reset(seeds)``, ``actor.act`` and
  ``vec.step`` for the same number of steps, nothing recorded;
- ``collect_episodes``: the same loop with the evaluation's masking and per-step records;
- ``evaluate_run``: all of it plus the per-horizon statistics and the Parquet write.

It reports times and ratios to the bare loop in the "Evaluation" section of
``benchmarks/BENCHMARKS.md`` between its markers.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import BENCHMARKS_MD, write_section
from src.algos.policy import Actor, load_actor
from src.algos.train import train_run
from src.config.evaluation import DEFAULT_EVAL_BATCH
from src.config.run import make_run_config
from src.envs.registry import make_vector_env
from src.evaluation.evaluate import collect_episodes, evaluate_run
from src.runfiles import RunFiles

SECTION_HEADING = "## Evaluation"

ENV = "hazard_grid"
EPISODES = 1_000
STEPS = 200
SEED_OFFSET = 1_000_000
RATIO_TARGET = 1.5


def train_policy(run_dir: Path) -> None:
    """A tiny IPPO run on hazard_grid whose config asks for the benchmark's evaluation."""
    config = make_run_config(
        env_name=ENV,
        algo="ippo",
        num_envs=4,
        timesteps=4 * 32 * 2,
        rollouts=32,
        learning_epochs=1,
        mini_batches=2,
        env_params={"max_steps": 100},
        final_policy_eval_episodes=EPISODES,
        final_policy_eval_horizons=(1, 10, 50, 100, STEPS),
        final_policy_eval_seed_offset=SEED_OFFSET,
        checkpoint_every=100,
    )
    train_run(config, run_dir, progress=False)


def bare_loop(actor: Actor, params: dict, *, batch_size: int) -> int:
    """The reference: batched env and policy for the same episodes, nothing recorded."""
    steps = 0
    envs: dict[int, object] = {}
    for start in range(0, EPISODES, batch_size):
        copies = min(batch_size, EPISODES - start)
        if copies not in envs:
            envs[copies] = make_vector_env(ENV, num_envs=copies, seed=None, **params)
        vec = envs[copies]
        obs = vec.reset(seed=[SEED_OFFSET + start + e for e in range(copies)])
        actor.reset(num_envs=copies, seed=SEED_OFFSET + start)
        episode_step = np.ones(copies, dtype=np.int64)
        for _ in range(STEPS):
            obs = vec.step(actor.act(obs, episode_step)).obs
            episode_step += 1
            steps += 1
    for vec in envs.values():
        vec.close()
    return steps


def evaluation_loop(actor: Actor, params: dict, *, batch_size: int) -> int:
    """`collect_episodes` on the same episodes; returns the vector steps it took."""
    count = {"steps": 0}

    def make_vec(copies: int) -> object:
        vec = make_vector_env(ENV, num_envs=copies, seed=None, **params)
        step = vec.step

        def counted(actions: np.ndarray) -> object:
            count["steps"] += 1
            return step(actions)

        vec.step = counted
        return vec

    collect_episodes(
        make_vec=make_vec,
        actor=actor,
        seeds=[SEED_OFFSET + i for i in range(EPISODES)],
        max_steps=STEPS,
        batch_size=batch_size,
        actor_seed=SEED_OFFSET,
    )
    return count["steps"]


def timed(function: Callable[[], object]) -> tuple[float, object]:
    """CPU time of this process for one call, and its result.

    CPU time rather than wall time: on a shared machine the wall time mostly measures how
    long the other processes held the cores.
    """
    start = time.process_time()
    result = function()
    return time.process_time() - start, result


def measure(*, repeats: int = 5) -> dict:
    """Train the policy, then time the three loops in turn, `repeats` rounds."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run0"
        train_policy(run_dir)
        config = json.loads(RunFiles(run_dir).config.read_text())
        params = {**config["env_params"], "n_agents": config["n_agents"], "max_steps": STEPS}
        actor = load_actor(run_dir, shielded=False)
        batch = DEFAULT_EVAL_BATCH
        times: dict[str, list[float]] = {"bare": [], "collect": [], "evaluate_run": []}
        steps: dict[str, int] = {}
        # Rounds alternate the three loops so that a change of load hits them alike.
        for _ in range(repeats):
            t, steps["bare"] = timed(lambda: bare_loop(actor, params, batch_size=batch))
            times["bare"].append(t)
            t, steps["collect"] = timed(lambda: evaluation_loop(actor, params, batch_size=batch))
            times["collect"].append(t)
            t, _ = timed(lambda: evaluate_run(run_dir, Path(tmp) / "eval.parquet"))
            times["evaluate_run"].append(t)
    best = {name: min(values) for name, values in times.items()}
    return {"best": best, "steps": steps, "batch": batch, "repeats": repeats}


def to_markdown(results: dict, *, load_before: tuple, load_after: tuple, seconds: float) -> str:
    """The section body (between the markers) for `results` of `measure`."""
    best, steps, batch = results["best"], results["steps"], results["batch"]
    bare = best["bare"]
    rows = [
        ("bare loop: `vec.step(actor.act(obs, step))`", "bare", steps["bare"]),
        ("`collect_episodes` (masking, per-step records)", "collect", steps["collect"]),
        ("`evaluate_run` (plus statistics, Parquet)", "evaluate_run", steps["collect"]),
    ]
    lines = [
        "| loop | vector steps | CPU seconds | episode-steps/s | ratio to bare |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key, vector_steps in rows:
        lines.append(
            f"| {label} | {vector_steps:,} | {best[key]:.2f} | "
            f"{EPISODES * STEPS / best[key]:,.0f} | {best[key] / bare:.2f} |"
        )
    ratio = best["evaluate_run"] / bare
    verdict = "met" if ratio <= RATIO_TARGET else "**missed**"
    machine = (
        f"{platform.machine()}, {os.cpu_count()} logical CPUs, Python "
        f"{platform.python_version()}, NumPy {np.__version__}, torch {torch.__version__}"
    )
    load = ", ".join(f"{value:.2f}" for value in load_before)
    load_end = ", ".join(f"{value:.2f}" for value in load_after)
    return "\n".join(
        [
            "Measured by `python -m benchmarks.run_all evaluation` (`make bench`) on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}; one thread, "
            f"{seconds:.0f} s in total. Load average (1, 5, 15 min) before: {load}; after: "
            f"{load_end}. The machine was shared, so times are CPU seconds of the benchmark "
            f"process (best of {results['repeats']} rounds that run the loops in turn), not "
            "wall time.",
            "",
            f"{EPISODES:,} episodes x {STEPS} steps on `{ENV}` (2 agents) with a tiny trained "
            f"IPPO policy, in batches of {batch} env copies:",
            "",
            *lines,
            "",
            f"- `evaluate_run` / bare loop: {ratio:.2f} (target <= {RATIO_TARGET}): {verdict}",
        ]
    )


def main(*, repeats: int = 5, path: Path = BENCHMARKS_MD) -> dict:
    """Measure, print the section and write it into `path`; returns the results."""
    load_before = os.getloadavg()
    start = time.perf_counter()
    results = measure(repeats=repeats)
    body = to_markdown(
        results,
        load_before=load_before,
        load_after=os.getloadavg(),
        seconds=time.perf_counter() - start,
    )
    print(body)
    write_section(
        "evaluation",
        body,
        heading=SECTION_HEADING,
        intro="Final-policy evaluation against the bare batched env-plus-policy loop "
        "(`benchmarks/evaluation.py`).",
        path=path,
    )
    return results


if __name__ == "__main__":
    main()
