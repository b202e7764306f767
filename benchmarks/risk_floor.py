"""Risk floors of the grid tasks: the witness of continuing tasks, the exact DP of terminating ones.

*Continuing tasks* (`continuing=True`, the default: new goals on arrival, traffic that keeps
flowing) have a joint state of every agent's cell *and goal*, too large for an exact DP; their
floor is bounded from above by the careful centralised witness team of `src.analysis.floor` on
the evaluation layouts of every run (the workflow's `floor` rule), against its peer, unconstrained
`ippo`'s goals (or a greedy team's). `--witness --write` writes that table for
`config/config.yaml` and `config/paper.yaml` into the risk_floor section of BENCHMARKS.md;
`spread` gets its witness floor in the same table.

*Terminating tasks* (`continuing=False`: agents stay on their goal, the episode ends when all
are there) get the exact floor of `src.analysis.exact_floor` (the least P(violation within H)
of any centralised, fully observed team), printed for the evaluation layouts (reset seeds
`1_000_000 + i`) of `env_params` of `--config` with `--param` overrides, optionally with the
probability that the minimising policy finishes (`--completion`) and a Monte Carlo cross-check
in the real env (`--mc-layouts`).

    python -m benchmarks.risk_floor --witness --results results/default --write
    python -m benchmarks.risk_floor --env hazard_grid --episodes 200 \\
        --param continuing=false --param slip_mode=any --param n_hazards=8
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.common import CONFIG, PAPER, arguments, experiment, table, write_section
from src.analysis.exact_floor import (
    RiskSolution,
    build_model,
    grid_dynamics,
    monte_carlo_risk,
    policy_risk,
    solve_min_risk,
)
from src.envs import make_vector_env
from src.envs.base import VectorEnv
from src.stats import clopper_pearson_interval

EVAL_SEED_OFFSET = 1_000_000
"""Evaluation layout i is the episode reset with seed `EVAL_SEED_OFFSET + i`."""


@dataclass(frozen=True)
class LayoutFloor:
    """The floor of one evaluation layout (reset seed `1_000_000 + layout`)."""

    layout: int
    joint: float
    """V_H of the exact joint DP of all agents: the minimum risk."""
    completion: float
    """P(every agent on its goal within H steps, no violation) under the minimising policy
    (NaN unless asked for)."""
    solve: int
    """Index of the joint solve this layout's value comes from (shared by layouts with the same
    hazards and goals)."""
    seconds: float
    """Wall time of that joint solve."""


def evaluation_env(env_name: str, n_layouts: int, **params: Any) -> VectorEnv:
    """A vector env of `n_layouts` copies reset to evaluation layouts `0 .. n_layouts - 1`."""
    env = make_vector_env(env_name, num_envs=n_layouts, seed=None, **params)
    env.reset(seed=[EVAL_SEED_OFFSET + i for i in range(n_layouts)])
    return env


def layout_floors(
    env: VectorEnv,
    horizon: int | None = None,
    *,
    keep: Sequence[int] = (),
    require_completion: bool = False,
    completion: bool = False,
) -> tuple[list[LayoutFloor], dict[int, RiskSolution]]:
    """Floors of every copy's current layout, and the joint solutions of the copies in `keep`.

    Copies with the same hazards and goals share one solve (V_H covers every start state).
    `require_completion` is passed to every solve; `completion` also evaluates the probability
    that the minimising joint policy finishes the episode.
    """
    state, size, slip, slip_mode = grid_dynamics(env)
    horizon = env.max_steps if horizon is None else horizon
    groups: dict[bytes, list[int]] = {}
    for e in range(env.num_envs):
        groups.setdefault(state["hazard"][e].tobytes() + state["goal"][e].tobytes(), []).append(e)
    floors: dict[int, LayoutFloor] = {}
    kept: dict[int, RiskSolution] = {}
    for group, members in enumerate(groups.values()):
        starts = state["cell"][members]  # [M, A]
        begin = time.perf_counter()
        hazard, goals = state["hazard"][members[0]], state["goal"][members[0]]
        model = build_model(hazard, goals, size=size, slip_prob=slip, slip_mode=slip_mode)
        solution = solve_min_risk(model, horizon, require_completion=require_completion)
        seconds = time.perf_counter() - begin
        finished = np.full(len(members), np.nan)
        if completion:
            done = policy_risk(model, solution.policy, horizon, quantity="completion")
            finished = done[model.state_index(starts)]
        kept.update({e: solution for e in members if e in keep})
        for joint, done, e in zip(solution.risk(starts), finished, members, strict=True):
            floors[e] = LayoutFloor(e, float(joint), float(done), group, seconds)
    return [floors[e] for e in range(env.num_envs)], kept


def witness_rows(config_path: Path, results: Path | None = None) -> list[dict[str, Any]]:
    """The witness floor (`src.analysis.floor`) of every env of a config that has a witness.

    The reference goal rate is unconstrained ippo's evaluation goals at the floor's horizon
    when `results` holds the experiment's `tables/eval.parquet` with ippo rows, else the
    greedy team's.
    """
    import pandas as pd

    from src.analysis.floor import FEASIBLE_FRACTION, feasible, floor_settings, task_floor
    from src.config.workflow import check_workflow_config

    workflow_config = check_workflow_config(experiment(config_path))
    table_path = results / "tables" / "eval.parquet" if results is not None else None
    evaluation = pd.read_parquet(table_path) if table_path and table_path.exists() else None
    max_risk = float(workflow_config["base"]["max_risk"])
    rows = []
    for env_name in workflow_config["envs"]:
        settings = floor_settings(workflow_config, env_name)
        floor = task_floor(**settings)
        if floor.method == "none":
            continue
        ippo_goals = math.nan
        if evaluation is not None:
            ippo = evaluation[
                (evaluation["env"] == env_name)
                & (evaluation["algo"] == "ippo")
                & (evaluation["horizon"] == floor.horizon)
            ]
            if len(ippo) and ippo["mean_goals"].notna().all():
                ippo_goals = float(np.average(ippo["mean_goals"], weights=ippo["n"]))
        rows.append(
            {
                "config": config_path.name,
                "env": env_name,
                "agents": settings["env_params"]["n_agents"],
                "env_params": settings["env_params"],
                "floor": floor,
                "max_risk": max_risk,
                "bound": FEASIBLE_FRACTION * max_risk,
                "ippo_goals": ippo_goals,
                "feasible": feasible(floor, max_risk=max_risk, ippo_goals=ippo_goals),
            }
        )
    return rows


def witness_markdown(rows: Sequence[dict[str, Any]], command: str) -> str:
    """The section of BENCHMARKS.md: one line per (config, env)."""

    def row(r: dict[str, Any]) -> str:
        floor, ippo = r["floor"], not math.isnan(r["ippo_goals"])
        reference = r["ippo_goals"] if ippo else floor.greedy_goals
        return (
            f"{r['config']} | {r['env']} | {r['agents']} | {floor.horizon} | {floor.episodes} | "
            f"{floor.p_violation:.3f} [{floor.p_upper:.4f}] | {r['bound']:.4f} | "
            f"{floor.goals:.1f} / {reference:.1f} ({'ippo' if ippo else 'greedy'}) = "
            f"{floor.goals / reference:.2f} | {floor.greedy_p_violation:.3f} | "
            f"{'yes' if r['feasible'] else 'no'}"
        )

    lines = [
        f"Measured on {time.strftime('%Y-%m-%d', time.gmtime())} by `{command}`.",
        "",
        *table(
            "config | env | agents | H | layouts | careful team P(viol. ≤ H) [upper] | max_risk "
            "/ 4 | goals: careful / reference | careless (greedy) P(viol. ≤ H) | feasible",
            "llrrrrrrrl",
            map(row, rows),
        ),
    ]
    spawns = ", ".join(
        f"`spawn: {r['env_params'].get('spawn', 'mpe2')}` in {r['config']}"
        for r in rows
        if r["env"] == "spread"
    )
    if spawns:
        lines += [
            "",
            "spread: goals are the landmarks covered (an agent closer than 0.1) at each step, "
            "summed over the episode; the reference is the careless team's, which heads for the "
            "same landmarks ignoring the others (spread reports no arrivals, so ippo has no "
            f"goals to compare with). Agents spawn with {spawns}.",
        ]
    return "\n".join(lines)


def exact_floors(args: Any) -> None:
    """Print the exact floors of the terminating tasks over the evaluation layouts."""
    overrides: dict[str, Any] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--param {item!r}: expected KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    for name in ["hazard_grid", "intersection"] if args.env == "both" else [args.env]:
        params = {**experiment(args.config).get("env_params", {}).get(name, {}), **overrides}
        env = evaluation_env(name, args.episodes, **params)
        horizon = env.max_steps if args.horizon is None else args.horizon
        mc = range(min(args.mc_layouts, env.num_envs))
        begin = time.perf_counter()
        floors, kept = layout_floors(
            env,
            horizon,
            keep=mc,
            require_completion=args.require_completion,
            completion=args.completion,
        )
        solves = list({f.solve: f.seconds for f in floors}.values())
        print(
            f"{name} {params} H={horizon}{' require_completion' if args.require_completion else ''}"
            f": {args.episodes} layouts, {len(solves)} joint solves of {np.mean(solves):.3f} s "
            f"each (mean; max {max(solves):.3f} s), {time.perf_counter() - begin:.1f} s in all"
        )
        joint = np.array([f.joint for f in floors])
        stats = {"mean": joint.mean(), "median": np.median(joint), "p90": np.quantile(joint, 0.9)}
        stats |= {"max": joint.max(), "frac>0.05": (joint > 0.05).mean()}
        stats["frac>0.1"] = (joint > 0.1).mean()
        print(
            f"  {'joint floor (minimum risk)':32s} "
            + "  ".join(f"{k} {v:.4f}" for k, v in stats.items())
        )
        if args.completion:
            done = np.array([f.completion for f in floors])
            finish = {"mean": done.mean(), "median": np.median(done), "min": done.min()}
            print(
                f"  {'P(finish) of minimising policy':32s} "
                + "  ".join(f"{k} {v:.4f}" for k, v in finish.items())
            )
        if mc and horizon != env.max_steps:
            print("  (no MC cross-check: the env truncates at max_steps, not at --horizon)")
            mc = range(0)
        for e in mc:
            k, n = monte_carlo_risk(
                env,
                kept[e].model,
                kept[e].policy,
                index=e,
                rollouts=args.mc_rollouts,
                seed=args.seed + e,
                require_completion=args.require_completion,
            )
            low, high = clopper_pearson_interval(k=k, n=n, confidence=0.99)
            value = floors[e].joint
            verdict = "agrees" if low <= value <= high else "DISAGREES"
            print(
                f"  MC layout {e}: V_H {value:.5f}, empirical {k}/{n} = {k / n:.5f}, "
                f"99% CI [{low:.5f}, {high:.5f}] {verdict}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """The witness table (`--witness`), or the exact floors of terminating tasks."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--witness", action="store_true", help="the witness floors' section")
    parser.add_argument("--results", type=Path, help="the default experiment's results (ippo)")
    parser.add_argument("--env", choices=["hazard_grid", "intersection", "both"], default="both")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation layouts")
    parser.add_argument("--horizon", type=int, default=None, help="default: env max_steps")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="env parameter"
    )
    parser.add_argument("--mc-layouts", type=int, default=0, help="layouts to cross-check by MC")
    parser.add_argument("--mc-rollouts", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the MC rollouts")
    parser.add_argument(
        "--require-completion", action="store_true", help="floor of P(violation or not finished)"
    )
    parser.add_argument("--completion", action="store_true", help="P(finish) of the minimiser")
    args = parser.parse_args(argv)
    if not args.witness:
        exact_floors(args)
        return 0
    rows = witness_rows(CONFIG, args.results) + witness_rows(PAPER)
    command = "python -m benchmarks.risk_floor --witness"
    markdown = witness_markdown(
        rows, command + (f" --results {args.results}" if args.results else "")
    )
    print(markdown)
    if args.write:
        write_section("risk_floor", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
