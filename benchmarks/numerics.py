"""What the common floating-point code path costs, and whether it gives the same bits elsewhere.

Against its peer, a reference commit (`--against`, by default the last that pinned MKL's AVX2
branch) checked out in a temporary worktree, each child process importing `src` from its own
tree: the CPU seconds of training run 0 of every task and algorithm of the default experiment
in both trees, one after the other; with `--emulate CPU...`, the short runs of
`tests/reliability/fingerprints.py` trained here and inside `qemu-x86_64 -cpu CPU` with each
tree's code, and how many hash alike. Both trees train the same runs: the reference is given the
config in its own names (`reference_config`), its shield's critic backup set to the one the
current code has (`coordinate`; its default was `exhaustive`, every joint action judged).

Run: `python -m benchmarks.numerics [--emulate EPYC-Rome Haswell] [--write]`. Results go to
`benchmarks/out/numerics.json` and, with `--write`, the numerics section of BENCHMARKS.md.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import (
    CONFIG,
    ROOT,
    Clock,
    arguments,
    experiment,
    positive_int,
    save_results,
    table,
)
from src.numerics import PINNED

REFERENCE = "60e3090"
"""The last commit whose pin was `MKL_CBWR=AVX2` (with torch's foreach Adam)."""
FINGERPRINTS = ROOT / "tests" / "reliability" / "fingerprints.py"
TASKS = ("hazard_grid", "intersection")
ALGOS = ("ippo", "ippo_lag", "shield", "shield_dec")
REFERENCE_SHIELD = {"backup": "coordinate"}
"""Shield options the reference must be given to train the current code's shield: its safety
critic's backup defaulted to `exhaustive`, the current code's only backup is the coordinate
descent (the key was deleted with the other choice)."""
REFERENCE_VERSIONS = {"wm_version": {"v0": "v1"}, "shield_version": {"v0": "v1"}}
"""`base` values the reference names otherwise: the current world model and shield v0 were its
v1 (its v0 were the older ones, since removed)."""
REFERENCE_UNKNOWN = {"ippo_lag": ("risk_target_ratio",), "shield_dec": ("common_plan",)}
"""`algo_params` keys the reference does not have, left out of its config: its ippo_lag steers
to `max_risk` itself (the target moves, the work of an update does not), and its shield_dec
has each agent decide alone (with and without the plan a run trains in the same CPU time,
BENCHMARKS.md, "The decentralised shield's common plan")."""
REFERENCE_UNKNOWN_KEYS = ("joint_certificates",)
"""Top-level config keys the reference does not have, left out of its config: its certificates
each test at `shield_credible_delta` (the level decides only which rung deploys after training;
training is the same)."""

_TRAIN = """
import json, sys, time, yaml
from src.algos.train import train_run
from src.config.workflow import resolve_run_config, validate_workflow_config
config_file, env, algo, out = sys.argv[1:5]
config = validate_workflow_config(yaml.safe_load(open(config_file)))
run = resolve_run_config(config, env, algo, 0)
started = time.process_time()
train_run(run, out, progress=False, threads=1)
print(json.dumps({"cpu_s": time.process_time() - started}))
"""
"""A child's training: the run's CPU seconds on stdout (the imports are not counted)."""


def _child_env(tree: Path) -> dict[str, str]:
    """The environment of a child that imports `src` from `tree`, on one thread, with no
    kernel variable set: each tree's `src` pins its own (this process's import of `src` set
    this tree's)."""
    drop = {"PYTHONPATH", *PINNED}
    keep = {k: v for k, v in os.environ.items() if k not in drop}
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**keep, **threads, "PYTHONPATH": str(tree)}


