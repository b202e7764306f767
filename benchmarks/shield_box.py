"""How many candidates the shield on Box actions needs: risk and return against candidates.

`shield` on `spread` with continuous actions, trained once per value of `candidates`
(`CANDIDATES`) against its peers `ippo` and `shield_dec`, run 0 of each on the same seed and
budget, evaluated as the workflow does: risk with its Clopper-Pearson interval, return,
overrides, fallbacks, filter time and certificate. Then the default run's policy and models
deployed with each count at the allowance `max_risk`: the filter alone changes.

Run: `python -m benchmarks.shield_box` (about 3 CPU-minutes; not part of `make bench`);
`--quick` a smoke run. Results go to `benchmarks/out/shield_box.json` and the shield_box
section of BENCHMARKS.md.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    Clock,
    arguments,
    armed_updates,
    cpu_seconds,
    deployed,
    experiment,
    play,
    save_results,
    table,
    violating,
)
from src.algos import metrics as M
from src.algos.policy import load_actor
from src.algos.shield.calibration import load_certificate
from src.algos.train import train_run
from src.config.run import make_run_config
from src.config.shield import DEFAULT_CANDIDATES
from src.evaluation.evaluate import evaluate_run
from src.stats import clopper_pearson_interval

CANDIDATES = (4, 16, 64)
"""The values of `candidates` compared."""
MAX_RISK = 0.1
AGENTS, STEPS = 3, 25
FULL = {"num_envs": 16, "rollouts": 50, "updates": 24, "patience": 8, "calibration": 100}
FULL["eval_episodes"] = 200
QUICK = {"num_envs": 4, "rollouts": 25, "updates": 3, "patience": 1, "calibration": 4}
QUICK["eval_episodes"] = 8


def run_config(algo: str, candidates: int, sizes: dict[str, int]) -> dict[str, Any]:
    """Run 0 of `algo` on continuous `spread` at `sizes`, the default experiment's shield."""
    params = {**experiment()["algo_params"]["shield"], "candidates": candidates}
    params["calibration_episodes"] = sizes["calibration"]
    return make_run_config(
        env_name="spread",
        algo=algo,
        n_agents=AGENTS,
        num_envs=sizes["num_envs"],
        rollouts=sizes["rollouts"],
        timesteps=sizes["num_envs"] * sizes["rollouts"] * sizes["updates"],
        learning_epochs=4,
        mini_batches=4,
        learning_rate=2.0e-3,
        max_risk=MAX_RISK,
        shield_patience=sizes["patience"],
        checkpoint_every=1000,
        # Agents spawn apart: mpe2's spawning overlaps some at step 1, a violation no team avoids
        # (about a sixth of the episodes at 3 agents), which would put the task's floor above
        # `max_risk`.
        env_params={"continuous_actions": True, "max_steps": STEPS, "spawn": "separated"},
        algo_params=params if algo.startswith("shield") else {},
        final_policy_eval_episodes=sizes["eval_episodes"],
        final_policy_eval_horizons=[STEPS],
        final_policy_eval_num_envs=min(sizes["eval_episodes"], 50),
    )


def risk(violations: int, episodes: int) -> dict[str, float]:
    """The violating share of `episodes` and its 95% Clopper-Pearson interval."""
    low, high = clopper_pearson_interval(k=violations, n=episodes, confidence=0.95)
    return {"risk": violations / episodes, "risk_low": float(low), "risk_high": float(high)}


def measure(algo: str, candidates: int, sizes: dict[str, int], root: Path) -> dict[str, Any]:
    """Train and evaluate one run; its row of the table."""
    run = root / f"{algo}-{candidates}"
    config = run_config(algo, candidates, sizes)
    train_cpu, _ = cpu_seconds(train_run, config, run, progress=False)
    on = deployed(evaluate_run(run, root / f"{algo}-{candidates}.parquet"))
    row: dict[str, Any] = {
        "algo": algo,
        "candidates": candidates if algo.startswith("shield") else None,
        "episodes": int(on["n"]),
        **risk(int(on["violations"]), int(on["n"])),
        "return": float(on["mean_return"]),
        "train_cpu_s": train_cpu,
    }
    if algo.startswith("shield"):
        updates = armed_updates(run)
        decisions = len(updates) * sizes["num_envs"] * sizes["rollouts"]
        row["override_share"] = sum(r[M.SHIELD_INTERVENTIONS] for r in updates) / (
            AGENTS * decisions
        )
        row["fallback_share"] = sum(r[M.SHIELD_NO_SAFE_ACTION] for r in updates) / decisions
        row["filter_s_per_1000"] = 1000 * sum(r[M.SHIELD_SECONDS] for r in updates) / decisions
        row["auc_team"] = updates[-1].get(M.SHIELD_AUC_TEAM)
        certificate = load_certificate(run)
        row["certified"], row["allowance"] = certificate.certified, certificate.allowance
    print(row, file=sys.stderr, flush=True)
    return row


