"""How a trained shield's risk and return move with the allowance it is deployed at: what a
certificate's ladder of allowances (`certify_multiples`) is chosen from, on spent seeds.

Every trained shield run of a results folder (`runs/{env}/{algo}/run{i}` of a shielded
algorithm, with its policy.pt) is deployed at each allowance of `--allowances` on `--episodes`
episodes of its constraint horizon, from reset seeds of the spent tuning range
(`src.seeds.TUNING`, `LADDER_SHIFT` on, where the tuning benchmark plays none): per run and
allowance, the violating episodes with their 95% Clopper-Pearson interval and the mean return.
Nothing of the run's own calibration or evaluation seeds is played, so a ladder chosen from
this table leaves them untouched.

Run: `python -m benchmarks.ladder --results results/paper [--allowances ...] [--write]`.
Results go to `benchmarks/out/ladder.json` and, with `--write`, the ladder section of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    Clock,
    arguments,
    cpu_seconds,
    play,
    positive_int,
    save_results,
    table,
    violating,
)
from src.algos.policy import load_actor
from src.algos.registry import shielded_algos
from src.containment import inside
from src.seeds import TUNING
from src.stats import clopper_pearson_interval

LADDER_SHIFT = 800_000
"""The first reset seed played is `TUNING.first` + this (the tuning benchmark plays the range's
first half million for evaluation and the next for calibration, below 600,000)."""
ALLOWANCES = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.015)
"""The allowances deployed by default, most cautious first."""


def shield_runs(results: Path) -> list[Path]:
    """The run folders of shielded algorithms in `results` that hold a trained policy, in
    order. Every folder is resolved inside `results` before it is listed or read (a link that
    leaves it is a `ContainmentError`); a folder without `runs/` is a `ValueError` naming it."""
    top = inside(results, "runs")
    if not top.is_dir():
        raise ValueError(f"{results}: no runs/ folder; give a results folder of the workflow")
    runs = []
    shielded = set(shielded_algos())
    for env in sorted(p.name for p in top.iterdir()):
        for algo in sorted(shielded):
            folder = inside(results, Path("runs", env, algo))
            if not folder.is_dir():
                continue
            for run in sorted(p.name for p in folder.iterdir() if p.name.startswith("run")):
                path = inside(results, Path("runs", env, algo, run))
                if inside(results, path / "policy.pt").is_file():
                    runs.append(path)
    return runs


def allowance(text: str) -> float:
    """An argparse type: an allowance in (0, 1], or an error that names the value."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an allowance in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected an allowance in (0, 1], got {value:g}")
    return value


def deploy(run: Path, allowances: Sequence[float], episodes: int) -> list[dict[str, Any]]:
    """`run`'s shield deployed at each allowance on `episodes` episodes of its constraint
    horizon from the ladder's seeds: one row per allowance."""
    actor = load_actor(run)
    config = actor.config
    horizon = int(config.constraint_horizon)
    first = TUNING.first + LADDER_SHIFT
    seeds = range(first, first + episodes)
    rows = []
    for allowance in allowances:
        actor.action_filter.allowance = allowance
        cpu, batch = cpu_seconds(
            play, actor, config, seeds, max_steps=horizon, batch_size=min(episodes, 100)
        )
        k = violating(batch)
        low, high = clopper_pearson_interval(k=k, n=episodes, confidence=0.95)
        rows.append(
            {
                "env": config.env_name,
                "algo": config.algo,
                "run": int(config.run_idx),
                "horizon": horizon,
                "max_risk": float(actor.action_filter.config.max_risk),
                "allowance": allowance,
                "episodes": episodes,
                "violations": k,
                "low": float(low),
                "high": float(high),
                "return": float(batch.reward.sum() / episodes),
                "cpu_s": cpu,
            }
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def ran(results: Mapping[str, Any]) -> str:
    """The first line of a section of `record_shield_runs`: command, date, machine, minutes."""
    m = results["machine"]
    return (
        f"`{results['command']}` on {m['date']}: {m['platform']}, {m['cpus']} CPUs; "
        f"{results['minutes']:.1f} min."
    )


def render_markdown(results: Mapping[str, Any]) -> str:
    """The ladder section: one row per run and allowance."""
    return "\n".join(
        [
            ran(results),
            "",
            f"Each trained shield run of `{results['results']}` deployed at each allowance on "
            f"{results['episodes']} episodes of its constraint horizon H from reset seed "
            f"{results['first_seed']:,} on (`src.seeds.TUNING`, spent). P(viol. <= H): the "
            "violating share with its 95% Clopper-Pearson interval; return: the mean team "
            "return over those episodes.",
            "",
            *table(
                "env | algo | run | H | allowance | P(viol. <= H) [95% CI] | return",
                "lllrrrr",
                (
                    f"{r['env']} | {r['algo']} | {r['run']} | {r['horizon']} | "
                    f"{r['allowance']:g} | {r['violations'] / r['episodes']:.3f} "
                    f"[{r['low']:.3f}, {r['high']:.3f}] | {r['return']:.1f}"
                    for r in results["rows"]
                ),
            ),
        ]
    )


def record_shield_runs(
    name: str,
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser,
    measure: Callable[[Path], list[dict[str, Any]]],
    *,
    first_seed: int,
    render: Callable[[Mapping[str, Any]], str],
) -> int:
    """The main of a benchmark over the trained shields of a results folder: `measure` (the
    rows of one run) on every run of `--results` (torch on one thread), then print, save and,
    with `--write`, record section `name` (`render`). `parser` has `--results`, `--episodes`
    and `--write`; a results folder without runs is its error."""
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    clock = Clock()
    try:
        runs = shield_runs(args.results)
    except ValueError as error:  # a ContainmentError too
        parser.error(str(error))
    rows = [row for run in runs for row in measure(run)]
    results = {
        "command": " ".join([f"python -m benchmarks.{name}", *(argv or sys.argv[1:])]),
        "results": str(args.results),
        "episodes": args.episodes,
        "first_seed": first_seed,
        "rows": rows,
    }
    results |= {"machine": clock.machine(), "minutes": clock.wall / 60}
    save_results(name, results, render(results), quick=not args.write)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Deploy every trained shield of `--results` at each allowance; print, save, record."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--results", type=Path, required=True, help="a results folder")
    parser.add_argument("--allowances", type=allowance, nargs="+", default=list(ALLOWANCES))
    parser.add_argument("--episodes", type=positive_int, default=200, help="episodes per allowance")
    args = parser.parse_args(argv)
    return record_shield_runs(
        "ladder",
        argv,
        parser,
        lambda run: deploy(run, sorted(args.allowances), args.episodes),
        first_seed=TUNING.first + LADDER_SHIFT,
        render=render_markdown,
    )


if __name__ == "__main__":
    raise SystemExit(main())
