"""The v1 shield's certified risks against the true environment.

For trained `shield` runs (v1) on the native grid tasks, the deployed shielded team plays
evaluation episodes; at sampled steps every live env copy is a *decision*. For each decision:

- certified: the shield's U(s, a) of the joint action it executed, the probability of a
  violation within the steps of its horizon still left (capped at `--horizon`) when that
  action is taken and the shield's backup (its safest joint action) after it;
- true: the same plan's probability in the real env, by Monte Carlo: the env is cloned through
  `get_state`/`set_state` with fresh random streams, the action executed, then the backup
  chosen by the shield's models at every step (`src.algos.shield.diagnostics`).

It reports the share of decisions whose true risk exceeds the certified one (with the
Monte Carlo error taken into account: the true risk's one-sided 95% lower bound above the
certified value), the mean certified and true risks, and for the decisions where the shield fell
back to its safest action, the share where some joint action's true risk was well inside the
allowance the shield had (at most half of V(s) + budget left).

Run: `python -m benchmarks.shield_truth --runs DIR [DIR ...]` on run folders of a v1 shield
(e.g. `results/default/runs/hazard_grid/shield/run0`). Prints a Markdown table and writes
`benchmarks/out/shield_truth.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.algos.policy import load_actor
from src.algos.shield.budget import BudgetShield
from src.algos.shield.diagnostics import certified_plan_risk, clone_env, true_plan_risk
from src.envs.registry import make_vector_env
from src.stats import clopper_pearson_interval

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
SAMPLE_STEPS = (1, 2, 4, 7, 11, 16, 24, 35, 50, 70)


def check_run(
    run_dir: Path,
    *,
    episodes: int,
    horizon: int,
    rollouts: int,
    fallback_checks: int,
    seed: int,
) -> dict[str, Any]:
    """Decisions of the deployed shield of one run against the true env (module docstring)."""
    torch.set_num_threads(1)
    actor = load_actor(run_dir, shielded=True)
    shield = actor.action_filter
    if not isinstance(shield, BudgetShield):
        raise ValueError(f"{run_dir} is not a run of the v1 shield")
    config = actor.config
    offset = config.evaluation.first_seed(config.run_idx)
    env = make_vector_env(
        config.env_name,
        num_envs=episodes,
        seed=None,
        **config.env.constructor_params(max_steps=config.evaluation.max_horizon),
    )
    obs = env.reset(seed=[offset + i for i in range(episodes)])
    actor.reset(episodes, offset)
    step = np.ones(episodes, dtype=np.int64)
    alive = np.ones(episodes, dtype=bool)
    certified, true, low = [], [], []
    fallbacks, fallback_inside = 0, 0
    n_actions, n_agents = env.n_actions, env.n_agents
    for t in range(1, max(SAMPLE_STEPS) + 1):
        executed = actor.act(obs, step)
        decision = shield.last
        if t in SAMPLE_STEPS and alive.any():
            live = np.flatnonzero(alive)
            left = np.minimum(decision.remaining[live].astype(np.int64), horizon)
            sim = clone_env(env, live, seed=seed + t)
            truth = true_plan_risk(
                sim,
                shield,
                executed[live],
                horizon=int(left.max()),
                rollouts=rollouts,
                seed=seed + 7 * t,
            )
            claim = certified_plan_risk(shield, obs[live], executed[live], horizon=int(left.max()))
            k = np.rint(truth * rollouts).astype(np.int64)
            lower, _ = clopper_pearson_interval(k=k, n=rollouts, confidence=0.9)
            certified += claim.tolist()
            true += truth.tolist()
            low += np.asarray(lower).tolist()
            fell = live[decision.fallback[live]][:fallback_checks]
            if len(fell):
                fallbacks += len(fell)
                fallback_inside += _inside(env, shield, fell, decision, horizon, rollouts, seed)
            sim.close()
        result = env.step(executed)
        done = result.terminated.any(axis=1) | result.truncated.any(axis=1)
        alive &= ~done & ~(result.cost > 0).any(axis=1)
        obs = result.obs
        step = np.where(done, 1, step + 1)
    env.close()
    certified_a, true_a, low_a = map(np.asarray, (certified, true, low))
    return {
        "run": str(run_dir),
        "env": config.env_name,
        "decisions": len(certified_a),
        "exceeds": float(np.mean(low_a > certified_a)) if len(certified_a) else float("nan"),
        "exceeds_point": float(np.mean(true_a > certified_a)) if len(true_a) else float("nan"),
        "certified_mean": float(certified_a.mean()) if len(certified_a) else float("nan"),
        "true_mean": float(true_a.mean()) if len(true_a) else float("nan"),
        "fallbacks_checked": fallbacks,
        "fallback_share_with_room": fallback_inside / fallbacks if fallbacks else float("nan"),
        "n_actions": n_actions,
        "n_agents": n_agents,
    }


def _inside(
    env: object,
    shield: BudgetShield,
    copies: np.ndarray,
    decision: object,
    horizon: int,
    rollouts: int,
    seed: int,
) -> int:
    """How many of the fallback `copies` had a joint action whose true risk was at most half
    the allowance V(s) + budget left."""
    options = shield.joint.numpy()
    count = 0
    for copy in copies:
        allowance = decision.safest[copy] + max(decision.budget[copy], 0.0)
        left = int(min(decision.remaining[copy], horizon))
        sim = clone_env(env, np.full(len(options), copy), seed=seed + int(copy))
        truth = true_plan_risk(
            sim, shield, options, horizon=left, rollouts=max(rollouts // 2, 10), seed=seed
        )
        sim.close()
        count += bool((truth <= 0.5 * allowance).any())
    return count


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: check the given run folders, print Markdown, save JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="v1 shield runs")
    parser.add_argument("--episodes", type=int, default=40, help="evaluation episodes per run")
    parser.add_argument("--horizon", type=int, default=100, help="longest plan checked")
    parser.add_argument("--rollouts", type=int, default=100, help="clones per decision")
    parser.add_argument("--fallback-checks", type=int, default=4, help="per sampled step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    records = [
        check_run(
            run,
            episodes=args.episodes,
            horizon=args.horizon,
            rollouts=args.rollouts,
            fallback_checks=args.fallback_checks,
            seed=args.seed,
        )
        for run in args.runs
    ]
    lines = [
        "| run | decisions | true > certified (MC 90% lower bound) | point estimate | "
        "mean certified | mean true | fallbacks checked | with room |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['run']} | {r['decisions']} | {r['exceeds']:.1%} | {r['exceeds_point']:.1%} | "
            f"{r['certified_mean']:.3f} | {r['true_mean']:.3f} | {r['fallbacks_checked']} | "
            f"{r['fallback_share_with_room']:.0%} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    OUT.mkdir(parents=True, exist_ok=True)
    payload = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "records": records}
    tmp = OUT / ".shield_truth.json.tmp"
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, OUT / "shield_truth.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
