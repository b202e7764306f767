"""What cheaper shield models buy in CPU time, and what they cost in safety.

One lever at a time (`LEVERS`: a model setting of the default experiment's `shield`, or the
cheap ones together) on run 0 of each env, with the shield benchmark's measurements: training
against `ippo`, then the run trained to its end and certified and its evaluation with the
shield on against off, with P(violation) against `max_risk`. A lever counts for the cost
targets only where its run stays within `max_risk`.

Run: `python -m benchmarks.shield_levers [--levers ...]` (about 9 CPU-minutes; not part of
`make bench`); `--quick` a smoke run. Results go to `benchmarks/out/shield_levers.json` and the
shield_levers section of BENCHMARKS.md.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

import torch

from benchmarks.common import (
    Clock,
    arguments,
    experiment,
    met,
    positive_int,
    save_results,
    table,
)
from benchmarks.shield import (
    ENVS,
    EVAL_TARGET,
    FULL,
    TRAIN_TARGET,
    Sizes,
    evaluation_cost,
    training_cost,
)
from src.config.run import RunConfig
from src.core.logging import WARNING, configure_logging

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
    config = experiment()
    updates = (sizes.patience or 0) + sizes.armed_updates + 1
    config["base"]["timesteps"] = updates * (sizes.num_envs or 1) * (sizes.rollouts or 1)
    config["algo_params"]["shield"]["calibration_episodes"] = 8
    return config


def lever_experiment(config: Mapping[str, Any], lever: str) -> dict[str, Any]:
    """`config` with `lever`'s settings over its `shield` algo_params (a copy)."""
    if lever not in LEVERS:
        raise ValueError(f"unknown lever {lever!r}; known levers: {', '.join(LEVERS)}")
    changed = copy.deepcopy(dict(config))
    changed.setdefault("algo_params", {}).setdefault("shield", {}).update(
        copy.deepcopy(LEVERS[lever])
    )
    return changed


def measure(config: Mapping[str, Any], env_name: str, lever: str, sizes: Sizes) -> dict[str, Any]:
    """One (env, lever): its training cost, then the run to its end and its evaluation."""
    training, trainer = training_cost(lever_experiment(config, lever), env_name, sizes)
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
        "training_overridden_share": training["overridden_share"],
        "certificate": trainer.certificate.statement if trainer.certificate else None,
        "eval_ratio": evaluation["ratio"],
        "eval_overridden_share": evaluation["overridden_share"],
        **{key: evaluation[key] for key in ("violating_on", "violating_high_on", "violating_off")},
        **{key: evaluation[key] for key in ("confidence", "horizon", "return_on", "episodes")},
    }


def benchmark(
    sizes: Sizes = FULL,
    *,
    levers: Sequence[str] = tuple(LEVERS),
    envs: Sequence[str] = ENVS,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every (env, lever) of the default experiment (or `config`); the results as a dict."""
    config = config if config is not None else experiment()
    for lever in levers:
        lever_experiment(config, lever)  # an unknown lever fails before any training
    torch.set_num_threads(1)
    clock = Clock()
    rows = []
    for env_name in envs:
        for lever in levers:
            rows.append(measure(config, env_name, lever, sizes))
            print(env_name, lever, f"{rows[-1]['ratio_armed']:.2f}x", flush=True)
    shield = RunConfig.from_dict(sizes.run_config(config, envs[0], "shield")).shield
    return {
        "sizes": asdict(sizes),
        "algo_params": dict(config.get("algo_params", {}).get("shield", {})),
        "shield": shield.to_dict(),
        "rows": rows,
        "machine": clock.machine(),
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
    m, s, shield, first = r["machine"], r["sizes"], r["shield"], r["rows"][0]
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
        f"{first['episodes']} episodes and seeds) with the shield on and off: the CPU "
        f"ratio on / off and P(violation within {first['horizon']} steps) with the "
        "shield on (the deployed allowance) with the upper end of its "
        f"{first['confidence']:.0%} Clopper-Pearson interval, against max_risk.",
        "",
        *table(
            "env | lever | training x ippo | filter s | model fitting s | overridden, training | "
            "evaluation on / off | overridden, evaluation | P(violation) on [upper] (max_risk) | "
            "P(violation) off | return on",
            "llrrrrrrrrr",
            (
                f"{row['env']} | {row['lever']}: {_settings(row)} | **{row['ratio_armed']:.2f}**"
                f" | {row['filter_seconds']:.1f} | {row['model_seconds']:.1f} | "
                f"{row['training_overridden_share']:.0%} | **{row['eval_ratio']:.2f}** | "
                f"{row['eval_overridden_share']:.0%} | {row['violating_on']:.3f} "
                f"[{row['violating_high_on']:.3f}] ({row['max_risk']:g}) | "
                f"{row['violating_off']:.3f} | {row['return_on']:.1f}"
                for row in r["rows"]
            ),
        ),
        "",
    ]
    for env_name in dict.fromkeys(row["env"] for row in r["rows"]):
        # The cheapest training and evaluation among the levers whose run stays within max_risk.
        safe = [
            row
            for row in r["rows"]
            if row["env"] == env_name and row["violating_on"] <= row["max_risk"]
        ]
        if not safe:
            lines.append(f"- {env_name}: no lever keeps the shield within max_risk.")
            continue
        train = min(safe, key=lambda row: row["ratio_armed"])
        evaluation = min(safe, key=lambda row: row["eval_ratio"])
        lines.append(
            f"- {env_name}: of the levers whose run stays within max_risk "
            f"({', '.join(row['lever'] for row in safe)}), the cheapest training is "
            f"{train['lever']} at {train['ratio_armed']:.2f}x ippo (target {TRAIN_TARGET:g}x: "
            f"{met(train['ratio_armed'] <= TRAIN_TARGET)}); the cheapest evaluation "
            f"{evaluation['lever']} at {evaluation['eval_ratio']:.2f}x shield-off (target "
            f"{EVAL_TARGET:g}x: {met(evaluation['eval_ratio'] <= EVAL_TARGET)})."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, save JSON, update BENCHMARKS.md."""
    parser = arguments(__doc__, quick=True)
    parser.add_argument("--levers", nargs="+", choices=list(LEVERS), default=list(LEVERS))
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS))
    parser.add_argument("--armed-updates", type=positive_int, help="training updates after arming")
    args = parser.parse_args(list(argv) if argv is not None else [])
    sizes = QUICK if args.quick else FULL
    if args.armed_updates is not None:
        sizes = replace(sizes, armed_updates=args.armed_updates)
    configure_logging(min_level=WARNING, file_enabled=False)  # no line per training update
    config = quick_experiment() if args.quick else None
    results = benchmark(sizes, levers=args.levers, envs=args.envs, config=config)
    command = "python -m benchmarks.shield_levers" + (" --quick" if args.quick else "")
    save_results(
        "shield_levers", results, render_markdown(results, command=command), quick=args.quick
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
