"""How many candidates the shield on Box actions needs: risk and return against candidates.

The central shield on Box actions (`src.algos.shield.box`) judges, for every refused proposal,
the proposal, `candidates` joint actions sampled from the agents' Gaussian policies and a
cross-entropy search's safest joint action; its critic's backup takes the least risk over the
recorded action and `candidates` uniform draws in the Box. This benchmark trains `shield` on
`spread` with continuous actions (3 agents, 25-step episodes, collisions cost) once per value
of `candidates` (`CANDIDATES`), and `ippo` and `shield_dec` (at the default `candidates`) once
as references, on the same seed and budget,
then evaluates each run as the workflow does (`evaluate_run`: the evaluation's own episodes,
the shield on) and reports:

- P(violation within the episode) (the constraint horizon, 25 steps) with its two-sided 95%
  Clopper-Pearson interval, against `max_risk`;
- the mean return within the episode;
- the share of the armed training decisions that overrode the proposal and that fell back to
  the least-risk candidate, and the filter's training seconds per 1,000 decisions;
- the certificate (allowance, or "no certificate") and the CPU seconds of training (with its
  certificate).

Then the trained policy and models of the default run (`candidates` 16) are deployed with
each value of `candidates` at the fixed allowance `max_risk` (the filter alone changes; the
same evaluation seeds and actor seeds): P(violation within the episode), return, the share of
decisions that overrode the proposal and fell back, and the filter's seconds per 1,000
decisions. This isolates what the candidate count buys in the filter from its effect on
training, which the runs above compare at the cost of their training noise.

One run per setting: the intervals are those of one run's evaluation episodes, the comparison
between settings is of runs that share their seed and everything but `candidates`.

Run: `python -m benchmarks.shield_box` (about 3 CPU-minutes on one core; not part of
`make bench`); `--quick` a smoke run (tiny sizes, nothing written to BENCHMARKS.md). Results go
to `benchmarks/out/shield_box.json` and the section between the shield_box markers of
BENCHMARKS.md.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import dataclasses  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from benchmarks.common import machine_info, save_results  # noqa: E402
from src.algos import metrics as M  # noqa: E402
from src.algos.policy import load_actor  # noqa: E402
from src.algos.train import train_run  # noqa: E402
from src.config.run import RunConfig, make_run_config  # noqa: E402
from src.config.shield import DEFAULT_CANDIDATES  # noqa: E402
from src.core.io import load_from_file  # noqa: E402
from src.envs.registry import make_vector_env  # noqa: E402
from src.evaluation.episodes import first_violation_steps  # noqa: E402
from src.evaluation.evaluate import collect_episodes, evaluate_run  # noqa: E402
from src.stats import clopper_pearson_interval  # noqa: E402

CANDIDATES = (4, 16, 64)
"""The values of `candidates` compared."""
MAX_RISK = 0.1
SHIELD_PARAMS = {
    # config/config.yaml's shield model training.
    "model_epochs": 2,
    "critic_steps": 4,
    "critic_batch_size": 32,
    "max_valid_batch": 1024,
    "backup": "coordinate",
}
FULL = {
    "num_envs": 16,
    "rollouts": 50,
    "updates": 24,
    "patience": 8,
    "calibration": 100,
    "eval_episodes": 200,
}
QUICK = {
    "num_envs": 4,
    "rollouts": 25,
    "updates": 3,
    "patience": 1,
    "calibration": 4,
    "eval_episodes": 8,
}


def run_config(algo: str, candidates: int, sizes: dict[str, int]) -> dict[str, Any]:
    """Run 0 of `algo` on continuous `spread` (3 agents, 25 steps) at `sizes`."""
    params = {**SHIELD_PARAMS, "candidates": candidates}
    params["calibration_episodes"] = sizes["calibration"]
    shielded = algo.startswith("shield")
    return make_run_config(
        env_name="spread",
        algo=algo,
        n_agents=3,
        num_envs=sizes["num_envs"],
        rollouts=sizes["rollouts"],
        timesteps=sizes["num_envs"] * sizes["rollouts"] * sizes["updates"],
        learning_epochs=4,
        mini_batches=4,
        learning_rate=2.0e-3,
        max_risk=MAX_RISK,
        shield_patience=sizes["patience"],
        checkpoint_every=1000,
        env_params={"continuous_actions": True, "max_steps": 25},
        algo_params=params if shielded else {},
        final_policy_eval_episodes=sizes["eval_episodes"],
        final_policy_eval_horizons=[25],
        final_policy_eval_num_envs=min(sizes["eval_episodes"], 50),
    )


def measure(algo: str, candidates: int, sizes: dict[str, int], root: Path) -> dict[str, Any]:
    """Train and evaluate one run; its row of the table."""
    run = root / f"{algo}-{candidates}"
    started = time.process_time()
    train_run(run_config(algo, candidates, sizes), run, progress=False)
    train_cpu = time.process_time() - started
    evaluation = evaluate_run(run, root / f"{algo}-{candidates}.parquet")
    shielded = algo.startswith("shield")
    on = evaluation[evaluation["shielded"] == shielded].iloc[0]
    k, n = int(on["violations"]), int(on["n"])
    low, high = clopper_pearson_interval(k=k, n=n, confidence=0.95)
    row: dict[str, Any] = {
        "algo": algo,
        "candidates": candidates if shielded else None,
        "violations": k,
        "episodes": n,
        "risk": k / n,
        "risk_low": float(low),
        "risk_high": float(high),
        "return": float(on["mean_return"]),
        "train_cpu_s": train_cpu,
    }
    if shielded:
        updates = [r for r in load_from_file(run, "updates.json") if r.get(M.SHIELD_ARMED)]
        agent_steps = sum(sizes["num_envs"] * sizes["rollouts"] * 3 for _ in updates)
        decisions = agent_steps // 3
        row["override_share"] = sum(r[M.SHIELD_INTERVENTIONS] for r in updates) / agent_steps
        row["fallback_share"] = sum(r[M.SHIELD_NO_SAFE_ACTION] for r in updates) / decisions
        row["filter_s_per_1000"] = 1000 * sum(r[M.SHIELD_SECONDS] for r in updates) / decisions
        certificate = load_from_file(run, "policy.pt")["shield"]["certificate"]
        row["certified"] = bool(certificate["certified"])
        row["allowance"] = float(certificate["allowance"])
    print(row, file=sys.stderr, flush=True)
    return row


def deployed(run: Path, candidates: int, sizes: dict[str, int]) -> dict[str, Any]:
    """The trained shield of `run` deployed with `candidates` at the allowance `max_risk`:
    its row of the second table."""
    actor = load_actor(run)
    shield = actor.action_filter
    shield.config = dataclasses.replace(shield.config, candidates=candidates)
    shield.allowance = MAX_RISK
    config = RunConfig.from_dict(load_from_file(run, "config.json"))
    episodes = sizes["eval_episodes"]
    first = config.evaluation.final_policy_eval_seed_offset
    started = time.process_time()
    batch = collect_episodes(
        make_vec=lambda copies: make_vector_env(
            "spread", num_envs=copies, seed=None, **config.env.constructor_params(max_steps=25)
        ),
        actor=actor,
        seeds=range(first, first + episodes),
        max_steps=25,
        batch_size=min(episodes, 50),
        actor_seed=first,
    )
    k = int((first_violation_steps(batch.violation, batch.length) > 0).sum())
    low, high = clopper_pearson_interval(k=k, n=episodes, confidence=0.95)
    stats = shield.stats  # the last batch's decisions (`reset` starts them anew)
    row = {
        "candidates": candidates,
        "risk": k / episodes,
        "risk_low": float(low),
        "risk_high": float(high),
        "return": float(batch.reward.sum() / episodes),
        "override_share": stats.interventions / (3 * stats.decisions),
        "fallback_share": stats.no_safe_action / stats.decisions,
        "filter_s_per_1000": 1000 * stats.seconds / stats.decisions,
        "cpu_s": time.process_time() - started,
    }
    print(row, file=sys.stderr, flush=True)
    return row


def markdown(rows: list[dict[str, Any]], sizes: dict[str, int], info: dict[str, Any]) -> str:
    """The BENCHMARKS.md section."""
    steps = sizes["num_envs"] * sizes["rollouts"] * sizes["updates"]
    lines = [
        "## Shield on Box actions: candidates per decision",
        "",
        "`python -m benchmarks.shield_box`: `shield` on `spread` with continuous actions (3 "
        f"agents, 25-step episodes, `max_risk` {MAX_RISK}), {steps:,} training steps "
        f"({sizes['updates']} updates, armed after {sizes['patience']}), run 0 of each "
        "setting on the same seed, `ippo` and `shield_dec` as references; the evaluation's "
        f"{sizes['eval_episodes']} episodes with the shield on. Risk: P(violation within the "
        "episode) with its 95% Clopper-Pearson interval. Overrides: share of the armed "
        "training agent-steps; fallbacks: share of the armed decisions without an allowed "
        "candidate; filter: training seconds per 1,000 decisions.",
        "",
        "| policy | candidates | risk [95% CI] | return | overrides | fallbacks | filter s "
        "/ 1k | certificate | train CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        risk = f"{row['risk']:.3f} [{row['risk_low']:.3f}, {row['risk_high']:.3f}]"
        if row["algo"].startswith("shield"):
            cert = f"{row['allowance']:.3g}" if row["certified"] else "no certificate"
            extra = (
                f"{row['override_share']:.2f} | {row['fallback_share']:.2f} | "
                f"{row['filter_s_per_1000']:.2f} | {cert}"
            )
        else:
            extra = "- | - | - | -"
        lines.append(
            f"| {row['algo']} | {row['candidates'] or '-'} | {risk} | {row['return']:.1f} | "
            f"{extra} | {row['train_cpu_s']:.0f} |"
        )
    return "\n".join(lines)


def deployed_markdown(rows: list[dict[str, Any]], sizes: dict[str, int]) -> str:
    """The second table: one trained shield, deployed with each candidate count."""
    lines = [
        "",
        f"The `candidates` 16 run's policy and models deployed with each count at the "
        f"allowance `max_risk` {MAX_RISK} (the filter alone changes), on the same "
        f"{sizes['eval_episodes']} evaluation episodes and actor seeds; overrides and fallbacks "
        "as shares of the last batch's agent-steps and decisions.",
        "",
        "| candidates | risk [95% CI] | return | overrides | fallbacks | filter s / 1k |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['candidates']} | {row['risk']:.3f} [{row['risk_low']:.3f}, "
            f"{row['risk_high']:.3f}] | {row['return']:.1f} | {row['override_share']:.2f} | "
            f"{row['fallback_share']:.2f} | {row['filter_s_per_1000']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print, and save the results (and the BENCHMARKS.md section unless --quick)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no markdown update")
    parser.add_argument("--candidates", nargs="+", type=int, default=list(CANDIDATES))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()
    sizes = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [measure("ippo", 0, sizes, root)]
        rows += [measure("shield", c, sizes, root) for c in args.candidates]
        rows.append(measure("shield_dec", DEFAULT_CANDIDATES, sizes, root))
        default = root / f"shield-{DEFAULT_CANDIDATES}"
        deploys = [deployed(default, c, sizes) for c in args.candidates] if default.exists() else []
    info = machine_info(load)
    results = {"sizes": sizes, "rows": rows, "deployed": deploys, "machine": info}
    text = markdown(rows, sizes, info)
    text += "\n" + deployed_markdown(deploys, sizes) if deploys else ""
    text += f"\n\nMeasured {info['date']} on {info['processor']} ({info['cpus']} CPUs)."
    save_results("shield_box", results, text, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
