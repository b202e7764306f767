"""One full paper-scale training run per algorithm: CPU time, and the shield's against `ippo`'s.

`benchmarks/paper_grid.py` extrapolates the paper grid from short slices; this benchmark runs
the whole thing for one (env, algo): run 0 of `config/paper.yaml` resolved as the workflow
resolves it (`paper_grid.load_workflow_config`, then `resolve_run_config`), trained by
`train_run` into `benchmarks/out/paper_run/<env>/<algo>` with torch on one thread. It records
the CPU seconds of the process (`time.process_time`, checkpoints and the shield's calibration
included), the wall time, the updates and env steps, the training episodes' mean return and
violating share over the last tenth of training, and a shield's certificate. One JSON per
(env, algo) goes to `benchmarks/out/paper_run_<env>_<algo>.json`; the algorithms may run one
after another or as separate processes side by side (each its own core).

A killed run resumes from its last checkpoint when started again; its CPU time then counts
only the resumed part, so the JSON says `resumed` and the table flags it.

`--write` collects the JSONs of `--env` into the section "paper_run" of BENCHMARKS.md, with
each algorithm's CPU time as a multiple of `ippo`'s (the issue's target: the shield at most 3x).

Run: `python -m benchmarks.paper_run --algo ippo` (and `ippo_lag`, `shield`), then
`python -m benchmarks.paper_run --write`. `--quick` trains a few updates of a smaller config
into `benchmarks/out/paper_run_quick/` (a smoke test; it estimates nothing and writes no
markdown).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from benchmarks.common import machine_info, write_section  # noqa: E402
from benchmarks.paper_grid import PAPER_CONFIG, load_workflow_config  # noqa: E402
from src.algos.shield.calibration import load_certificate  # noqa: E402
from src.analysis.files import write_text  # noqa: E402
from src.config.workflow import resolve_run_config  # noqa: E402
from src.runfiles import RunFiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
SECTION = "paper_run"
SECTION_HEADING = "## Paper-scale runs"
SECTION_INTRO = (
    "One full training run per algorithm at the settings of `config/paper.yaml`, measured end "
    "to end (`benchmarks/paper_run.py`)."
)
TARGET_RATIO = 3.0  # shield training CPU at most this multiple of ippo's at the paper's scale
LAST_SHARE = 0.1  # the share of training episodes (the last ones) the summary is taken over
# --quick: the config's values it replaces.
QUICK_OVERRIDES: dict[str, Any] = {
    # Episodes of 16 steps, so that the two updates finish some (a run that finishes none is
    # refused); the constraint horizon, their cap, among the evaluated horizons.
    "base": {
        "timesteps": 2 * 16 * 16,
        "rollouts": 16,
        "shield_patience": 1,
        "final_policy_eval_horizons": [1, 10, 16],
    },
    "env_params": {
        "hazard_grid": {"n_agents": 3, "max_steps": 16},
        "spread": {"n_agents": 3, "max_steps": 16, "spawn": "separated"},
        "intersection": {"n_agents": 4, "max_steps": 16},
    },
    "algo_params": {"shield": {"calibration_episodes": 4, "critic_steps": 1}},
}


def result_path(out: Path, env: str, algo: str, *, quick: bool = False) -> Path:
    """Where the JSON of one (env, algo) run goes."""
    return out / f"paper_run{'_quick' if quick else ''}_{env}_{algo}.json"


def training_summary(run_dir: Path) -> dict[str, Any]:
    """Updates, env steps, and the last `LAST_SHARE` of the training episodes' mean return and
    violating share, from the run folder's history and updates."""
    files = RunFiles(run_dir)
    episodes = json.loads(files.history_json.read_text())
    updates = json.loads(files.updates_json.read_text())
    last = episodes[-max(1, math.ceil(LAST_SHARE * len(episodes))) :] if episodes else []
    return {
        "updates": len(updates),
        "env_steps": int(updates[-1]["global_step"]) if updates else 0,
        "episodes": len(episodes),
        "last_return": sum(e["team_return"] for e in last) / len(last) if last else None,
        "last_violating": sum(bool(e["violated"]) for e in last) / len(last) if last else None,
    }


