"""What cheaper shield models buy in CPU time, and what they cost in safety.

The shield's remaining cost (`benchmarks.shield`) is its models' arithmetic: fitting the
world model, cost model and safety critic after every update, and the filter's judgements
through them. This benchmark applies one lever at a time (`LEVERS`: a model setting of the
default experiment's `shield`, or the cheap settings together) to run 0 of each env of
`config/config.yaml` (hazard_grid, intersection) and measures:

- training: `benchmarks.shield.training_cost`, the shield's first `shield_patience` + 24
  updates side by side with `ippo` (one update of each in turn, `ippo` twice), its armed
  updates' CPU time as a multiple of ippo's, split into filter and model fitting, and the
  share of the filter's decisions that overrode the proposal;
- the run trained to its end and certified (`ShieldedIPPO.train`, the deployed allowance),
  then `benchmarks.shield.evaluation_cost`: the evaluation's episodes (seeds, batch size and
  length of the config's `final_policy_eval_*`) with the shield on and off, the CPU ratio
  on / off, and P(violation within the constraint's horizon) with the shield on, its
  Clopper-Pearson interval at the evaluation's confidence, against `max_risk`.

A lever counts for the cost targets only where its run keeps the safety target too: a shield
that is cheap because it judges with weaker models and lets more violations through is not
the same shield. The test is P(violation) of the run's evaluation episodes within
`max_risk`; the interval of one run is wide (the table gives its upper end), and the
workflow's summary table judges a method on all its runs together.

Run: `python -m benchmarks.shield_levers` (about 9 CPU-minutes on one core; not part of
`make bench`);
`--levers default ensemble_2` measures a subset; `--quick` a smoke run (tiny sizes, nothing
written to BENCHMARKS.md). Results go to `benchmarks/out/shield_levers.json` and the section
between the shield_levers markers of BENCHMARKS.md.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import copy  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from dataclasses import asdict, replace  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from benchmarks.common import machine_info, positive_int, save_results  # noqa: E402
from benchmarks.shield import (  # noqa: E402
    ENVS,
    EVAL_TARGET,
    FULL,
    TRAIN_TARGET,
    Sizes,
    default_experiment,
    evaluation_cost,
    run_config,
    training_cost,
)
from src.config.run import RunConfig  # noqa: E402
from src.core.logging import WARNING, configure_logging  # noqa: E402

LEVERS: dict[str, dict[str, Any]] = {
    "default": {},
    "ensemble_2": {"ensemble_size": 2},
    "width_32": {"wm_hidden": [32, 32], "critic_hidden": [32, 32]},
    "model_epochs_1": {"model_epochs": 1},
    "critic_steps_1": {"critic_steps": 1},
    "combined": {
        "ensemble_size": 2,
        "wm_hidden": [32, 32],
        "critic_hidden": [32, 32],
        "critic_steps": 1,
    },
}
"""Lever name -> the shield settings it changes (`algo_params` of `shield`)."""

QUICK = Sizes(
    patience=1,
    armed_updates=1,
    eval_episodes=4,
    eval_steps=12,
    eval_repeats=1,
    num_envs=4,
    rollouts=8,
)


def quick_experiment(sizes: Sizes = QUICK) -> dict[str, Any]:
    """The default experiment cut to a smoke run at `sizes`: a run of one update beyond the
    measured ones, certified on 8 calibration episodes."""
    experiment = default_experiment()
    updates = (sizes.patience or 0) + sizes.armed_updates + 1
    experiment["base"]["timesteps"] = updates * (sizes.num_envs or 1) * (sizes.rollouts or 1)
    experiment["algo_params"]["shield"]["calibration_episodes"] = 8
    return experiment


def lever_experiment(experiment: Mapping[str, Any], lever: str) -> dict[str, Any]:
    """`experiment` with `lever`'s settings over its `shield` algo_params (a copy)."""
    if lever not in LEVERS:
        raise ValueError(f"unknown lever {lever!r}; known levers: {', '.join(LEVERS)}")
    changed = copy.deepcopy(dict(experiment))
    params = changed.setdefault("algo_params", {}).setdefault("shield", {})
    params.update(copy.deepcopy(LEVERS[lever]))
    return changed