def train_cpu_seconds(tree: Path, env: str, algo: str, config_file: Path) -> float:
    """CPU seconds of training run 0 of (env, algo) of `config_file` with `tree`'s code."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [sys.executable, "-c", _TRAIN, str(config_file), env, algo, f"{out}/run0"],
            cwd=tree,
            env=_child_env(tree),
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: training {env}/{algo} failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"])


def fingerprints_of(
    tree: Path, runs: Sequence[str], cpu: str | None, config_file: Path
) -> dict[str, Any]:
    """The fingerprints of the short runs of `config_file` matching `runs` with `tree`'s code,
    on this machine (`cpu` None) or inside `qemu-x86_64 -cpu cpu`."""
    command = [sys.executable, str(FINGERPRINTS), "--runs", *runs, "--config", str(config_file)]
    if cpu is not None:
        command = ["qemu-x86_64", "-cpu", cpu, *command]
    done = subprocess.run(command, cwd=tree, env=_child_env(tree), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{tree} on {cpu or 'this CPU'} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout[done.stdout.index("{\n") :])


def reference_config(config: dict[str, Any]) -> dict[str, Any]:
    """The workflow config `config` (as written) in the names of `REFERENCE`: the same runs,
    trained with that commit's code (`REFERENCE_SHIELD`, `REFERENCE_VERSIONS`,
    `REFERENCE_UNKNOWN`, `REFERENCE_UNKNOWN_KEYS`). `config` is not changed."""
    config = copy.deepcopy(config)
    for key in REFERENCE_UNKNOWN_KEYS:
        config.pop(key, None)
    base = config.setdefault("base", {})
    for key, renamed in REFERENCE_VERSIONS.items():
        if key in base:
            base[key] = renamed.get(base[key], base[key])
    algo_params = config.setdefault("algo_params", {})
    for algo, keys in REFERENCE_UNKNOWN.items():
        params = algo_params.get(algo, {})
        for key in keys:
            params.pop(key, None)
        if algo in algo_params and not params:
            del algo_params[algo]
    for algo in ("shield", "shield_dec"):
        if algo in config.get("algos", []):
            algo_params[algo] = {**algo_params.get(algo, {}), **REFERENCE_SHIELD}
    return config


def write_reference_config(reference: Path, config_file: Path, folder: Path) -> Path:
    """The config file the `reference` tree trains: `config_file` in the names of `REFERENCE`
    (`reference_config`, written into `folder`) when that tree is `REFERENCE`'s, else
    `config_file` itself (another commit's names are not known here)."""
    head = subprocess.run(
        ["git", "-C", str(reference), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not head.startswith(REFERENCE):
        return config_file
    path = folder / "reference.yaml"
    path.write_text(yaml.safe_dump(reference_config(experiment(config_file)), sort_keys=False))
    return path


def measure(
    reference: Path,
    *,
    config_file: Path,
    reference_config_file: Path | None = None,
    repeats: int,
    emulate: Sequence[str],
    runs: Sequence[str],
    pairs: Sequence[tuple[str, str]] = tuple((env, algo) for env in TASKS for algo in ALGOS),
) -> dict[str, Any]:
    """Both measurements (module docstring) of this tree against the `reference` tree; the
    training cost of run 0 of each (env, algo) of `pairs`, of `config_file` in this tree and of
    `reference_config_file` (by default the same) in the reference tree."""
    trees = {"common": ROOT, "reference": reference}
    config_files = {"common": config_file, "reference": reference_config_file or config_file}
    cost: dict[str, dict[str, float]] = {}
    for env, algo in pairs:
        seconds = {name: 0.0 for name in trees}
        for _ in range(repeats):
            for name, tree in trees.items():
                seconds[name] += train_cpu_seconds(tree, env, algo, config_files[name]) / repeats
        cost[f"{env}/{algo}"] = seconds
        print(f"{env}/{algo}: {seconds}", flush=True)
    agreement: dict[str, dict[str, Any]] = {}
    for name, tree in trees.items():
        here = fingerprints_of(tree, runs, None, config_files[name]) if emulate else None
        for cpu in emulate:
            there = fingerprints_of(tree, runs, cpu, config_files[name])
            same = sum(there["runs"][run] == value for run, value in here["runs"].items())
            agreement[f"{name}/{cpu}"] = {
                "runs": len(here["runs"]),
                "same": same,
                "kernels_here": here["kernels"],
                "kernels_there": there["kernels"],
            }
            print(f"{name} on {cpu}: {same} of {len(here['runs'])} runs alike", flush=True)
    return {"cost": cost, "agreement": agreement}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def markdown(results: dict[str, Any], reference: str) -> str:
    """The section of BENCHMARKS.md."""
    cost, agreement = results["cost"], results["agreement"]
    total = {name: sum(row[name] for row in cost.values()) for name in ("common", "reference")}
    rows = [
        f"{run} | {row['reference']:.1f} | {row['common']:.1f} | "
        f"{row['common'] / row['reference']:.2f}"
        for run, row in cost.items()
    ]
    rows.append(
        f"**all** | {total['reference']:.1f} | {total['common']:.1f} | "
        f"**{total['common'] / total['reference']:.2f}**"
    )
    lines = [
        "## Numerics",
        "",
        "What the common floating-point code path (`src/numerics.py`: MKL's `COMPATIBLE` "
        "branch, ATen's AVX2 kernels, the fused Adam, OpenBLAS's Haswell kernels for the "
        "networks' matrix products) costs against the pin of "
        f"`{reference}` (MKL's `AVX2` branch, which holds on Intel CPUs only; torch's foreach "
        "Adam), and whether it trains to the same bits on other CPUs. Training: run 0 of every "
        "task and algorithm of the default experiment (its whole budget and certificate), CPU "
        f"seconds of `train_run` on one thread, mean of {results['repeats']} run(s) of each "
        "tree, the two trees one after the other per run; the reference trains the same runs "
        "in its own names (`reference_config`: the models' v1, the coordinate backup, no "
        "`risk_target_ratio`, which it does not have) "
        f"(`python -m benchmarks.numerics`; {results['cpu_model']}, "
        f"{results['machine']['date']}).",
        "",
        *table("run | reference s | common s | ratio", "lrrr", rows),
    ]
    if agreement:
        lines += [
            "",
            "Same bits elsewhere: the short runs of `tests/reliability/fingerprints.py` "
            f"({', '.join(results['runs'])}) trained on this machine ({results['cpu_model']}) "
            "and inside `qemu-x86_64` emulating another CPU, with each tree's code; runs whose "
            "histories, update metrics and weights hash alike.",
            "",
            *table(
                "code | emulated CPU | runs alike | MKL_CBWR | probe here / there",
                "llrll",
                (
                    f"{'common' if key.startswith('common/') else f'reference `{reference}`'} | "
                    f"{key.split('/', 1)[1]} | {row['same']} of {row['runs']} | "
                    f"{row['kernels_here'].get('MKL_CBWR')} | "
                    f"{row['kernels_here'].get('fingerprint', '-')} / "
                    f"{row['kernels_there'].get('fingerprint', '-')}"
                    for key, row in agreement.items()
                ),
            ),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure against `--against` and print, save and (`--write`) record the section."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--against", default=REFERENCE, help="the reference commit")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--repeats", type=positive_int, default=1)
    parser.add_argument("--emulate", nargs="*", default=[], help="qemu CPU models")
    parser.add_argument("--runs", nargs="+", default=["*"], help="short runs to emulate")
    args = parser.parse_args(argv)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "reference"
        git = ["git", "-C", str(ROOT), "worktree"]
        added = subprocess.run(
            [*git, "add", "--detach", str(reference), args.against], capture_output=True, text=True
        )
        if added.returncode != 0:
            why = added.stderr.strip().splitlines()[-1:] or ["git failed"]
            raise SystemExit(f"--against {args.against!r}: no such commit here ({why[0]})")
        try:
            config_file = args.config.resolve()
            results = measure(
                reference,
                config_file=config_file,
                reference_config_file=write_reference_config(reference, config_file, Path(tmp)),
                repeats=args.repeats,
                emulate=args.emulate,
                runs=args.runs,
            )
        finally:
            remove = [*git, "remove", "--force", str(reference)]
            subprocess.run(remove, check=False, capture_output=True)
    results.update(
        repeats=args.repeats, runs=args.runs, machine=clock.machine(), cpu_model=cpu_model()
    )
    save_results("numerics", results, markdown(results, args.against), quick=not args.write)


if __name__ == "__main__":
    main()
