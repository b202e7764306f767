"""The shield's calibrated risks (its per-decision estimates U) against the true environment.

The deployed shield of trained runs plays evaluation episodes; at steps spread over the
episode each copy's executed joint action is a decision, its U (`shield.last.bound`; the
central shield's recomputed from its models as a check) against its peers, two true risks,
Monte Carlo estimates over clones of the env: with the deployed policy acting after it (what U
is calibrated on, the headline) and with the models' safest joint action (what q assumes).
Per run and per env: decisions, fallbacks, mean U, the shares whose true risk exceeds U (by a
one-sided 90% Clopper-Pearson lower bound, and by the estimate) and the mean true risks.

Run: `python -m benchmarks.shield_truth --runs DIR [DIR ...] [--write]` on shield run folders
(about 65 CPU-seconds per intersection run). Results go to `benchmarks/out/shield_truth.json`
and the shield_truth section of BENCHMARKS.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import BENCHMARKS_MD, OUT, Clock, arguments, save_results, table
from src.algos.policy import load_actor
from src.algos.shield.budget import BudgetShield
from src.algos.shield.diagnostics import (
    certified_plan_risk,
    clone_env,
    true_deployed_risk,
    true_plan_risk,
)
from src.envs.registry import make_vector_env
from src.stats import clopper_pearson_interval

LOWER_ALPHA = 0.1
"""The Monte Carlo estimate's lower bound is one-sided at 1 - LOWER_ALPHA."""
TRUTHS = ("deployed", "backup")
"""The continuations after the decision's joint action: the deployed policy, the backup."""


def sample_steps(*, horizon: int, count: int, cap: int) -> np.ndarray:
    """`count` steps (1-based, increasing, distinct) spread evenly over [1, cap - horizon + 1],
    the steps whose decisions have a whole window of `horizon` steps before the cap."""
    if not 1 <= horizon <= cap or count < 1:
        raise ValueError(f"need count >= 1 and 1 <= horizon <= {cap}, got {count}, {horizon}")
    return np.unique(np.rint(np.linspace(1, cap - horizon + 1, count)).astype(np.int64))


def lower_bound(risk: np.ndarray, rollouts: int) -> np.ndarray:
    """One-sided (1 - LOWER_ALPHA) Clopper-Pearson lower bound of Monte Carlo risks k / n."""
    k = np.rint(np.asarray(risk, dtype=np.float64) * rollouts).astype(np.int64)
    low, _ = clopper_pearson_interval(k=k, n=rollouts, confidence=1.0 - 2.0 * LOWER_ALPHA)
    return np.asarray(low, dtype=np.float64).reshape(k.shape)