def measure(
    experiment: Mapping[str, Any], env_name: str, lever: str, sizes: Sizes
) -> dict[str, Any]:
    """One (env, lever): its training cost, then the run to its end and its evaluation."""
    training, trainer = training_cost(lever_experiment(experiment, lever), env_name, sizes)
    trainer.train(progress=False)  # the remaining updates, then the certificate
    evaluation = evaluation_cost(trainer, sizes, floor=False)
    return {
        "env": env_name,
        "lever": lever,
        "settings": LEVERS[lever],
        "max_risk": trainer.config.max_risk,
        "ratio_armed": training["ratio_armed"],
        "filter_seconds": training["armed_filter_seconds"],
        "model_seconds": training["armed_model_seconds"],
        "ippo_armed_seconds": training["ippo_armed_seconds"],
        "training_overridden_share": training["overridden_share"],
        "certificate": trainer.certificate.statement if trainer.certificate else None,
        "eval_ratio": evaluation["ratio"],
        "eval_overridden_share": evaluation["overridden_share"],
        "violating_on": evaluation["violating_on"],
        "violating_high_on": evaluation["violating_high_on"],
        "confidence": evaluation["confidence"],
        "horizon": evaluation["horizon"],
        "violating_off": evaluation["violating_off"],
        "return_on": evaluation["return_on"],
        "episodes": evaluation["episodes"],
    }


def _configured_shield(
    experiment: Mapping[str, Any], env_name: str, sizes: Sizes
) -> dict[str, Any]:
    """The resolved shield settings of `experiment` on `env_name` at `sizes`."""
    sized = {"patience": sizes.patience, "num_envs": sizes.num_envs, "rollouts": sizes.rollouts}
    return RunConfig.from_dict(run_config(experiment, env_name, "shield", **sized)).shield.to_dict()


