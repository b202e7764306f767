"""`shield` vs `ippo` vs `ippo_lag` at the default experiment's budget and seeds.

Trains every algorithm on `hazard_grid` and `intersection` with the resolved run configs of
`config/config.yaml` (same budget, same seed per run index), then reports, over the training
episodes that *start after the shield armed* (global step > shield_patience x steps per
update; the same window for every algorithm, so the comparison is paired in time):

- the episode violation rate (any agent's cost > 0 in the episode) with its Clopper-Pearson
  95% interval,
- the per-agent-step cost rate (cost / (length x agents)),
- the mean team return, the training wall time and the part of it spent in the shield's filter,
- for the shield, over its armed updates: the share of agent-steps whose action it overrode
  and the share of its (copy, step) decisions that fell back to the least-risk joint action
  found for want of any other within the allowance.

The shield's calibrated risks against the true env are `benchmarks/shield_truth.py`'s.

Run: `python -m benchmarks.shield_vs_baselines [--runs N] [--out DIR]`. Writes
`benchmarks/out/shield_vs_baselines.json` and prints a Markdown table. Not part of
`make bench` (it trains 6 x N runs).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from src.algos.metrics import (
    SHIELD_ARMED,
    SHIELD_INTERVENTIONS,
    SHIELD_NO_SAFE_ACTION,
    SHIELD_SECONDS,
)
from src.algos.train import train_run
from src.config.workflow import resolve_run_config, validate_workflow_config
from src.core.io import load_from_file
from src.records import load_history
from src.runfiles import RunFiles
from src.stats import clopper_pearson_interval

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
ALGOS = ("ippo", "ippo_lag", "shield")
ENVS = ("hazard_grid", "intersection")


def window_stats(run_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Statistics of the episodes that start after the shield's patience."""
    history = load_history(run_dir, RunFiles.NAMES["history_json"])
    steps_per_update = config["num_envs"] * config["rollouts"]
    start = config["shield_patience"] * steps_per_update
    episodes = [ep for ep in history if ep.t_start > start]
    n = len(episodes)
    violations = sum(ep.violated for ep in episodes)
    low, high = clopper_pearson_interval(k=violations, n=max(n, 1), confidence=0.95)
    agents = config["n_agents"]
    return {
        "episodes": n,
        "violations": violations,
        "violation_rate": violations / n if n else float("nan"),
        "ci_low": float(low),
        "ci_high": float(high),
        "cost_per_agent_step": float(
            np.sum([ep.cost for ep in episodes])
            / max(1, agents * sum(ep.length for ep in episodes))
        ),
        "mean_return": float(np.mean([ep.team_return for ep in episodes])) if n else float("nan"),
        "interventions_per_episode": float(np.mean([ep.shield_interventions for ep in episodes]))
        if n
        else float("nan"),
    }


def decision_stats(updates: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """Shares of the armed updates' agent-steps whose action the shield overrode and of its
    decisions that fell back to the least-risk joint action.

    Every armed update decides once per (copy, rollout step), for all agents of the copy.
    NaN for runs without a shield (no update is armed).
    """
    armed = [row for row in updates if row.get(SHIELD_ARMED)]
    decisions = len(armed) * config["num_envs"] * config["rollouts"]
    if not decisions:
        return {"decisions": 0, "intervention_rate": float("nan"), "no_safe_rate": float("nan")}
    agent_steps = decisions * config["n_agents"]
    return {
        "decisions": decisions,
        "intervention_rate": sum(row.get(SHIELD_INTERVENTIONS) or 0.0 for row in armed)
        / agent_steps,
        "no_safe_rate": sum(row.get(SHIELD_NO_SAFE_ACTION) or 0.0 for row in armed) / decisions,
    }


def run_all(runs: int, out_dir: Path) -> list[dict[str, Any]]:
    """Train every (env, algo, run) in turn; return one record each."""
    workflow = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    workflow["num_runs"] = max(workflow.get("num_runs", 1), runs)
    workflow = validate_workflow_config(workflow)
    records = []
    for env in ENVS:
        for run_idx in range(runs):
            for algo in ALGOS:
                config = resolve_run_config(workflow, env, algo, run_idx).to_dict()
                config["use_wandb"] = False
                run_dir = out_dir / env / algo / f"run{run_idx}"
                started = time.perf_counter()
                train_run(config, run_dir, progress=False)
                seconds = time.perf_counter() - started
                updates = load_from_file(run_dir, RunFiles.NAMES["updates_json"])
                record = {
                    "env": env,
                    "algo": algo,
                    "run": run_idx,
                    "seed": config["seed"],
                    "train_seconds": seconds,
                    "filter_seconds": sum(row.get(SHIELD_SECONDS) or 0.0 for row in updates),
                    **window_stats(run_dir, config),
                    **decision_stats(updates, config),
                }
                print(json.dumps(record), flush=True)
                records.append(record)
    return records


def render_markdown(records: list[dict[str, Any]]) -> str:
    """One row per (env, algo, run)."""
    lines = [
        "| env | algo | run | episodes | violation rate [95% CI] | cost / agent-step | "
        "mean return | interventions / episode | fallbacks / decision | train s | "
        "of which filter s |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['run']} | {r['episodes']} | "
            f"{r['violation_rate']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] | "
            f"{r['cost_per_agent_step']:.3f} | {r['mean_return']:.2f} | "
            f"{r['interventions_per_episode']:.1f} | {_share(r['no_safe_rate'])} | "
            f"{r['train_seconds']:.0f} | "
            f"{r['filter_seconds']:.0f} |"
        )
    return "\n".join(lines)


def _share(value: float) -> str:
    """A share as a percentage, or a dash when undefined (runs without a shield)."""
    return "-" if value != value else f"{100 * value:.0f}%"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: train, summarise, save JSON, print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="run indices (seeds) per pair")
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: temp)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        raise SystemExit("--runs must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        records = run_all(args.runs, args.out or Path(tmp))
    markdown = render_markdown(records)
    print(markdown)
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / "shield_vs_baselines.json"
    tmp_path = OUT / ".shield_vs_baselines.json.tmp"
    payload = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": args.runs,
        "records": records,
        "markdown": markdown,
    }
    tmp_path.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp_path, target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
