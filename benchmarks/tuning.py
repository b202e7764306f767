"""The default experiment's hyperparameter choices, measured on seeds that nothing else uses.

Each variant is an algorithm of `config/config.yaml` on one env with some `algo_params` set
(every other setting the config's), trained as the workflow trains it (`resolve_run_config`,
`train_run`) for the config's `num_runs` runs from training seeds `TRAINING_OFFSET` + r, then
evaluated (`evaluate_run`) on the reset seeds of `src.seeds.TUNING`: evaluation episodes from
`TUNING.first`, a shield's calibration from `TUNING.first + CALIBRATION_SHIFT`. That range is
spent (it informed the choices below), so the workflow refuses any config that would make a
claim on it, and the default experiment's numbers come from seeds the choice never saw.

Per variant: each run's violation rate within the constraint horizon H, their mean with the
between-run interval (`src.stats.between_run_interval`), the mean evaluation return (the
summary's, at the evaluation's longest horizon) and its ratio to the env's `ippo` (same
seeds), and the training CPU seconds per run (this process, one thread).

Two groups of variants (`--group`): `tuning`, the hyperparameters (about 15 minutes on one
core), and `shield_options`, each of the shield's options against the configured choice (about
30 minutes). Run: `python -m benchmarks.tuning [--group shield_options] [--env intersection]
[--write]`. Results go to `benchmarks/out/<group>.json` and, with `--write`, the group's
section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchmarks.common import OUT, machine_info, save_results
from src.algos.registry import shielded_algos
from src.algos.train import train_run
from src.config.workflow import SCHEMA_PATH, resolve_run_config, validate_workflow_config
from src.evaluation.evaluate import evaluate_run
from src.runfiles import RunFiles
from src.seeds import TUNING
from src.stats import between_run_interval

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "config.yaml"
TRAINING_OFFSET = 100
"""Training seeds of the tuning runs (training seeds claim nothing; these differ from the
default experiment's all the same)."""
CALIBRATION_SHIFT = 500_000
"""A tuned shield's calibration seeds start this far into `TUNING`."""

VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "hazard_grid": [
        ("ippo", {}),
        ("ippo_lag", {"cost_gamma": 0.8, "cost_gae_lambda": 0.5}),
        ("ippo_lag", {"cost_gamma": 0.8, "cost_gae_lambda": 0.5, "risk_target_ratio": 0.6}),
        ("ippo_lag", {"cost_gamma": 0.9, "cost_gae_lambda": 0.9, "risk_target_ratio": 0.6}),
    ],
    "intersection": [
        ("ippo", {}),
        ("ippo_lag", {"cost_gamma": 0.8, "cost_gae_lambda": 0.5}),
        ("ippo_lag", {"cost_gamma": 0.9, "cost_gae_lambda": 0.9}),
        ("ippo_lag", {"cost_gamma": 0.95, "cost_gae_lambda": 0.95}),
        ("ippo_lag", {"cost_gamma": 0.8, "cost_gae_lambda": 0.5, "pid_ki": 0.5}),
        ("ippo_lag", {"cost_gamma": 0.8, "cost_gae_lambda": 0.5, "risk_target_ratio": 0.6}),
        ("ippo_lag", {"cost_gamma": 0.9, "cost_gae_lambda": 0.9, "risk_target_ratio": 0.6}),
        ("ippo_lag", {"cost_gamma": 0.9, "cost_gae_lambda": 0.9, "risk_target_ratio": 0.4}),
        ("shield_dec", {}),
    ],
}
"""Per env, the (algorithm, algo_params set on top of the config's) pairs measured."""

SHIELD_OPTIONS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "intersection": [
        ("ippo", {}),
        ("shield", {}),
        ("shield", {"risk_scope": "episode"}),
        ("shield", {"learn_from": "proposals"}),
        ("shield", {"search": "exhaustive"}),
        ("shield", {"backup": "exhaustive"}),
        ("shield_dec", {}),
        ("shield_dec", {"shield_opponent_mode": "model"}),
        ("shield_dec", {"shield_opponent_mode": "uniform"}),
    ],
}
"""The shield's options against the configured choice, one setting at a time (docs/design.md,
section 6.3, "Every option and what keeps it")."""

GROUPS: dict[str, dict[str, list[tuple[str, dict[str, Any]]]]] = {
    "tuning": VARIANTS,
    "shield_options": SHIELD_OPTIONS,
}
"""Groups of variants; each writes its own section of BENCHMARKS.md."""

BASE_PARAMS = frozenset({"shield_opponent_mode"})
"""Variant settings that belong to the base config, not to `algo_params`."""