def check_run(
    run_dir: Path, *, episodes: int, steps: int, rollouts: int, backup_rollouts: int, seed: int
) -> dict[str, Any]:
    """Decisions of the deployed shield of one run against the true env (module docstring).

    Returns the run's identity, its per-decision arrays (`per_decision`: certified, deployed
    and backup true risks and their lower bounds, fallback flags; the backup's are NaN with
    `backup_rollouts=0`), `bound_gap` (the largest |recomputed U - reported U|), the wall and
    CPU seconds, and the summary of `summarize`.
    """
    if rollouts < 1 or backup_rollouts < 0 or episodes < 1:
        raise ValueError(
            f"need episodes >= 1, rollouts >= 1, backup_rollouts >= 0, got {episodes}, "
            f"{rollouts}, {backup_rollouts}"
        )
    torch.set_num_threads(1)
    clock = Clock()
    actor = load_actor(run_dir, shielded=True)
    shield = actor.action_filter
    if not isinstance(shield, BudgetShield):
        raise ValueError(f"{run_dir} is not a run of the shield")
    follower = load_actor(run_dir, shielded=True)  # acts on the clones: its own shield state
    config = actor.config
    cap = config.constraint_horizon
    if cap is None:
        raise ValueError(f"{run_dir}: its config records no constraint_horizon")
    when = sample_steps(horizon=shield.config.horizon, count=steps, cap=cap)
    first = config.evaluation.first_seed(config.run_idx)
    params = config.env.constructor_params(max_steps=cap)
    env = make_vector_env(config.env_name, num_envs=episodes, seed=None, **params)
    obs = env.reset(seed=[first + i for i in range(episodes)])
    actor.reset(episodes, first)
    step = np.ones(episodes, dtype=np.int64)
    columns: dict[str, list[np.ndarray]] = {k: [] for k in ("certified", *TRUTHS, "fallback")}
    # The central shield's U is g(q) of the executed joint action, recomputed as a check; the
    # decentralised one's is g of its agents' largest expected risk (not a function of the
    # joint action alone), so it has no such check.
    central = shield.config.coordination == "central"
    gap = 0.0 if central else float("nan")
    for t in range(1, int(when[-1]) + 1):
        executed = actor.act(obs, step)
        decision = shield.last
        if t in when and decision is not None:
            window = decision.remaining.astype(np.int64)
            keys = np.random.SeedSequence([seed, config.run_idx, t]).generate_state(4)
            sim = clone_env(env, np.arange(episodes), seed=int(keys[0]))
            deployed = true_deployed_risk(
                sim,
                follower,
                executed,
                horizon=window,
                episode_step=step,
                rollouts=rollouts,
                seed=int(keys[1]),
                follower_seed=int(keys[2]),
            )
            backup = np.full(episodes, np.nan)
            if backup_rollouts:
                backup = true_plan_risk(
                    sim,
                    shield,
                    executed,
                    horizon=window,
                    rollouts=backup_rollouts,
                    seed=int(keys[3]),
                )
            if central:
                recomputed = certified_plan_risk(shield, obs, executed, horizon=window)
                gap = max(gap, float(np.abs(recomputed - decision.bound).max(initial=0.0)))
            sim.close()
            for key, values in zip(
                columns, (decision.bound, deployed, backup, decision.fallback), strict=True
            ):
                columns[key].append(values)
        result = env.step(executed)
        obs = result.obs
        step = np.where(result.terminated.any(axis=1) | result.truncated.any(axis=1), 1, step + 1)
    env.close()
    per_decision = {k: np.concatenate(v) if v else np.zeros(0) for k, v in columns.items()}
    per_decision["deployed_low"] = lower_bound(per_decision["deployed"], rollouts)
    per_decision["backup_low"] = np.full(len(per_decision["backup"]), np.nan)
    if backup_rollouts:
        per_decision["backup_low"] = lower_bound(per_decision["backup"], backup_rollouts)
    return {
        "run": str(run_dir),
        "env": config.env_name,
        "algo": config.algo,
        "horizon": shield.config.horizon,
        "steps": when.tolist(),
        "episodes": episodes,
        "rollouts": rollouts,
        "backup_rollouts": backup_rollouts,
        "bound_gap": gap,
        "seconds": clock.wall,
        "cpu_seconds": clock.cpu,
        **summarize(per_decision),
        "per_decision": {k: v.tolist() for k, v in per_decision.items()},
    }


def summarize(per_decision: Mapping[str, Sequence[float] | np.ndarray]) -> dict[str, Any]:
    """Counts, shares and means of a set of decisions (module docstring); NaN without any.

    Keys: decisions, fallbacks, certified_mean, and per truth T in `TRUTHS`: T_exceeds (share
    whose lower bound is above the calibrated risk U), T_exceeds_point (share whose estimate is),
    T_mean.
    """
    certified = np.asarray(per_decision["certified"], dtype=np.float64)
    n, nan = len(certified), float("nan")
    summary: dict[str, Any] = {
        "decisions": n,
        "fallbacks": int(np.asarray(per_decision["fallback"], dtype=bool).sum()),
        "certified_mean": float(certified.mean()) if n else nan,
    }
    for truth in TRUTHS:
        true = np.asarray(per_decision[truth], dtype=np.float64)
        low = np.asarray(per_decision[f"{truth}_low"], dtype=np.float64)
        measured = n > 0 and not np.isnan(true).any()
        summary[f"{truth}_exceeds"] = float(np.mean(low > certified)) if measured else nan
        summary[f"{truth}_exceeds_point"] = float(np.mean(true > certified)) if measured else nan
        summary[f"{truth}_mean"] = float(true.mean()) if measured else nan
    return summary


