"""One full paper-scale training run per algorithm: CPU time, and the shield's against `ippo`'s.

Run 0 of `config/paper.yaml` on one env, resolved as the workflow resolves it and trained to the
end on one thread: CPU and wall time (checkpoints and calibration included), updates, the last
`LAST_SHARE` of the training episodes' return and violating share, the certificate. A killed
run resumes from its checkpoint, its CPU time then of the resumed part only (`resumed`).

Run: `python -m benchmarks.paper_run --algo ippo` (and `ippo_lag`, `shield`; one JSON each in
`benchmarks/out/`), then `--write` the paper_run section of BENCHMARKS.md against the peer
`ippo`; `--quick` a smoke run of a smaller config.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    OUT,
    PAPER,
    ROOT,
    Clock,
    arguments,
    met,
    table,
    workflow_config,
    write_section,
)
from src.algos.shield.calibration import load_certificate
from src.algos.train import train_run
from src.analysis.files import write_text
from src.config.workflow import resolve_run_config
from src.runfiles import RunFiles

ALGOS = ("ippo", "ippo_lag", "shield")
TARGET_RATIO = 3.0  # shield training CPU at most this multiple of ippo's at the paper's scale
LAST_SHARE = 0.1  # the share of training episodes (the last ones) the summary is taken over
QUICK_OVERRIDES: dict[str, Any] = {
    # Episodes of 16 steps, so that the two updates finish some (a run that finishes none is
    # refused); the constraint horizon, their cap, among the evaluated horizons.
    "base": {
        "timesteps": 2 * 16 * 16,
        "rollouts": 16,
        "shield_patience": 1,
        "final_policy_eval_horizons": [1, 10, 16],
        "use_wandb": False,
    },
    "env_params": {
        "hazard_grid": {"n_agents": 3, "max_steps": 16},
        "spread": {"n_agents": 3, "max_steps": 16, "spawn": "separated"},
        "intersection": {"n_agents": 4, "max_steps": 16},
    },
    "algo_params": {"shield": {"calibration_episodes": 4, "critic_steps": 1}},
}
"""--quick: the config's values it replaces."""


def result_path(out: Path, env: str, algo: str, *, quick: bool = False) -> Path:
    """Where the JSON of one (env, algo) run goes."""
    return out / f"paper_run{'_quick' if quick else ''}_{env}_{algo}.json"


def measure(env: str, algo: str, out: Path, *, quick: bool = False) -> dict[str, Any]:
    """Train run 0 of (env, algo) at the paper's settings; its costs and outcomes."""
    config = workflow_config(PAPER, QUICK_OVERRIDES if quick else {"base": {"use_wandb": False}})
    run = resolve_run_config(config, env, algo, 0)
    files = RunFiles(out / f"paper_run{'_quick' if quick else ''}" / env / algo)
    if files.policy.exists():
        raise FileExistsError(
            f"{files.root} holds a trained run already: remove it to measure the training again"
        )
    resumed = files.checkpoint.exists()
    torch.set_num_threads(1)
    clock = Clock()
    train_run(run, files.root, progress=False, threads=1)
    machine = clock.machine()
    episodes = json.loads(files.history_json.read_text())
    updates = json.loads(files.updates_json.read_text())
    last = episodes[-max(1, math.ceil(LAST_SHARE * len(episodes))) :] if episodes else []
    certificate = load_certificate(files.root) if algo == "shield" else None
    return {
        "env": env,
        "algo": algo,
        "config": str(PAPER.relative_to(ROOT)),
        "n_agents": run.env.n_agents,
        "cpu_seconds": machine["cpu_seconds"],
        "wall_seconds": machine["wall_seconds"],
        "resumed": resumed,
        "certificate": certificate.statement if certificate is not None else None,
        "machine": machine,
        "updates": len(updates),
        "env_steps": int(updates[-1]["global_step"]) if updates else 0,
        "episodes": len(episodes),
        "last_return": sum(e["team_return"] for e in last) / len(last) if last else None,
        "last_violating": sum(bool(e["violated"]) for e in last) / len(last) if last else None,
    }


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def table_markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """The section's markdown: one row per algorithm, CPU time as a multiple of ippo's."""
    by_algo = {r["algo"]: r for r in results}
    reference = by_algo.get("ippo")
    r0, m = results[0], results[0]["machine"]
    lines = [
        f"`python -m benchmarks.paper_run` on `{r0['config']}`, env `{r0['env']}` "
        f"({r0['n_agents']} agents), run 0 of each algorithm trained to the end, torch on one "
        f"thread: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}. "
        "CPU seconds of the training process (checkpoints and the shield's calibration "
        "included); return and violating share: the last "
        f"{LAST_SHARE:.0%} of the training episodes.",
        "",
        *table(
            "algo | measured | env steps | updates | CPU-h | wall h | CPU x ippo | return, last "
            "episodes | violating, last episodes | certificate",
            "llrrrrrrrl",
            (
                f"{r['algo']} | {r['machine']['date']}"
                f"{' (resumed: CPU of the resumed part only)' if r['resumed'] else ''} | "
                f"{r['env_steps']:,} | {r['updates']} | {r['cpu_seconds'] / 3600:.2f} | "
                f"{r['wall_seconds'] / 3600:.2f} | "
                f"{r['cpu_seconds'] / reference['cpu_seconds'] if reference else math.nan:.2f} | "
                f"{_number(r['last_return'])} | {_number(r['last_violating'])} | "
                f"{r['certificate'] or '–'}"
                for r in results
            ),
        ),
        "",
    ]
    shield = by_algo.get("shield")
    if shield is not None and reference is not None:
        ratio = shield["cpu_seconds"] / reference["cpu_seconds"]
        lines.append(
            f"- Shield training CPU <= {TARGET_RATIO:g}x ippo's at the paper's scale: "
            f"{ratio:.2f}x, {met(ratio <= TARGET_RATIO)}."
        )
    missing = [a for a in ALGOS if a not in by_algo]
    if missing:
        lines.append(f"- Not measured: {', '.join(missing)}.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure one algorithm, or write the section from the measured ones."""
    parser = arguments(__doc__, quick=True, write=True)
    parser.add_argument("--env", default="intersection", help="env of the runs")
    parser.add_argument("--algo", help="algorithm to train (one run)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON results")
    args = parser.parse_args(argv)
    if args.algo is None and not args.write:
        parser.error("give --algo to measure a run, or --write to report the measured ones")
    if args.write and args.quick:
        parser.error("--quick results are not written to BENCHMARKS.md")
    if args.algo is not None:
        result = measure(args.env, args.algo, args.out, quick=args.quick)
        path = result_path(args.out, args.env, args.algo, quick=args.quick)
        write_text(json.dumps(result, indent=2) + "\n", path)
        print(json.dumps({k: result[k] for k in ("algo", "cpu_seconds", "wall_seconds")}))
    if args.write:
        paths = [result_path(args.out, args.env, algo) for algo in ALGOS]
        results = [json.loads(path.read_text()) for path in paths if path.exists()]
        if not results:
            parser.error(f"no measured run of env {args.env!r} in {args.out}")
        text = table_markdown(results)
        print(text)
        write_section(
            "paper_run",
            text,
            heading="## Paper-scale runs",
            intro="One full training run per algorithm at the settings of `config/paper.yaml`, "
            "measured end to end (`benchmarks/paper_run.py`).",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