def deploy(run: Path, candidates: int, sizes: dict[str, int]) -> dict[str, Any]:
    """The trained shield of `run` deployed with `candidates` at the allowance `max_risk`: its
    row of the second table."""
    actor = load_actor(run)
    shield = actor.action_filter
    shield.config = dataclasses.replace(shield.config, candidates=candidates)
    shield.allowance = MAX_RISK
    first = actor.config.evaluation.final_policy_eval_seed_offset
    seeds = range(first, first + sizes["eval_episodes"])
    batch_size = min(len(seeds), 50)
    cpu, batch = cpu_seconds(
        play, actor, actor.config, seeds, max_steps=STEPS, batch_size=batch_size
    )
    stats = shield.stats  # the last batch's decisions (`reset` starts them anew)
    row = {
        "candidates": candidates,
        **risk(violating(batch), len(seeds)),
        "return": float(batch.reward.sum() / len(seeds)),
        "override_share": stats.interventions / (AGENTS * stats.decisions),
        "fallback_share": stats.no_safe_action / stats.decisions,
        "filter_s_per_1000": 1000 * stats.seconds / stats.decisions,
        "cpu_s": cpu,
    }
    print(row, file=sys.stderr, flush=True)
    return row


def _risk(row: dict[str, Any]) -> str:
    return f"{row['risk']:.3f} [{row['risk_low']:.3f}, {row['risk_high']:.3f}]"


def _shares(row: dict[str, Any]) -> str:
    return (
        f"{row['override_share']:.2f} | {row['fallback_share']:.2f} | "
        f"{row['filter_s_per_1000']:.2f}"
    )


def _certified(row: dict[str, Any]) -> str:
    """A trained run's shield columns: its shares, filter time and certificate."""
    if not row["algo"].startswith("shield"):
        return "- | - | - | - | -"
    auc = row.get("auc_team")
    auc = "-" if auc is None or math.isnan(auc) else f"{auc:.2f}"
    return f"{_shares(row)} | {auc} | " + (
        f"{row['allowance']:.3g}" if row["certified"] else "no certificate"
    )


def markdown(
    rows: list[dict[str, Any]], sizes: dict[str, int], deploys: list[dict[str, Any]]
) -> str:
    """The BENCHMARKS.md section: the trained runs, then the default run deployed with each
    count (when it ran)."""
    steps = sizes["num_envs"] * sizes["rollouts"] * sizes["updates"]
    lines = [
        "## Shield on Box actions: candidates per decision",
        "",
        "`python -m benchmarks.shield_box`: `shield` on `spread` with continuous actions (3 "
        f"agents spawned apart, 25-step episodes, `max_risk` {MAX_RISK}), {steps:,} training steps "
        f"({sizes['updates']} updates, armed after {sizes['patience']}), run 0 of each "
        "setting on the same seed, `ippo` and `shield_dec` as references; the evaluation's "
        f"{sizes['eval_episodes']} episodes with the shield on. Risk: P(violation within the "
        "episode) with its 95% Clopper-Pearson interval. Overrides: share of the armed "
        "training agent-steps; fallbacks: share of the armed decisions without an allowed "
        "candidate; filter: training seconds per 1,000 decisions; AUC: how well the models' "
        "risk q of the executed joint actions ranks them by whether the team violated within "
        "the shield's horizon after them, over the labelled decisions the last update "
        "calibrates on (0.5: no better than chance).",
        "",
        *table(
            "policy | candidates | risk [95% CI] | return | overrides | fallbacks | filter s / 1k"
            " | AUC | certificate | train CPU s",
            "llllllllll",
            (
                f"{row['algo']} | {row['candidates'] or '-'} | "
                f"{_risk(row)} | "
                f"{row['return']:.1f} | {_certified(row)} | {row['train_cpu_s']:.0f}"
                for row in rows
            ),
        ),
    ]
    if deploys:
        lines += [
            "",
            f"The `candidates` 16 run's policy and models deployed with each count at the "
            f"allowance `max_risk` {MAX_RISK} (the filter alone changes), on the same "
            f"{sizes['eval_episodes']} evaluation episodes and actor seeds; overrides and "
            "fallbacks as shares of the last batch's agent-steps and decisions.",
            "",
            *table(
                "candidates | risk [95% CI] | return | overrides | fallbacks | filter s / 1k",
                "llllll",
                (
                    f"{row['candidates']} | {_risk(row)} | {row['return']:.1f} | {_shares(row)}"
                    for row in deploys
                ),
            ),
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print, and save the results (and the BENCHMARKS.md section unless --quick)."""
    parser = arguments(__doc__, quick=True)
    parser.add_argument("--candidates", nargs="+", type=int, default=list(CANDIDATES))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    clock = Clock()
    sizes = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [measure("ippo", 0, sizes, root)]
        rows += [measure("shield", c, sizes, root) for c in args.candidates]
        rows.append(measure("shield_dec", DEFAULT_CANDIDATES, sizes, root))
        default = root / f"shield-{DEFAULT_CANDIDATES}"
        deploys = [deploy(default, c, sizes) for c in args.candidates] if default.exists() else []
    info = clock.machine()
    text = markdown(rows, sizes, deploys)
    text += f"\n\nMeasured {info['date']} on {info['processor']} ({info['cpus']} CPUs)."
    results = {"sizes": sizes, "rows": rows, "deployed": deploys, "machine": info}
    save_results("shield_box", results, text, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
