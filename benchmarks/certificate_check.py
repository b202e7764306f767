"""Do the shields' certificates hold on reset seeds the project never uses?

Every shield run's deployed policy plays episodes of its certificate's horizon from reset seeds
of `src.seeds.CERTIFICATE_CHECK` (or `--seed-offset`), that no training, calibration or
evaluation uses: per run its certificate and the fresh violations with a 95% upper bound, per
env the pooled rate of the certified runs against `max_risk`. Every tested allowance is run
again on the calibration seeds with an episode loop of its own (the certificate must come out
the same; exit code 1 otherwise), timed against its peer, the run's evaluation.

Run: `python -m benchmarks.certificate_check --results results/default [--write]`. Results go
to `benchmarks/out/certificate_check.json` and the certificate_check section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    BENCHMARKS_MD,
    OUT,
    Clock,
    arguments,
    play,
    save_results,
    table,
    violating,
)
from src.algos.policy import load_actor
from src.algos.registry import shielded_algos
from src.algos.shield.budget import BudgetShield
from src.algos.shield.calibration import Certificate, fixed_sequence_test, load_certificate
from src.containment import inside
from src.envs.registry import make_vector_env
from src.evaluation.evaluate import evaluate_run
from src.seeds import CERTIFICATE_CHECK, CHECK_STRIDE, SeedUse
from src.stats import clopper_pearson_upper


def check_run(run_dir: Path, *, episodes: int, first_seed: int) -> dict[str, Any]:
    """The certificate of one shield run and the deployed policy's fresh episodes."""
    torch.set_num_threads(1)
    actor = load_actor(run_dir, shielded=True)
    if not isinstance(actor.action_filter, BudgetShield):
        raise ValueError(f"{run_dir} is not a run of the shield")
    certificate = load_certificate(run_dir)
    if certificate is None:
        raise ValueError(f"{run_dir}/policy.pt holds no certificate")
    seeds = range(first_seed, first_seed + episodes)
    batch = play(
        actor, actor.config, seeds, max_steps=certificate.horizon, batch_size=min(episodes, 500)
    )
    violations = violating(batch)
    reproduced, calibration_seconds = replay_calibration(run_dir, certificate)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        evaluate_run(run_dir, Path(scratch) / "eval.parquet")
    return {
        "run": str(run_dir),
        "env": actor.config.env_name,
        "algo": actor.config.algo,
        "max_risk": certificate.max_risk,
        "horizon": certificate.horizon,
        "certified": certificate.certified,
        "allowance": certificate.allowance,
        "calibration": f"{certificate.violations}/{certificate.episodes}",
        "p_value": certificate.p_value,
        "fresh_first_seed": first_seed,
        "fresh_episodes": episodes,
        "fresh_violations": violations,
        "fresh_rate": violations / episodes,
        "fresh_upper": float(clopper_pearson_upper(k=violations, n=episodes, delta=0.05)),
        "fresh_return": float(batch.reward.sum(axis=1).mean()),
        "reproduced": reproduced,
        "calibration_seconds": calibration_seconds,
        "evaluation_seconds": time.perf_counter() - started,
    }


def replay_calibration(run_dir: Path, certificate: Certificate) -> tuple[bool, float]:
    """Run the certificate's fixed-sequence test again on its calibration seeds (first_seed + i,
    i < `calibration_episodes`) with its tested allowances, playing the episodes with a loop of
    its own (`_calibration_episodes`, not the trainer's): whether every tested rung comes out as
    recorded (episodes played, violations, mean return), and the seconds it took (the
    calibration's cost)."""
    actor = load_actor(run_dir, shielded=True)
    config = actor.config
    params = config.env.constructor_params(max_steps=certificate.horizon)
    n = actor.action_filter.config.calibration_episodes
    seeds = range(certificate.first_seed, certificate.first_seed + n)

    def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
        actor.action_filter.allowance = allowance
        vec = make_vector_env(config.env_name, num_envs=stop - first, seed=None, **params)
        try:
            return _calibration_episodes(actor, vec, list(seeds[first:stop]), certificate.horizon)
        finally:
            vec.close()

    started = time.perf_counter()
    replayed = fixed_sequence_test(
        [rung["allowance"] for rung in certificate.tested],
        outcomes,
        episodes=n,
        max_risk=certificate.max_risk,
        delta=certificate.delta,
        horizon=certificate.horizon,
        first_seed=certificate.first_seed,
    )
    seconds = time.perf_counter() - started
    keys = ("allowance", "episodes", "violations")
    recorded = [[rung.get(key) for key in keys] for rung in certificate.tested]
    same = [[rung[key] for key in keys] for rung in replayed.tested] == recorded and all(
        math.isclose(new["return"], old.get("return", new["return"]), rel_tol=1e-9)
        for new, old in zip(replayed.tested, certificate.tested, strict=True)
    )
    return same, seconds


