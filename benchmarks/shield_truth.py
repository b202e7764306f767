"""The shield's calibrated risks (its per-decision estimates U) against the true environment.

For trained shield runs (`shield`, `shield_dec`) on the native grid tasks, the deployed
shielded team (`load_actor(run, shielded=True)`) plays `--episodes` evaluation episodes (the
run's evaluation reset seeds, capped at the constraint horizon); at `--steps` steps spread
over the episode, every env copy is a *decision*. Per decision, with w its `remaining` steps
of the shield's horizon (`Decision.remaining`: `horizon` = 10 with the default `receding`
scope):

- calibrated U: the risk the shield reports for the joint action it executed,
  `shield.last.bound` = g(q) (the same number recomputed from the shield's models,
  `diagnostics.certified_plan_risk`, is checked against it: `bound_gap`);
- true (deployed): P(violation within w steps) in the real env when the team executes the
  decision's joint action and then keeps acting with the deployed shielded policy (a second
  actor loaded from the run, with its own seed). This is the event g is calibrated on (a
  violation within `horizon` steps of an executed decision while the shielded team keeps
  acting, `calibration.OutcomeLedger`), so it is the headline;
- true (backup): P(violation within w steps) when the joint action is followed by the models'
  safest joint action at every step (`diagnostics.backup_actions`), the continuation that the
  models' risk q assumes.

Both truths are Monte Carlo estimates over clones of the decision's env copy (`get_state` /
`set_state`, a fresh random stream per clone; `--rollouts` clones for the deployed truth,
`--backup-rollouts` for the backup truth; `src.algos.shield.diagnostics`). A violation is some
agent's cost > 0; an episode that terminates first ends the window without one. The steps
are spread over [1, cap - horizon + 1] (`episode` scope: [1, horizon], where the windows
are), so the cap never cuts a window (the ledger drops such decisions); decisions after a
violation count, as they do in the ledger.

Reported per run and per env (the decisions of the given runs pooled): decisions; fallbacks
(the shield executed the least-risk action it found, over the allowance); the mean calibrated
risk U; and per truth the share of decisions whose true risk exceeds U, by the
Monte Carlo estimate's one-sided 90% Clopper-Pearson lower bound (beyond the rollouts' noise)
and by the point estimate (noise included), and the mean true risk. For a calibrated shield
the mean true (deployed) risk stays below the mean U and few decisions exceed it.

Not measured any more: whether a fallback had some joint action whose true risk was well
inside the allowance, g(a) / 2 (`Decision.allowance` is in units of q now). The coordinate
search does not judge every joint action, so such a finding would mix the search's misses
with the models' errors; and showing that a risk is below g(a) / 2 (0.03 to 0.08 for trained
runs) takes tens to hundreds of rollouts (no violation in n bounds it by about 2.3 / n at
90%) for each of the n_actions ** n_agents joint actions (125 in intersection) per fallback,
many times the rest of the benchmark's cost, for the one or two fallbacks among a run's
sampled decisions. Their true risks are among the decisions'.

Run: `python -m benchmarks.shield_truth --runs DIR [DIR ...]` on run folders of a shield
(e.g. `results/default/runs/hazard_grid/shield/run0`); prints a Markdown table, writes
`benchmarks/out/shield_truth.json`, and with `--write` the section of BENCHMARKS.md. The
defaults give 216 decisions per run (24 episodes x 9 steps), in about 65 CPU-seconds for an
intersection run and 15 for a hazard_grid run of the default experiment.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import json  # noqa: E402
import shlex  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import machine_info, write_section  # noqa: E402
from src.algos.policy import load_actor  # noqa: E402
from src.algos.shield.budget import BudgetShield  # noqa: E402
from src.algos.shield.diagnostics import (  # noqa: E402
    certified_plan_risk,
    clone_env,
    true_deployed_risk,
    true_plan_risk,
)
from src.analysis.files import write_text  # noqa: E402
from src.envs.registry import make_vector_env  # noqa: E402
from src.stats import clopper_pearson_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
SECTION = "shield_truth"
SECTION_HEADING = "## Shield truth"
SECTION_INTRO = (
    "The shield's calibrated risk U of each joint action it executes against the true risk of "
    "that decision in the real env (`benchmarks/shield_truth.py`, whose docstring defines the "
    "numbers; the block below is written by `--write`)."
)
LOWER_ALPHA = 0.1
"""The Monte Carlo estimate's lower bound is one-sided at 1 - LOWER_ALPHA."""
TRUTHS = ("deployed", "backup")
"""The continuations after the decision's joint action: the deployed policy, the backup."""


