"""The shield's design choices, each against the default, on the default experiment.

For every env of `config/config.yaml`, run 0 of the `shield` algorithm is trained with the
default experiment's run config (resolved as the workflow resolves it) and with one setting
changed at a time:

- `risk_scope: episode`: the episode risk budget instead of the receding allowance;
- `learn_from: proposals`: the base policy learns from its own proposals (the shield as part
  of its environment) instead of the executed actions;
- `shield_patience: 8`: the shield arms after 8 of the 128 updates instead of 32.

Each policy is evaluated as the workflow evaluates it (`evaluate_run`: the config's episodes,
shield on and off). Reported per (env, variant): P(violation within 100 steps) with the
shield on and off and its Clopper-Pearson interval, the mean return, the training violation
rate after arming, and the training CPU seconds (`time.process_time` of the process).

Run: `python -m benchmarks.shield_variants` (about 25 CPU-minutes on one core: 8 trainings of
262,144 steps); `--variants default episode` runs a subset; `--quick` a smoke run.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import write_section  # noqa: E402
from benchmarks.paper_grid import load_workflow_config  # noqa: E402
from src.algos.train import train_run  # noqa: E402
from src.analysis.files import write_text  # noqa: E402
from src.config.workflow import resolve_run_config  # noqa: E402
from src.evaluation.evaluate import evaluate_run  # noqa: E402
from src.records import load_history  # noqa: E402
from src.runfiles import RunFiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
HORIZON = 100  # the constraint's horizon in the default experiment

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "episode": {"algo_params": {"risk_scope": "episode"}},
    "proposals": {"algo_params": {"learn_from": "proposals"}},
    "patience_8": {"shield_patience": 8},
}
"""Variant name -> what it changes in the default run config (flat keys, or algo_params)."""


def variant_config(base: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """The flat run config `base` with `change` applied (`algo_params` merged)."""
    flat = dict(base)
    for key, value in change.items():
        if key == "algo_params":
            flat["algo_params"] = {**flat.get("algo_params", {}), **value}
        else:
            flat[key] = value
    return flat


def measure(flat: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    """Train and evaluate one run config in `run_dir`; its figures."""
    torch.set_num_threads(1)
    started = time.process_time()
    train_run(dict(flat), run_dir, progress=False)
    train_cpu = time.process_time() - started
    frame = evaluate_run(run_dir, run_dir / "eval.parquet")
    at = frame[frame["horizon"] == HORIZON]
    row: dict[str, Any] = {"train_cpu_s": train_cpu}
    for _, r in at.iterrows():
        mode = "on" if r["shielded"] else "off"
        row[f"p_{mode}"] = float(r["p_violation"])
        row[f"p_{mode}_low"] = float(r["ci_low"])
        row[f"p_{mode}_high"] = float(r["ci_high"])
        row[f"return_{mode}"] = float(r["mean_return"])
    files = RunFiles(run_dir)
    updates = json.loads(files.updates_json.read_text())
    armed_at = next((u["global_step"] for u in updates if u.get("shield/armed") == 1.0), None)
    history = load_history(run_dir, files.history_json.name)
    after = [ep.violated for ep in history if armed_at is not None and ep.t_start >= armed_at]
    row["train_violation_after_arming"] = float(np.mean(after)) if after else None
    return row


def benchmark(
    *, variants: Sequence[str], quick: bool = False, config_path: Path = DEFAULT_CONFIG
) -> dict[str, Any]:
    """Every (env, variant) of the default experiment; the results as a dict."""
    workflow = load_workflow_config(config_path)
    results: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": 1,
        },
        "config": str(config_path.relative_to(ROOT)),
        "quick": quick,
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        for env in workflow["envs"]:
            base = resolve_run_config(workflow, env, "shield", 0).to_dict()
            if quick:
                base["timesteps"] = 4 * base["num_envs"] * base["rollouts"]
                base["shield_patience"] = 2
                base["final_policy_eval_episodes"] = 10
            for name in variants:
                change = dict(VARIANTS[name])
                if quick and "shield_patience" in change:
                    change["shield_patience"] = 1
                flat = variant_config(base, change)
                row = measure(flat, Path(scratch) / env / name)
                results["rows"].append({"env": env, "variant": name, **row})
                print(env, name, {k: round(v, 3) for k, v in row.items() if v is not None})
    return results


def _p(row: Mapping[str, Any], mode: str) -> str:
    if f"p_{mode}" not in row:
        return "-"
    return f"{row[f'p_{mode}']:.3f} [{row[f'p_{mode}_low']:.3f}, {row[f'p_{mode}_high']:.3f}]"


def render_markdown(results: Mapping[str, Any]) -> str:
    """The BENCHMARKS.md section."""
    m = results["machine"]
    lines = [
        "## Shield: design choices",
        "",
        f"`python -m benchmarks.shield_variants` on {m['platform']}, {m['cpus']} CPUs, torch "
        f"{m['torch']} on {m['threads']} thread. Run 0 of `shield` at the default experiment "
        f"(`{results['config']}`), one setting changed at a time; evaluation as in the workflow. "
        f"P is P(violation within {HORIZON} steps) with its Clopper-Pearson interval.",
        "",
        "| env | variant | P, shield on | P, shield off | return, on | training violations "
        "after arming | train CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        after = row.get("train_violation_after_arming")
        lines.append(
            f"| {row['env']} | {row['variant']} | {_p(row, 'on')} | {_p(row, 'off')} | "
            f"{row.get('return_on', float('nan')):.2f} | "
            f"{'-' if after is None else f'{after:.3f}'} | {row['train_cpu_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    args = parser.parse_args(argv)
    results = benchmark(variants=args.variants, quick=args.quick)
    name = "shield_variants_quick.json" if args.quick else "shield_variants.json"
    OUT.mkdir(parents=True, exist_ok=True)
    write_text(json.dumps(results, indent=2) + "\n", OUT / name)
    markdown = render_markdown(results)
    print(markdown)
    if not args.quick:
        write_section("shield_variants", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
