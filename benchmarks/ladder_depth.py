"""How cautious must the certificate's first rung be for the whole episode?

A shield's allowance bounds the calibrated risk of the next `horizon` (H) steps of each
decision; the certificate tests P(violation within the constraint horizon T) of the deployed
policy, an episode of T / H such windows. Each trained shield run of a results folder plays
`--episodes` episodes of T steps at each allowance m x a (m in `--multiples`, a the run's
training allowance: its first tested rung over the config's first multiple); `ippo`'s run of
the same env and index plays the same reset seeds. Per run and m: the violating share with its
95% Clopper-Pearson upper bound, and the mean return. The reset seeds are those of
`src.seeds.LADDER_DEPTH`, a range that only this measurement plays (run k from its first seed
+ `CHECK_STRIDE` k): what it shows may choose a config's `certify_multiples`, which the
certificate then tests on its own calibration range.

Run: `python -m benchmarks.ladder_depth --results results/paper [--write]`. Results go to
`benchmarks/out/ladder_depth.json` and the ladder_depth section of BENCHMARKS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.certificate_check import runs_to_play
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
from src.algos.shield.budget import BudgetShield
from src.algos.shield.calibration import load_certificate
from src.containment import inside
from src.seeds import CHECK_STRIDE, LADDER_DEPTH
from src.stats import clopper_pearson_upper

MULTIPLES = (0.025, 0.05, 0.1, 0.2, 0.3)
"""Multiples of the training allowance measured by default: down to H / T of it and below
(0.05 for H = 10, T = 200), up to the configs' first rung (0.3)."""


def measure_run(
    run_dir: Path, baseline: Path | None, *, multiples: Sequence[float], seeds: range
) -> dict[str, Any]:
    """One shield run at each allowance multiple, and its baseline, on `seeds`."""
    torch.set_num_threads(1)
    actor = load_actor(run_dir, shielded=True)
    if not isinstance(actor.action_filter, BudgetShield):
        raise ValueError(f"{run_dir} is not a run of the shield")
    certificate = load_certificate(run_dir)
    if certificate is None or not certificate.tested:
        raise ValueError(f"{run_dir}/policy.pt holds no tested certificate")
    shield_cfg = actor.action_filter.config
    anchor = certificate.tested[0]["allowance"] / shield_cfg.certify_multiples[0]
    horizon = certificate.horizon
    batch_size = min(len(seeds), 500)
    rungs = []
    for multiple in multiples:
        actor.action_filter.allowance = anchor * multiple
        batch = play(actor, actor.config, seeds, max_steps=horizon, batch_size=batch_size)
        k = violating(batch)
        rungs.append(
            {
                "multiple": multiple,
                "allowance": anchor * multiple,
                "violations": k,
                "rate": k / len(seeds),
                "upper": float(clopper_pearson_upper(k=k, n=len(seeds), delta=0.05)),
                "return": float(batch.reward.sum(axis=1).mean()),
            }
        )
    reference = None
    if baseline is not None:
        ippo = load_actor(baseline, shielded=False)
        batch = play(ippo, ippo.config, seeds, max_steps=horizon, batch_size=batch_size)
        reference = float(batch.reward.sum(axis=1).mean())
    return {
        "env": actor.config.env_name,
        "algo": actor.config.algo,
        "run_idx": actor.config.run_idx,
        "max_risk": certificate.max_risk,
        "horizon": horizon,
        "risk_horizon": shield_cfg.horizon,
        "anchor": anchor,
        "first_seed": seeds.start,
        "episodes": len(seeds),
        "rungs": rungs,
        "ippo_return": reference,
    }


def markdown(records: Sequence[dict[str, Any]], command: str, machine: dict[str, Any]) -> str:
    """The section of BENCHMARKS.md."""
    multiples = [rung["multiple"] for rung in records[0]["rungs"]]
    rows = []
    for r in records:
        cells = [f"{r['env']} {r['algo']} run {r['run_idx']}"]
        cells += [f"{g['rate']:.3f} [{g['upper']:.3f}], {g['return']:.1f}" for g in r["rungs"]]
        cells.append("–" if r["ippo_return"] is None else f"{r['ippo_return']:.1f}")
        rows.append(cells)
    return "\n".join(
        [
            "## How deep the certificate's ladder must go (`paper` scale)",
            "",
            f"`{command}` ({machine['date']}, {machine['processor']}, {machine['cpus']} CPUs, "
            f"{machine['wall_seconds'] / 60:.0f} min). Every trained shield run plays "
            f"{records[0]['episodes']} episodes of its constraint horizon T "
            f"({', '.join(sorted({str(r['horizon']) for r in records}))} steps) at the "
            "allowance m x its training allowance a for each multiple m, from reset seeds that "
            "only this measurement plays (`src.seeds.LADDER_DEPTH`); the shield's risk covers "
            f"H = {', '.join(sorted({str(r['risk_horizon']) for r in records}))} steps. Each cell: "
            "P(violation within T) [95% upper], then the mean return; last column: the mean "
            "return of the same env's ippo run of the same index on the same seeds (–: not "
            "trained yet). `max_risk` "
            f"{', '.join(sorted({str(r['max_risk']) for r in records}))}.",
            "",
            *table(
                "run | " + " | ".join(f"m = {m:g}" for m in multiples) + " | ippo return",
                "l" + "r" * (len(multiples) + 1),
                rows,
            ),
        ]
    )


def main(argv: Sequence[str] | None = None, *, out: Path = OUT, path: Path = BENCHMARKS_MD) -> int:
    """Command line: measure every trained shield run of `--results`, print Markdown, save JSON
    (into `out`; with `--write` the section of `path` too)."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--results", type=Path, required=True, help="a results folder")
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per allowance")
    parser.add_argument(
        "--multiples", type=float, nargs="+", default=list(MULTIPLES), help="allowance multiples"
    )
    args = parser.parse_args(argv)
    if not all(m > 0 for m in args.multiples):
        parser.error(f"--multiples {args.multiples}: every multiple must be > 0")
    clock = Clock()
    runs = runs_to_play(parser, args.results, episodes=args.episodes, within=LADDER_DEPTH)
    root = args.results.absolute()
    records = []
    for k, run in enumerate(runs):
        # Checked inside the results folder before anything there is looked at.
        policy = inside(
            root, (run.parent.parent / "ippo" / run.name / "policy.pt").relative_to(root)
        )
        baseline = policy.parent if policy.is_file() else None
        first = LADDER_DEPTH.first + CHECK_STRIDE * k
        record = measure_run(
            run, baseline, multiples=args.multiples, seeds=range(first, first + args.episodes)
        )
        record["run"] = str(args.results / run.relative_to(root))
        records.append(record)
    command = (
        f"python -m benchmarks.ladder_depth --results {args.results} --episodes {args.episodes} "
        f"--multiples {' '.join(f'{m:g}' for m in args.multiples)}"
    )
    machine = clock.machine()
    text = markdown(records, command, machine)
    save_results(
        "ladder_depth",
        {"records": records, "machine": machine},
        text,
        quick=not args.write,
        out=out,
        path=path,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