def variant_config(
    config: Mapping[str, Any], env: str, algo: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    """The workflow config of one variant: `config` on `env` and `algo` alone, the variant's
    `params` on top of the algorithm's, training and reset seeds of the tuning."""
    variant = copy.deepcopy(dict(config))
    variant.update(envs=[env], algos=[algo])
    variant["base"] = {
        **variant["base"],
        "seed_offset": TRAINING_OFFSET,
        "final_policy_eval_seed_offset": TUNING.first,
    }
    variant["base"].update({k: v for k, v in params.items() if k in BASE_PARAMS})
    params = {k: v for k, v in params.items() if k not in BASE_PARAMS}
    algo_params = dict(variant.get("algo_params") or {})
    extra = {}
    if algo in shielded_algos():
        extra["calibration_seed_offset"] = TUNING.first + CALIBRATION_SHIFT
    algo_params[algo] = {**(algo_params.get(algo) or {}), **extra, **params}
    variant["algo_params"] = algo_params
    return variant


def measure_variant(
    config: Mapping[str, Any], env: str, algo: str, params: Mapping[str, Any], work: Path
) -> dict[str, Any]:
    """Train and evaluate every run of one variant; per-run rates, returns and CPU seconds."""
    # Validated as the workflow validates it, without the seed-use check: these runs are the
    # one use `TUNING` allows.
    workflow = variant_config(config, env, algo, params)
    validate_workflow_config(workflow, SCHEMA_PATH, load_components=True)
    runs = []
    for idx in range(int(workflow["num_runs"])):
        run = resolve_run_config(workflow, env, algo, idx)
        run_dir = work / f"run{idx}"
        started = time.process_time()
        train_run(run.to_dict(), run_dir, progress=False, threads=1)
        train_seconds = time.process_time() - started
        files = RunFiles(run_dir)
        evaluate_run(run_dir, files.eval)
        table = pd.read_parquet(files.eval)
        horizon = run.constraint_horizon
        deployed = table[table["shielded"] | ~table["shielded"].any()]
        at_h = deployed[deployed["horizon"] == horizon].iloc[0]
        whole = deployed[deployed["horizon"] == deployed["horizon"].max()].iloc[0]
        runs.append(
            {
                "violations": int(at_h["violations"]),
                "episodes": int(at_h["n"]),
                "horizon": int(horizon),
                "return": float(whole["mean_return"]),
                "train_cpu_seconds": train_seconds,
            }
        )
    k = [run["violations"] for run in runs]
    n = [run["episodes"] for run in runs]
    mean, low, high = between_run_interval(
        k=k, n=n, confidence=float(workflow["base"]["final_policy_eval_confidence"])
    )
    return {
        "env": env,
        "algo": algo,
        "params": dict(params),
        "runs": runs,
        "p_violation": [mean, low, high],
        "return": sum(run["return"] for run in runs) / len(runs),
        "train_cpu_seconds": sum(run["train_cpu_seconds"] for run in runs) / len(runs),
        "max_risk": float(workflow["base"]["max_risk"]),
    }


def benchmark(
    envs: Sequence[str], work: Path, variants: Mapping[str, Sequence[Any]] = VARIANTS
) -> dict[str, Any]:
    """Every variant of `envs` in `variants` (a group of `GROUPS`), in its order."""
    load = os.getloadavg()
    started = time.monotonic()
    config = yaml.safe_load(CONFIG.read_text())
    rows = []
    for env in envs:
        for number, (algo, params) in enumerate(variants[env]):
            print(f"{env} {algo} {params}", flush=True)
            rows.append(measure_variant(config, env, algo, params, work / env / str(number)))
    return {
        "machine": machine_info(load),
        "minutes": (time.monotonic() - started) / 60,
        "training_offset": TRAINING_OFFSET,
        "evaluation_first_seed": TUNING.first,
        "calibration_first_seed": TUNING.first + CALIBRATION_SHIFT,
        "rows": rows,
    }


def render_markdown(results: Mapping[str, Any]) -> str:
    """The tuning section of BENCHMARKS.md."""
    m = results["machine"]
    lines = [
        f"`{results.get('command', 'python -m benchmarks.tuning')}` on {m['date']}: "
        f"{m['platform']}, {m['cpus']} CPUs, "
        f"torch {m['torch']} on 1 thread; {results['minutes']:.1f} min.",
        "",
        f"`config/config.yaml` with the variant's `algo_params`; training seeds "
        f"`seed_offset` = {results['training_offset']} + run; evaluation episodes from reset "
        f"seed {results['evaluation_first_seed']:,}, calibration from "
        f"{results['calibration_first_seed']:,} (`src.seeds.TUNING`, spent). P(viol. <= H): "
        "mean of the runs' rates within the constraint horizon [between-run interval] "
        "(per run); return: mean evaluation return over the whole episode, and its ratio to "
        "the env's `ippo`.",
        "",
        "| env | algo | algo_params | P(viol. <= H) | per run | return | / ippo "
        "| train CPU-s / run |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    reference = {r["env"]: r["return"] for r in results["rows"] if r["algo"] == "ippo"}
    for r in results["rows"]:
        mean, low, high = r["p_violation"]
        per_run = ", ".join(f"{run['violations'] / run['episodes']:.3f}" for run in r["runs"])
        params = ", ".join(f"`{k}` {v}" for k, v in r["params"].items()) or "–"
        ratio = r["return"] / reference[r["env"]] if reference.get(r["env"]) else float("nan")
        lines.append(
            f"| {r['env']} | {r['algo']} | {params} | {mean:.3f} [{low:.3f}, {high:.3f}] | "
            f"{per_run} | {r['return']:.1f} | {ratio:.2f}x | {r['train_cpu_seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the variants of the given envs; print, save and (with --write) record them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", default="tuning", choices=sorted(GROUPS), help="variants")
    parser.add_argument("--env", nargs="+", help="envs of the group (default: all of them)")
    parser.add_argument("--work", type=Path, help="run folders (default: benchmarks/out/GROUP)")
    parser.add_argument("--write", action="store_true", help="rewrite BENCHMARKS.md's section")
    args = parser.parse_args(argv)
    variants = GROUPS[args.group]
    envs = args.env or sorted(variants)
    unknown = sorted(set(envs) - set(variants))
    if unknown:
        parser.error(f"group {args.group} has no variants on {', '.join(unknown)}")
    results = benchmark(envs, args.work or OUT / args.group, variants)
    results["command"] = " ".join(["python -m benchmarks.tuning", *(argv or sys.argv[1:])])
    save_results(args.group, results, render_markdown(results), quick=not args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