def measure(
    config_path: Path, env: str, algo: str, out: Path, *, quick: bool = False
) -> dict[str, Any]:
    """Train run 0 of (env, algo) at the config's settings; its costs and outcomes."""
    from src.algos.train import train_run

    config = load_workflow_config(config_path, QUICK_OVERRIDES if quick else None)
    config["base"]["use_wandb"] = False
    if env not in config["envs"]:
        raise ValueError(f"env {env!r} is not in {config_path}'s envs {config['envs']}")
    if algo not in config["algos"]:
        raise ValueError(f"algo {algo!r} is not in {config_path}'s algos {config['algos']}")
    run = resolve_run_config(config, env, algo, 0)
    run_dir = out / f"paper_run{'_quick' if quick else ''}" / env / algo
    if RunFiles(run_dir).policy.exists():
        raise FileExistsError(
            f"{run_dir} holds a trained run already: remove it to measure the training again"
        )
    resumed = RunFiles(run_dir).checkpoint.exists()
    load_before = os.getloadavg()
    torch.set_num_threads(1)
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    train_run(run, run_dir, progress=False, threads=1)
    cpu = time.process_time() - started_cpu
    wall = time.perf_counter() - started_wall
    certificate = load_certificate(run_dir) if algo == "shield" else None
    return {
        "env": env,
        "algo": algo,
        "config": os.path.relpath(config_path, ROOT),
        "n_agents": int(config["env_params"].get(env, {}).get("n_agents", 0)) or None,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "resumed": resumed,
        "certificate": certificate.statement if certificate is not None else None,
        "machine": machine_info(load_before),
        **training_summary(run_dir),
    }


def table(results: Sequence[Mapping[str, Any]]) -> str:
    """The section's markdown: one row per algorithm, CPU time as a multiple of ippo's."""
    by_algo = {r["algo"]: r for r in results}
    reference = by_algo.get("ippo")
    r0 = results[0]
    m = r0["machine"]
    lines = [
        f"`python -m benchmarks.paper_run` on `{r0['config']}`, env `{r0['env']}` "
        f"({r0['n_agents']} agents), run 0 of each algorithm trained to the end, torch on one "
        f"thread: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}. "
        "CPU seconds of the training process (checkpoints and the shield's calibration "
        "included); return and violating share: the last "
        f"{LAST_SHARE:.0%} of the training episodes.",
        "",
        "| algo | measured | env steps | updates | CPU-h | wall h | CPU x ippo | "
        "return, last episodes | violating, last episodes | certificate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = r["cpu_seconds"] / reference["cpu_seconds"] if reference else math.nan
        flag = " (resumed: CPU of the resumed part only)" if r["resumed"] else ""
        lines.append(
            f"| {r['algo']} | {r['machine']['date']}{flag} | {r['env_steps']:,} | {r['updates']} | "
            f"{r['cpu_seconds'] / 3600:.2f} | {r['wall_seconds'] / 3600:.2f} | {ratio:.2f} | "
            f"{_number(r['last_return'])} | {_number(r['last_violating'])} | "
            f"{r['certificate'] or '–'} |"
        )
    lines.append("")
    shield = by_algo.get("shield")
    if shield is not None and reference is not None:
        ratio = shield["cpu_seconds"] / reference["cpu_seconds"]
        met = "met" if ratio <= TARGET_RATIO else "NOT met"
        lines.append(
            f"- Shield training CPU <= {TARGET_RATIO:g}x ippo's at the paper's scale: "
            f"{ratio:.2f}x, {met}."
        )
    missing = [a for a in ("ippo", "ippo_lag", "shield") if a not in by_algo]
    if missing:
        lines.append(f"- Not measured: {', '.join(missing)}.")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure one algorithm, or write the section from the measured ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=PAPER_CONFIG, help="workflow config")
    parser.add_argument("--env", default="intersection", help="env of the runs")
    parser.add_argument("--algo", help="algorithm to train (one run)")
    parser.add_argument("--write", action="store_true", help="write the BENCHMARKS.md section")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON results")
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    args = parser.parse_args(argv)
    if args.algo is None and not args.write:
        parser.error("give --algo to measure a run, or --write to report the measured ones")
    if args.algo is not None:
        result = measure(args.config, args.env, args.algo, args.out, quick=args.quick)
        path = result_path(args.out, args.env, args.algo, quick=args.quick)
        write_text(json.dumps(result, indent=2) + "\n", path)
        print(json.dumps({k: result[k] for k in ("algo", "cpu_seconds", "wall_seconds")}))
    if args.write:
        if args.quick:
            parser.error("--quick results are not written to BENCHMARKS.md")
        results = [
            json.loads(path.read_text())
            for algo in ("ippo", "ippo_lag", "shield")
            if (path := result_path(args.out, args.env, algo)).exists()
        ]
        if not results:
            parser.error(f"no measured run of env {args.env!r} in {args.out}")
        write_section(SECTION, table(results), heading=SECTION_HEADING, intro=SECTION_INTRO)
        print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