def _calibration_episodes(
    actor: Any, vec: Any, seeds: list[int], horizon: int
) -> tuple[int, float]:
    """One episode per seed in the copies of `vec` (reset with `seeds`, the actor seeded with
    the first), at most `horizon` steps: (episodes with a violation, summed team return)."""
    obs = vec.reset(seed=seeds)
    actor.reset(num_envs=len(seeds), seed=seeds[0])
    running = np.ones(len(seeds), dtype=bool)  # the copy's first episode has not ended
    violated = np.zeros(len(seeds), dtype=bool)
    total = 0.0
    for step in range(1, horizon + 1):
        result = vec.step(actor.act(obs, np.full(len(seeds), step, dtype=np.int64)))
        violated |= running & (np.asarray(result.cost) > 0).any(axis=1)
        total += float(np.asarray(result.reward).sum(axis=1)[running].sum(dtype=np.float64))
        ended = np.asarray(result.terminated).any(axis=1) | np.asarray(result.truncated).any(axis=1)
        running &= ~ended
        if not running.any():
            break
        obs = result.obs
    return int(violated.sum()), total


def shield_runs(results: Path) -> list[Path]:
    """The run folders of every shielded algorithm in a results folder
    (`runs/{env}/{algo}/run{i}`, `shield` and `shield_dec`), resolved inside it."""
    shielded = set(shielded_algos())
    runs = sorted(run for run in (results / "runs").glob("*/*/run*") if run.parent.name in shielded)
    return [
        inside(results, run.relative_to(results)) for run in runs if (run / "policy.pt").is_file()
    ]


def runs_to_play(
    parser: argparse.ArgumentParser, results: Path, *, episodes: int, within: SeedUse | None
) -> list[Path]:
    """The shield runs of `results` (`shield_runs`) that a command plays `episodes` episodes
    of each, run k from `within.first` + `CHECK_STRIDE` k; a parser error where there is
    none, where `episodes` is not in [1, `CHECK_STRIDE`] or where the runs need seeds beyond
    `within` (None: the command's own offset, not checked)."""
    runs = shield_runs(results)
    if not runs:
        parser.error(f"{results} holds no shield run with a policy.pt")
    if not 1 <= episodes <= CHECK_STRIDE:
        parser.error(f"--episodes {episodes}: must be in [1, {CHECK_STRIDE}]")
    if within is not None and within.first + CHECK_STRIDE * len(runs) > within.stop:
        parser.error(f"{len(runs)} runs need seeds beyond {within.describe()}")
    return runs


