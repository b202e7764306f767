"""What a refused agent of the decentralised shield executes, measured on trained shields: its
most likely own action of acceptable excess risk, or its part of the predicted joint action.

Every trained `shield_dec` run of a results folder whose config sets the common plan is
deployed, at its deployed allowance and at `max_risk`, once with each rule of `plan_refused`
(`excess`, `plan`; `src.config.shield.ShieldConfig`) on the same `--episodes` episodes of its
constraint horizon, from reset seeds of the spent tuning range (`src.seeds.TUNING`,
`RULE_SHIFT` on, where no other benchmark plays): per run, allowance and rule the violating
episodes with their 95% Clopper-Pearson interval and the mean return, and per run and
allowance the exact McNemar test of the two rules on the same episodes (an episode violates
under one rule and not the other: b and c). The policy and its models are the run's, trained
with the rule its config names; only the deployed decision changes.

Run: `python -m benchmarks.shield_dec_rule --results results/paper [--episodes N] [--write]`.
Results go to `benchmarks/out/shield_dec_rule.json` and, with `--write`, the shield_dec_rule
section of BENCHMARKS.md.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import arguments, cpu_seconds, play, positive_int, table
from benchmarks.ladder import ran, record_shield_runs
from src.algos.policy import load_actor
from src.evaluation.episodes import first_violation_steps
from src.seeds import TUNING
from src.stats import clopper_pearson_interval, exact_mcnemar

RULE_SHIFT = 950_000
"""The first reset seed played is `TUNING.first` + this (the ladder plays from 800,000 on, the
shield traps from 900,000, the tuning benchmark below 600,000)."""
RULES = ("excess", "plan")


def deploy(run: Path, episodes: int) -> list[dict[str, Any]]:
    """`run`'s decentralised shield deployed with each rule at its deployed allowance and at
    `max_risk`: one row per allowance and rule, the paired test in the second rule's row.
    Runs of other algorithms, or without the common plan, give no rows."""
    actor = load_actor(run)
    shield = actor.action_filter
    config = actor.config
    if config.algo != "shield_dec" or not shield.config.common_plan:
        return []
    horizon = int(config.constraint_horizon)
    seeds = range(TUNING.first + RULE_SHIFT, TUNING.first + RULE_SHIFT + episodes)
    deployed = float(shield.allowance)
    rows = []
    for allowance in sorted({deployed, float(shield.config.max_risk)}):
        violated = {}
        for rule in RULES:
            shield.config = dataclasses.replace(shield.config, plan_refused=rule)
            shield.allowance = allowance
            cpu, batch = cpu_seconds(
                play, actor, config, seeds, max_steps=horizon, batch_size=min(episodes, 500)
            )
            violated[rule] = first_violation_steps(batch.violation, batch.length) > 0
            k = int(violated[rule].sum())
            low, high = clopper_pearson_interval(k=k, n=episodes, confidence=0.95)
            rows.append(
                {
                    "env": config.env_name,
                    "algo": config.algo,
                    "run": int(config.run_idx),
                    "horizon": horizon,
                    "allowance": allowance,
                    "deployed": allowance == deployed,
                    "rule": rule,
                    "episodes": episodes,
                    "violations": k,
                    "low": float(low),
                    "high": float(high),
                    "return": float(batch.reward.sum() / episodes),
                    "cpu_s": cpu,
                }
            )
            print(rows[-1], file=sys.stderr, flush=True)
        b = int((violated["excess"] & ~violated["plan"]).sum())
        c = int((~violated["excess"] & violated["plan"]).sum())
        rows[-1] |= {"only_excess": b, "only_plan": c, "p_value": exact_mcnemar(b, c)}
    return rows


def render_markdown(results: Mapping[str, Any]) -> str:
    """The section: one row per run, allowance and rule, and the paired tests below."""
    rows = results["rows"]
    tests = [r for r in rows if "p_value" in r]
    return "\n".join(
        [
            ran(results),
            "",
            f"Each trained `shield_dec` run of `{results['results']}` with the common plan, "
            "deployed at its deployed allowance and at `max_risk` with each rule on the same "
            f"{results['episodes']} episodes of its constraint horizon H from reset seed "
            f"{results['first_seed']:,} on (`src.seeds.TUNING`, spent). P(viol. <= H): the "
            "violating share with its 95% Clopper-Pearson interval; return: the mean team "
            "return over those episodes.",
            "",
            *table(
                "env | run | H | allowance | rule | P(viol. <= H) [95% CI] | return | CPU s",
                "lrrrlrrr",
                (
                    f"{r['env']} | {r['run']} | {r['horizon']} | {r['allowance']:.4g}"
                    f"{' (deployed)' if r['deployed'] else ''} | `{r['rule']}` | "
                    f"{r['violations'] / r['episodes']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
                    f"| {r['return']:.1f} | {r['cpu_s']:.0f}"
                    for r in rows
                ),
            ),
            "",
            *(
                f"- {r['env']} run {r['run']}, allowance {r['allowance']:.4g}: episodes "
                f"violating with `excess` only {r['only_excess']}, with `plan` only "
                f"{r['only_plan']}; exact McNemar p = {r['p_value']:.3g}."
                for r in tests
            ),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Deploy every trained `shield_dec` of `--results` with both rules; print, save, record."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--results", type=Path, required=True, help="a results folder")
    parser.add_argument("--episodes", type=positive_int, default=300, help="episodes per rule")
    args = parser.parse_args(argv)
    return record_shield_runs(
        "shield_dec_rule",
        argv,
        parser,
        lambda run: deploy(run, args.episodes),
        first_seed=TUNING.first + RULE_SHIFT,
        render=render_markdown,
    )


if __name__ == "__main__":
    raise SystemExit(main())