def pooled(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per env and algorithm, in order of first appearance: the summary of its runs' decisions
    together."""
    rows = []
    for env, algo in dict.fromkeys((r["env"], r["algo"]) for r in records):
        runs = [r for r in records if (r["env"], r["algo"]) == (env, algo)]
        keys = runs[0]["per_decision"].keys()
        joined = {k: np.concatenate([np.asarray(r["per_decision"][k]) for r in runs]) for k in keys}
        rows.append({"env": f"{env}, {algo}", "runs": len(runs), **summarize(joined)})
    return rows


def _share(value: float) -> str:
    return "–" if np.isnan(value) else f"{value:.1%}"


def _risk(value: float) -> str:
    return "–" if np.isnan(value) else f"{value:.4f}"


def render_markdown(payload: Mapping[str, Any]) -> str:
    """The BENCHMARKS.md block: command, date, machine, the table and what its columns mean."""
    records, m = payload["records"], payload["machine"]
    first = records[0] if records else {}

    def row(label: str, env: str, r: Mapping[str, Any]) -> list[str]:
        cells = [label, env, str(r["decisions"]), str(r["fallbacks"]), _risk(r["certified_mean"])]
        for truth in TRUTHS:
            cells += [_share(r[f"{truth}_exceeds"]), _share(r[f"{truth}_exceeds_point"])]
            cells.append(_risk(r[f"{truth}_mean"]))
        return cells

    gaps = [r["bound_gap"] for r in records if not np.isnan(r["bound_gap"])]
    runs = [row(f"`{r['run']}`", r["env"], r) for r in records]
    runs += [
        row(f"**{r['runs']} run{'s' if r['runs'] != 1 else ''} pooled**", f"**{r['env']}**", r)
        for r in payload["pooled"]
    ]
    return "\n".join(
        [
            f"Measured on {m['date']} by `{payload['command']}`: {m['platform']}, {m['cpus']} "
            f"CPUs, torch {m['torch']} on {m['torch_threads']} thread; "
            f"{m['wall_seconds'] / 60:.1f} min wall, {m['cpu_seconds'] / 60:.1f} CPU-min; load "
            f"average {m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after.",
            "",
            *table(
                "run | env | decisions | fallbacks | mean calibrated U | deployed: true > U (90% "
                "lower bound) | deployed: true > U (estimate) | deployed: mean true | backup: "
                "true > U (90% lower bound) | backup: true > U (estimate) | backup: mean true",
                "llrrrrrrrrr",
                runs,
            ),
            "",
            f"- Decisions: each of {first.get('episodes', '?')} evaluation episodes per run (the "
            f"run's evaluation reset seeds) at the steps {first.get('steps', '?')} of "
            "the constraint horizon; a decision is the joint action the deployed shield executed "
            "in one episode at one of these steps. **n runs pooled**: the decisions of the n "
            "runs of that env together. Fallbacks: decisions where the shield executed the "
            "least-risk action it found because none was within its allowance.",
            "- Calibrated U (an estimate, not a bound): `shield.last.bound` = g(q) of the "
            "executed joint action, the shield's "
            f"P(violation within its next {first.get('horizon', '?')} steps) (the same number "
            f"recomputed from its models differs by at most {max(gaps, default=np.nan):.1e}; "
            "the decentralised shield's U, g of its agents' largest expected risk over the "
            "others' predicted actions, is not recomputed).",
            "- deployed: the true P(violation within those steps) when the team executes the "
            "decision's joint action and then keeps acting with the deployed shielded policy "
            f"(what g is calibrated on), Monte Carlo over {first.get('rollouts', '?')} clones of "
            "the env per decision; backup: the same with the models' safest joint action at "
            f"every later step (what q assumes), over {first.get('backup_rollouts', '?')} clones.",
            "- true > U (90% lower bound): share of decisions whose true risk's one-sided "
            f"{1 - LOWER_ALPHA:.0%} Clopper-Pearson lower bound is above U (the true risk "
            "exceeds the certified one beyond the Monte Carlo noise); (estimate): share whose "
            "Monte Carlo estimate is above U (noise included). Mean true: the mean of the "
            "estimates.",
        ]
    )


def main(argv: Sequence[str] | None = None, *, out: Path = OUT, path: Path = BENCHMARKS_MD) -> int:
    """Command line: check the given run folders, print Markdown, save JSON (`--write`: and
    the BENCHMARKS.md block)."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="shield runs")
    parser.add_argument("--episodes", type=int, default=24, help="evaluation episodes per run")
    parser.add_argument("--steps", type=int, default=9, help="sampled steps per episode")
    parser.add_argument("--rollouts", type=int, default=100, help="clones per decision, deployed")
    parser.add_argument("--backup-rollouts", type=int, default=25, help="clones, backup (0: skip)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the clones and follower")
    args = parser.parse_args(argv)
    clock = Clock()
    options = {key: getattr(args, key) for key in ("episodes", "steps", "rollouts")}
    options |= {"backup_rollouts": args.backup_rollouts, "seed": args.seed}
    records = []
    for run in args.runs:
        records.append(check_run(run, **options))
        print(f"{run}: {records[-1]['cpu_seconds']:.0f} CPU-s", flush=True)
    words = ["--runs", *map(str, args.runs)]
    words += [
        str(w) for key, value in options.items() for w in (f"--{key.replace('_', '-')}", value)
    ]
    payload = {
        "command": "python -m benchmarks.shield_truth " + shlex.join(words),
        "machine": clock.machine(),
        "records": records,
        "pooled": pooled(records),
    }
    markdown = render_markdown(payload)
    save_results(
        "shield_truth",
        payload,
        markdown,
        quick=not args.write,
        out=out,
        path=path,
        heading="## Shield truth",
        intro="The shield's calibrated risk U of each joint action it executes against the true "
        "risk of that decision in the real env (`benchmarks/shield_truth.py`, whose docstring "
        "defines the numbers; the block below is written by `--write`).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
