"""Final-policy evaluation against the bare batched env-plus-policy loop it is built on.

A tiny trained IPPO policy on `hazard_grid` plays the same episodes in three loops, timed in
turn: its peer, the bare loop (`vec.step(actor.act(obs, step))`, nothing recorded),
`collect_episodes` (the evaluation's masking and records) and `evaluate_run` (plus statistics
and the Parquet write).

Run: `python -m benchmarks.run_all evaluation`; writes the evaluation section of BENCHMARKS.md.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    BENCHMARKS_MD,
    Clock,
    best_times,
    measured_by,
    met,
    table,
    write_section,
)
from src.algos.policy import Actor, load_actor
from src.algos.train import train_run
from src.config.evaluation import DEFAULT_EVAL_BATCH
from src.config.run import make_run_config
from src.envs.registry import make_vector_env
from src.evaluation.evaluate import collect_episodes, evaluate_run

ENV = "hazard_grid"
EPISODES = 1_000
STEPS = 200
SEED_OFFSET = 1_000_000
RATIO_TARGET = 1.5


def train_policy(run_dir: Path) -> None:
    """A tiny IPPO run on hazard_grid (its episodes end in training) whose config asks for the
    benchmark's evaluation."""
    config = make_run_config(
        env_name=ENV,
        algo="ippo",
        num_envs=4,
        timesteps=4 * 32 * 4,
        rollouts=32,
        learning_epochs=1,
        mini_batches=2,
        env_params={"max_steps": 50},
        final_policy_eval_episodes=EPISODES,
        final_policy_eval_horizons=(1, 10, 50, 100, STEPS),
        final_policy_eval_seed_offset=SEED_OFFSET,
        checkpoint_every=100,
    )
    train_run(config, run_dir, progress=False)


class CountedEnvs:
    """`make_vec` of `collect_episodes`: one env per batch size, counting the vector steps."""

    def __init__(self, params: dict[str, Any]) -> None:
        """Envs of `ENV` with `params`."""
        self.params = params
        self.fresh()

    def fresh(self) -> CountedEnvs:
        """No env made and no step counted yet (each timed loop makes its envs, as
        `evaluate_run` does)."""
        self.steps, self.envs = 0, {}
        return self

    def __call__(self, copies: int) -> Any:
        """The env of `copies` copies (made once), its steps counted."""
        if copies not in self.envs:
            vec = self.envs[copies] = make_vector_env(
                ENV, num_envs=copies, seed=None, **self.params
            )
            step = vec.step

            def counted(actions: np.ndarray) -> Any:
                self.steps += 1
                return step(actions)

            vec.step = counted
        return self.envs[copies]


def bare_loop(actor: Actor, vec: CountedEnvs, batch: int) -> None:
    """The reference: batched env and policy for the same episodes, nothing recorded."""
    for start in range(0, EPISODES, batch):
        copies = min(batch, EPISODES - start)
        obs = vec(copies).reset(seed=[SEED_OFFSET + start + e for e in range(copies)])
        actor.reset(num_envs=copies, seed=SEED_OFFSET + start)
        episode_step = np.ones(copies, dtype=np.int64)
        for _ in range(STEPS):
            obs = vec(copies).step(actor.act(obs, episode_step)).obs
            episode_step += 1


def measure(*, repeats: int = 5) -> dict[str, Any]:
    """Train the policy, then time the three loops in turn, `repeats` rounds."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run0"
        train_policy(run_dir)
        actor = load_actor(run_dir, shielded=False)
        params = actor.config.env.constructor_params(max_steps=STEPS)
        bare, collect = CountedEnvs(params), CountedEnvs(params)
        seeds = [SEED_OFFSET + i for i in range(EPISODES)]
        loops = {
            "bare": lambda: bare_loop(actor, bare.fresh(), DEFAULT_EVAL_BATCH),
            "collect": lambda: collect_episodes(
                make_vec=collect.fresh(),
                actor=actor,
                seeds=seeds,
                max_steps=STEPS,
                batch_size=DEFAULT_EVAL_BATCH,
                actor_seed=SEED_OFFSET,
            ),
            "evaluate_run": lambda: evaluate_run(run_dir, Path(tmp) / "eval.parquet"),
        }
        best = best_times(loops, repeats=repeats)
    return {
        "best": best,
        "steps": {"bare": bare.steps, "collect": collect.steps},
        "batch": DEFAULT_EVAL_BATCH,
        "repeats": repeats,
    }


def to_markdown(results: dict[str, Any], machine: dict[str, Any]) -> str:
    """The section body (between the markers) for `results` of `measure`."""
    best, steps = results["best"], results["steps"]
    rows = [
        ("bare loop: `vec.step(actor.act(obs, step))`", "bare", steps["bare"]),
        ("`collect_episodes` (masking, per-step records)", "collect", steps["collect"]),
        ("`evaluate_run` (plus statistics, Parquet)", "evaluate_run", steps["collect"]),
    ]
    ratio = best["evaluate_run"] / best["bare"]
    libraries = f"NumPy {machine['numpy']}, torch {machine['torch']}"
    return "\n".join(
        [
            measured_by(
                "`python -m benchmarks.run_all evaluation` (`make bench`)",
                machine,
                libraries,
                "one thread",
            )
            + " The machine was shared, so times are CPU seconds of the benchmark process (best "
            f"of {results['repeats']} rounds that run the loops in turn), not wall time.",
            "",
            f"{EPISODES:,} episodes x {STEPS} steps on `{ENV}` (2 agents) with a tiny trained "
            f"IPPO policy, in batches of {results['batch']} env copies:",
            "",
            *table(
                "loop | vector steps | CPU seconds | episode-steps/s | ratio to bare",
                "lrrrr",
                [
                    f"{label} | {count:,} | {best[key]:.2f} | {EPISODES * STEPS / best[key]:,.0f}"
                    f" | {best[key] / best['bare']:.2f}"
                    for label, key, count in rows
                ],
            ),
            "",
            f"- `evaluate_run` / bare loop: {ratio:.2f} (target <= {RATIO_TARGET}): "
            f"{met(ratio <= RATIO_TARGET, '**missed**')}",
        ]
    )


def main(*, repeats: int = 5, path: Path = BENCHMARKS_MD) -> dict[str, Any]:
    """Measure, print the section and write it into `path`; returns the results."""
    clock = Clock()
    results = measure(repeats=repeats)
    body = to_markdown(results, clock.machine())
    print(body)
    write_section(
        "evaluation",
        body,
        heading="## Evaluation",
        intro="Final-policy evaluation against the bare batched env-plus-policy loop "
        "(`benchmarks/evaluation.py`).",
        path=path,
    )
    return results


if __name__ == "__main__":
    main()