def sample_steps(*, horizon: int, scope: str, count: int, cap: int) -> np.ndarray:
    """`count` steps (1-based, increasing, distinct) spread evenly over the steps whose
    decisions have a whole window before the cap `cap` (the constraint horizon):
    [1, cap - horizon + 1] with the `receding` scope, [1, horizon] with `episode` (its window
    ends at step horizon)."""
    last = horizon if scope == "episode" else cap - horizon + 1
    if not 1 <= horizon <= cap or count < 1:
        raise ValueError(f"need count >= 1 and 1 <= horizon <= {cap}, got {count}, {horizon}")
    return np.unique(np.rint(np.linspace(1, last, count)).astype(np.int64))


def lower_bound(risk: np.ndarray, rollouts: int) -> np.ndarray:
    """One-sided (1 - LOWER_ALPHA) Clopper-Pearson lower bound of Monte Carlo risks k / n."""
    k = np.rint(np.asarray(risk, dtype=np.float64) * rollouts).astype(np.int64)
    low, _ = clopper_pearson_interval(k=k, n=rollouts, confidence=1.0 - 2.0 * LOWER_ALPHA)
    return np.asarray(low, dtype=np.float64).reshape(k.shape)


def check_run(
    run_dir: Path,
    *,
    episodes: int,
    steps: int,
    rollouts: int,
    backup_rollouts: int,
    seed: int,
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
    started, cpu_started = time.perf_counter(), time.process_time()
    actor = load_actor(run_dir, shielded=True)
    shield = actor.action_filter
    if not isinstance(shield, BudgetShield):
        raise ValueError(f"{run_dir} is not a run of the shield")
    # The deployed policy that acts on the clones after each decision: its own shield state.
    follower = load_actor(run_dir, shielded=True)
    config = actor.config
    scope = shield.config.risk_scope
    cap = config.constraint_horizon
    if cap is None:
        raise ValueError(f"{run_dir}: its config records no constraint_horizon")
    when = sample_steps(horizon=shield.config.horizon, scope=scope, count=steps, cap=cap)
    sampled = set(when.tolist())
    offset = config.evaluation.first_seed(config.run_idx)
    env = make_vector_env(
        config.env_name,
        num_envs=episodes,
        seed=None,
        **config.env.constructor_params(max_steps=cap),
    )
    obs = env.reset(seed=[offset + i for i in range(episodes)])
    actor.reset(episodes, offset)
    step = np.ones(episodes, dtype=np.int64)
    columns: dict[str, list[np.ndarray]] = {
        k: [] for k in ("certified", "deployed", "backup", "fallback")
    }
    # The central shield's U is g(q) of the executed joint action, recomputed as a check; the
    # decentralised one's is g of its agents' largest expected risk (not a function of the
    # joint action alone), so it has no such check.
    central = shield.config.coordination == "central"
    gap = 0.0 if central else float("nan")
    for t in range(1, int(when[-1]) + 1):
        executed = actor.act(obs, step)
        decision = shield.last
        # The copies with steps of the shield's horizon left (with `episode`: up to step H).
        live = np.zeros(0, dtype=np.int64)
        if t in sampled and decision is not None:
            live = np.flatnonzero(decision.remaining >= 1)
        if len(live):
            window = decision.remaining[live].astype(np.int64)
            keys = np.random.SeedSequence([seed, config.run_idx, t]).generate_state(4)
            sim = clone_env(env, live, seed=int(keys[0]))
            deployed = true_deployed_risk(
                sim,
                follower,
                executed[live],
                horizon=window,
                episode_step=step[live],
                rollouts=rollouts,
                seed=int(keys[1]),
                follower_seed=int(keys[2]),
                budget=shield.budget[live] if scope == "episode" else None,
            )
            backup = (
                true_plan_risk(
                    sim,
                    shield,
                    executed[live],
                    horizon=window,
                    rollouts=backup_rollouts,
                    seed=int(keys[3]),
                )
                if backup_rollouts
                else np.full(len(live), np.nan)
            )
            if central:
                recomputed = certified_plan_risk(shield, obs[live], executed[live], horizon=window)
                gap = max(gap, float(np.abs(recomputed - decision.bound[live]).max(initial=0.0)))
            sim.close()
            columns["certified"].append(decision.bound[live])
            columns["deployed"].append(deployed)
            columns["backup"].append(backup)
            columns["fallback"].append(decision.fallback[live])
        result = env.step(executed)
        done = result.terminated.any(axis=1) | result.truncated.any(axis=1)
        obs = result.obs
        step = np.where(done, 1, step + 1)
    env.close()
    per_decision = {k: np.concatenate(v) if v else np.zeros(0) for k, v in columns.items()}
    per_decision["deployed_low"] = lower_bound(per_decision["deployed"], rollouts)
    per_decision["backup_low"] = (
        lower_bound(per_decision["backup"], backup_rollouts)
        if backup_rollouts
        else np.full(len(per_decision["backup"]), np.nan)
    )
    return {
        "run": str(run_dir),
        "env": config.env_name,
        "algo": config.algo,
        "risk_scope": shield.config.risk_scope,
        "horizon": shield.config.horizon,
        "steps": when.tolist(),
        "episodes": episodes,
        "rollouts": rollouts,
        "backup_rollouts": backup_rollouts,
        "bound_gap": gap,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
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
    n = len(certified)

    def mean(values: np.ndarray) -> float:
        return float(values.mean()) if n else float("nan")

    summary: dict[str, Any] = {
        "decisions": n,
        "fallbacks": int(np.asarray(per_decision["fallback"], dtype=bool).sum()),
        "certified_mean": mean(certified),
    }
    for truth in TRUTHS:
        true = np.asarray(per_decision[truth], dtype=np.float64)
        low = np.asarray(per_decision[f"{truth}_low"], dtype=np.float64)
        measured = n > 0 and not np.isnan(true).any()
        nan = float("nan")
        summary[f"{truth}_exceeds"] = float(np.mean(low > certified)) if measured else nan
        summary[f"{truth}_exceeds_point"] = float(np.mean(true > certified)) if measured else nan
        summary[f"{truth}_mean"] = mean(true) if measured else nan
    return summary


def pooled(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per env and algorithm, in order of first appearance: the summary of its runs' decisions
    together."""
    rows = []
    for env, algo in dict.fromkeys((r["env"], r.get("algo", "shield")) for r in records):
        runs = [r for r in records if (r["env"], r.get("algo", "shield")) == (env, algo)]
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
    lines = [
        f"Measured on {m['date']} by `{payload['command']}`: {m['platform']}, {m['cpus']} CPUs, "
        f"torch {m['torch']} on {m['torch_threads']} thread; {payload['seconds'] / 60:.1f} min "
        f"wall, {payload['cpu_seconds'] / 60:.1f} CPU-min; load average {m['load_before'][0]:.2f} "
        f"before, {m['load_after'][0]:.2f} after.",
        "",
        "| run | env | decisions | fallbacks | mean calibrated U | deployed: true > U "
        "(90% lower bound) | deployed: true > U (estimate) | deployed: mean true | backup: "
        "true > U (90% lower bound) | backup: true > U (estimate) | backup: mean true |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(label: str, env: str, r: Mapping[str, Any]) -> str:
        cells = [label, env, str(r["decisions"]), str(r["fallbacks"]), _risk(r["certified_mean"])]
        for truth in TRUTHS:
            cells += [
                _share(r[f"{truth}_exceeds"]),
                _share(r[f"{truth}_exceeds_point"]),
                _risk(r[f"{truth}_mean"]),
            ]
        return "| " + " | ".join(cells) + " |"

    for r in records:
        lines.append(row(f"`{r['run']}`", r["env"], r))
    for r in payload["pooled"]:
        runs = f"{r['runs']} run{'s' if r['runs'] != 1 else ''}"
        lines.append(row(f"**{runs} pooled**", f"**{r['env']}**", r))
    gaps = [r["bound_gap"] for r in records if not np.isnan(r["bound_gap"])]
    gap = max(gaps, default=float("nan"))
    lines += [
        "",
        f"- Decisions: each of {first.get('episodes', '?')} evaluation episodes per run (the "
        f"run's evaluation reset seeds) at the steps {first.get('steps', '?')} of "
        f"the constraint horizon; a decision is the joint action the deployed shield executed "
        "in one episode at one of these steps. **n runs pooled**: the decisions of the n runs "
        "of that env together. Fallbacks: decisions where the shield executed the least-risk "
        "action it found because none was within its allowance.",
        "- Calibrated U (an estimate, not a bound): `shield.last.bound` = g(q) of the "
        "executed joint action, the shield's "
        f"P(violation within its next {first.get('horizon', '?')} steps) (the same number "
        f"recomputed from its models differs by at most {gap:.1e}; the decentralised "
        "shield's U, g of its agents' largest expected risk over the others' predicted "
        "actions, is not recomputed).",
        f"- deployed: the true P(violation within those steps) when the team executes the "
        f"decision's joint action and then keeps acting with the deployed shielded policy "
        f"(what g is calibrated on), Monte Carlo over {first.get('rollouts', '?')} clones of "
        f"the env per decision; backup: the same with the models' safest joint action at "
        f"every later step (what q assumes), over {first.get('backup_rollouts', '?')} clones.",
        f"- true > U (90% lower bound): share of decisions whose true risk's one-sided "
        f"{1 - LOWER_ALPHA:.0%} Clopper-Pearson lower bound is above U (the true risk exceeds "
        "the certified one beyond the Monte Carlo noise); (estimate): share whose Monte Carlo "
        "estimate is above U (noise included). Mean true: the mean of the estimates.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: check the given run folders, print Markdown, save JSON (`--write`: and
    the BENCHMARKS.md block)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="shield runs")
    parser.add_argument("--episodes", type=int, default=24, help="evaluation episodes per run")
    parser.add_argument("--steps", type=int, default=9, help="sampled steps per episode")
    parser.add_argument("--rollouts", type=int, default=100, help="clones per decision, deployed")
    parser.add_argument(
        "--backup-rollouts", type=int, default=25, help="clones per decision, backup (0: skip)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the clones and follower")
    parser.add_argument("--write", action="store_true", help="write the BENCHMARKS.md block")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    started, cpu_started = time.perf_counter(), time.process_time()
    records = []
    for run in args.runs:
        record = check_run(
            run,
            episodes=args.episodes,
            steps=args.steps,
            rollouts=args.rollouts,
            backup_rollouts=args.backup_rollouts,
            seed=args.seed,
        )
        print(
            f"{run}: {record['decisions']} decisions in {record['seconds']:.0f} s "
            f"({record['cpu_seconds']:.0f} CPU-s)",
            flush=True,
        )
        records.append(record)
    options = {
        "--episodes": args.episodes,
        "--steps": args.steps,
        "--rollouts": args.rollouts,
        "--backup-rollouts": args.backup_rollouts,
        "--seed": args.seed,
    }
    words = ["--runs", *map(str, args.runs)]
    for option, value in options.items():
        words += [option, str(value)]
    command = "python -m benchmarks.shield_truth " + shlex.join(words)
    payload = {
        "command": command,
        "machine": machine_info(load_before),
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        "records": records,
        "pooled": pooled(records),
    }
    markdown = render_markdown(payload)
    print(markdown)
    OUT.mkdir(parents=True, exist_ok=True)
    write_text(json.dumps(payload, indent=2) + "\n", OUT / "shield_truth.json")
    if args.write:
        write_section(SECTION, markdown, heading=SECTION_HEADING, intro=SECTION_INTRO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