def markdown(records: Sequence[dict[str, Any]], command: str, machine: dict[str, Any]) -> str:
    """The section of BENCHMARKS.md."""
    horizons = ", ".join(str(h) for h in sorted({r["horizon"] for r in records}))
    groups = {
        f"{env}, {algo}": [r for r in records if (r["env"], r["algo"]) == (env, algo)]
        for env, algo in sorted({(r["env"], r["algo"]) for r in records})
    }
    pooled = []
    for label, mine in [*groups.items(), ("all", list(records))]:
        certified = [r for r in mine if r["certified"]]
        k = sum(r["fresh_violations"] for r in certified)
        n = sum(r["fresh_episodes"] for r in certified)
        calibration = sum(r["calibration_seconds"] for r in mine)
        evaluation = sum(r["evaluation_seconds"] for r in mine)
        pooled.append(
            f"{label} | {len(certified)}/{len(mine)} | {f'{k}/{n} = {k / n:.3f}' if n else '–'} | "
            f"{', '.join(sorted({str(r['max_risk']) for r in mine}))} | {calibration:.1f} | "
            f"{evaluation:.1f} | {calibration / evaluation:.2f}"
        )
    return "\n".join(
        [
            "## Certificates on fresh seeds",
            "",
            f"`{command}` ({machine['date']}, {machine['processor']}, {machine['cpus']} CPUs). "
            "Every shield run's deployed policy plays episodes of its certificate's horizon H "
            f"({horizons} steps) from reset seeds that no training, calibration or evaluation "
            "uses and no check looked at before (`src.seeds`); a certificate says, per run, "
            "P(violation within H steps) <= max_risk at 1 - delta = 95%. *Reproduced*: every "
            "tested allowance run again on the calibration seeds gives the recorded violations; "
            "*calibration s*: the time of those runs (the certificate's cost, one thread), "
            "*evaluation s*: the run's whole evaluation (`evaluate_run`, shield on and off), "
            "measured side by side.",
            "",
            *table(
                "run | certificate | allowance | calibration violations | p-value | reproduced | "
                "fresh violations | fresh rate [95% upper] | fresh return | calibration s | "
                "evaluation s | ratio",
                "llrrrlrrrrrr",
                (
                    f"{r['run']} | {'certified' if r['certified'] else 'no certificate'} | "
                    f"{r['allowance']:.4g} | {r['calibration']} | {r['p_value']:.3g} | "
                    f"{'yes' if r['reproduced'] else 'NO'} | "
                    f"{r['fresh_violations']}/{r['fresh_episodes']} | "
                    f"{r['fresh_rate']:.3f} [{r['fresh_upper']:.3f}] | {r['fresh_return']:.1f} | "
                    f"{r['calibration_seconds']:.1f} | {r['evaluation_seconds']:.1f} | "
                    f"{r['calibration_seconds'] / r['evaluation_seconds']:.2f}"
                    for r in records
                ),
            ),
            "",
            *table(
                "env, algorithm | certified runs | pooled fresh rate of certified runs | max_risk "
                "| calibration s | evaluation s | ratio",
                "lrrrrrr",
                pooled,
            ),
        ]
    )


def main(argv: Sequence[str] | None = None, *, out: Path = OUT, path: Path = BENCHMARKS_MD) -> int:
    """Command line: check every shield run of `--results`, print Markdown, save JSON (into
    `out`; with `--write` the section of `path` too)."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--results", type=Path, required=True, help="a results folder")
    parser.add_argument("--episodes", type=int, default=1000, help="fresh episodes per run")
    parser.add_argument("--seed-offset", type=int, default=CERTIFICATE_CHECK.first)
    args = parser.parse_args(argv)
    clock = Clock()
    fixed = CERTIFICATE_CHECK if args.seed_offset == CERTIFICATE_CHECK.first else None
    runs = runs_to_play(parser, args.results, episodes=args.episodes, within=fixed)
    records = [
        check_run(run, episodes=args.episodes, first_seed=args.seed_offset + CHECK_STRIDE * k)
        for k, run in enumerate(runs)
    ]
    root = args.results.absolute()
    for record, run in zip(records, runs, strict=True):
        # Named as the command names the results folder, not by this machine's paths.
        record["run"] = str(args.results / run.relative_to(root))
    command = (
        f"python -m benchmarks.certificate_check --results {args.results} "
        f"--episodes {args.episodes} --seed-offset {args.seed_offset}"
    )
    machine = clock.machine()
    text = markdown(records, command, machine)
    results = {"records": records, "machine": machine}
    save_results("certificate_check", results, text, quick=not args.write, out=out, path=path)
    return 0 if all(r["reproduced"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