def benchmark(
    sizes: Sizes = FULL,
    *,
    levers: Sequence[str] = tuple(LEVERS),
    envs: Sequence[str] = ENVS,
    experiment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every (env, lever); the results as a dict."""
    experiment = experiment if experiment is not None else default_experiment()
    for lever in levers:
        lever_experiment(experiment, lever)  # an unknown lever fails before any training
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    wall, cpu = time.perf_counter(), time.process_time()
    rows = []
    for env_name in envs:
        for lever in levers:
            rows.append(measure(experiment, env_name, lever, sizes))
            print(env_name, lever, f"{rows[-1]['ratio_armed']:.2f}x", flush=True)
    return {
        "sizes": asdict(sizes),
        "algo_params": dict(experiment.get("algo_params", {}).get("shield", {})),
        "shield": _configured_shield(experiment, envs[0], sizes),
        "rows": rows,
        "machine": {
            **machine_info(load_before),
            "wall_seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu,
        },
    }


def _settings(row: Mapping[str, Any]) -> str:
    changed = ", ".join(
        f"{k} {tuple(v) if isinstance(v, list) else v}" for k, v in row["settings"].items()
    )
    return changed or "as configured"


def render_markdown(
    r: Mapping[str, Any], *, command: str = "python -m benchmarks.shield_levers"
) -> str:
    """The BENCHMARKS.md section."""
    m, s, shield = r["machine"], r["sizes"], r["shield"]
    defaults = ", ".join(f"{k} {v}" for k, v in r["algo_params"].items()) or "none"
    lines = [
        "## Shield cost against its models",
        "",
        f"`{command}` on {m['date']}: {m['platform']}, {m['cpus']} CPUs, Python "
        f"{m['python']}, torch {m['torch']} on {m['torch_threads']} thread; load average "
        f"{m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after; "
        f"{m['wall_seconds'] / 60:.0f} min wall. Times are CPU seconds of the process.",
        "",
        "Run 0 of the default experiment's `shield`, one lever at a time: a setting, or the cheap "
        "ones together (the configured: "
        f"{defaults}; ensemble {shield['ensemble_size']} x {tuple(shield['wm_hidden'])}, "
        f"critic {tuple(shield['critic_hidden'])}). Training: the first "
        f"{s['patience'] or 'shield_patience'} + {s['armed_updates']} updates side by side "
        "with `ippo` (as in the Shield section), the armed updates' CPU time as a multiple of "
        "ippo's; overridden: the filter's decisions that replaced the proposal. Then the run "
        "trained to its end and certified, and evaluated as the workflow does (its "
        f"{r['rows'][0]['episodes']} episodes and seeds) with the shield on and off: the CPU "
        f"ratio on / off and P(violation within {r['rows'][0]['horizon']} steps) with the "
        "shield on (the deployed allowance) with the upper end of its "
        f"{r['rows'][0]['confidence']:.0%} Clopper-Pearson interval, against max_risk.",
        "",
        "| env | lever | training x ippo | filter s | model fitting s | overridden, training | "
        "evaluation on / off | overridden, evaluation | P(violation) on [upper] (max_risk) | "
        "P(violation) off | return on |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['env']} | {row['lever']}: {_settings(row)} | **{row['ratio_armed']:.2f}** | "
            f"{row['filter_seconds']:.1f} | {row['model_seconds']:.1f} | "
            f"{row['training_overridden_share']:.0%} | **{row['eval_ratio']:.2f}** | "
            f"{row['eval_overridden_share']:.0%} | {row['violating_on']:.3f} "
            f"[{row['violating_high_on']:.3f}] ({row['max_risk']:g}) | "
            f"{row['violating_off']:.3f} | {row['return_on']:.1f} |"
        )
    lines += ["", *verdicts(r)]
    return "\n".join(lines)


def verdicts(r: Mapping[str, Any]) -> list[str]:
    """Per env: the cheapest training and evaluation among the levers whose run stays within
    max_risk, against the targets."""
    lines = []
    for env_name in dict.fromkeys(row["env"] for row in r["rows"]):
        rows = [row for row in r["rows"] if row["env"] == env_name]
        safe = [row for row in rows if row["violating_on"] <= row["max_risk"]]
        if not safe:
            lines.append(f"- {env_name}: no lever keeps the shield within max_risk.")
            continue
        train = min(safe, key=lambda row: row["ratio_armed"])
        evaluation = min(safe, key=lambda row: row["eval_ratio"])
        lines.append(
            f"- {env_name}: of the levers whose run stays within max_risk "
            f"({', '.join(row['lever'] for row in safe)}), the cheapest training is "
            f"{train['lever']} at {train['ratio_armed']:.2f}x ippo (target {TRAIN_TARGET:g}x: "
            f"{'met' if train['ratio_armed'] <= TRAIN_TARGET else 'NOT met'}); the cheapest "
            f"evaluation {evaluation['lever']} at {evaluation['eval_ratio']:.2f}x shield-off "
            f"(target {EVAL_TARGET:g}x: "
            f"{'met' if evaluation['eval_ratio'] <= EVAL_TARGET else 'NOT met'})."
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, save JSON, update BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levers", nargs="+", choices=list(LEVERS), default=list(LEVERS))
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS))
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no markdown update")
    parser.add_argument(
        "--armed-updates", type=positive_int, help="training updates measured after arming"
    )
    args = parser.parse_args(list(argv) if argv is not None else [])
    sizes = QUICK if args.quick else FULL
    if args.armed_updates is not None:
        sizes = replace(sizes, armed_updates=args.armed_updates)
    configure_logging(min_level=WARNING, file_enabled=False)  # no line per training update
    experiment = quick_experiment() if args.quick else None
    results = benchmark(sizes, levers=args.levers, envs=args.envs, experiment=experiment)
    command = "python -m benchmarks.shield_levers" + (" --quick" if args.quick else "")
    markdown = render_markdown(results, command=command)
    save_results("shield_levers", results, markdown, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
