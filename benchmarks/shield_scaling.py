"""How the shield's work per decision grows with the team: `coordinate` against `exhaustive`,
and the decentralised shield (`shield_dec`).

For n_agents = 2, 3, 4 and 5 of the grid tasks (the sizes each task allows: `intersection` has
four arms, so at most 4 agents), a shield with fresh (untrained) models is built for the
env's dimensions (`build_shield`, the default shield config) and its allowance set to 0, so
that no proposal and no one-agent change passes and every decision runs the search: the worst
case of the filter. Per decision it counts the joint actions judged (the options
`BudgetShield.raw_risk_options` is called with) and times the filter (CPU seconds of this
process, one torch thread), over `--steps` steps of `--copies` env copies acting with uniformly
random proposals. The work of a search does not depend on what the models learned:
`coordinate` judges at most 1 + A (n - 1) + sweeps A A (n - 1) joint actions (the proposal,
its one-agent changes and the descent's steps, each of A (n - 1) changes), `exhaustive`
1 + A (n - 1) + n ** A, the decentralised shield at most A n K (each agent's n actions against
K = min(n ** (A - 1), `opponent_samples`) completions of the others' actions; a joint action
several agents or repeated completions ask for is judged once, so fewer).

Run: `python -m benchmarks.shield_scaling [--env intersection hazard_grid] [--write]`; the
table goes to the section "shield_scaling" of BENCHMARKS.md with `--write`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.common import machine_info, write_section
from src.algos.shield.assemble import build_shield
from src.config.run import RunConfig, make_run_config
from src.envs.registry import make_vector_env

SEARCHES = ("coordinate", "exhaustive", "decentralised")
"""What is measured: the central shield's two searches and the decentralised shield."""


def measure(env_name: str, n_agents: int, search: str, *, copies: int, steps: int) -> dict:
    """Joint actions judged and CPU seconds per decision of the search `search` (a key of
    `SEARCHES`; `decentralised` is the `shield_dec` algorithm with its defaults)."""
    torch.set_num_threads(1)
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {search!r}")
    central = search != "decentralised"
    config = RunConfig.from_dict(
        make_run_config(
            env_name=env_name,
            algo="shield" if central else "shield_dec",
            n_agents=n_agents,
            algo_params={"search": search} if central else {},
        )
    )
    env = make_vector_env(env_name, num_envs=copies, seed=0, **config.env.constructor_params())
    parts = build_shield(
        config.shield,
        n_agents=env.n_agents,
        obs_dim=env.obs_dim,
        n_actions=env.n_actions,
        seed=0,
    )
    shield = parts.shield
    shield.allowance = 0.0
    judged = 0
    original = shield.raw_risk_options

    def counted(
        joint: torch.Tensor, options: torch.Tensor, remaining: torch.Tensor, *args: Any, **kw: Any
    ) -> Any:
        nonlocal judged
        judged += int(options.shape[0] * options.shape[1])
        return original(joint, options, remaining, *args, **kw)

    shield.raw_risk_options = counted  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    obs = env.reset(seed=list(range(copies)))
    shield.reset(copies, 0)
    logits = torch.zeros(copies, env.n_agents, env.n_actions)
    seconds = 0.0
    for step in range(steps):
        proposed = rng.integers(0, env.n_actions, size=(copies, env.n_agents))
        started = time.process_time()
        executed, _ = shield.filter(obs, proposed, logits, np.full(copies, step + 1))
        seconds += time.process_time() - started
        obs = env.step(executed).obs
    env.close()
    decisions = copies * steps
    return {
        "env": env_name,
        "n_agents": env.n_agents,
        "n_actions": env.n_actions,
        "search": search,
        "judged_per_decision": judged / decisions,
        "ms_per_decision": 1000 * seconds / decisions,
    }


def max_agents(env_name: str) -> int:
    """The largest team `env_name` builds with (its constructor's `n_agents` check), at most 16."""
    largest = 1
    for n_agents in range(2, 17):
        config = RunConfig.from_dict(
            make_run_config(env_name=env_name, algo="shield", n_agents=n_agents)
        )
        try:
            make_vector_env(env_name, num_envs=1, seed=0, **config.env.constructor_params()).close()
        except ValueError:
            break
        largest = n_agents
    return largest


def markdown(records: Sequence[dict], command: str, machine: dict) -> str:
    """The section of BENCHMARKS.md: one row per team size, both searches side by side."""
    lines = [
        "## Shield search against team size",
        "",
        f"`{command}` ({machine['date']}, {machine['processor']}, {machine['cpus']} CPUs, torch "
        f"{machine['torch']} on 1 thread). Allowance 0: every decision runs the search (the "
        "filter's worst case); fresh models (the work does not depend on training).",
        "",
        "Judged: joint actions per decision (a decision is one env copy's step); the "
        "decentralised shield's are its agents' actions against the completions of the others', "
        "each distinct joint action once.",
        "",
        "| env | agents | joint actions | judged: coordinate | exhaustive | decentralised "
        "| ms / decision: coordinate | exhaustive | decentralised | exhaustive / coordinate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_size: dict[tuple[str, int], dict[str, dict]] = {}
    for r in records:
        by_size.setdefault((r["env"], r["n_agents"]), {})[r["search"]] = r
    for (env, agents), found in sorted(by_size.items()):
        c, x, d = (found[search] for search in SEARCHES)
        lines.append(
            f"| {env} | {agents} | {c['n_actions'] ** agents} | {c['judged_per_decision']:.0f} | "
            f"{x['judged_per_decision']:.0f} | {d['judged_per_decision']:.0f} | "
            f"{c['ms_per_decision']:.2f} | {x['ms_per_decision']:.2f} | "
            f"{d['ms_per_decision']:.2f} | {x['ms_per_decision'] / c['ms_per_decision']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: measure both searches at every team size, print Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env",
        nargs="+",
        default=["intersection", "hazard_grid"],
        help="grid tasks of the registry; each at the team sizes it allows",
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 3, 4, 5])
    parser.add_argument("--copies", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="write its BENCHMARKS.md section")
    args = parser.parse_args(argv)
    load = list(os.getloadavg())
    records = [
        measure(env, agents, search, copies=args.copies, steps=args.steps)
        for env in args.env
        for agents in args.agents
        if agents <= max_agents(env)
        for search in SEARCHES
    ]
    command = (
        f"python -m benchmarks.shield_scaling --env {' '.join(args.env)} --agents "
        f"{' '.join(map(str, args.agents))} --copies {args.copies} --steps {args.steps}"
    )
    text = markdown(records, command, machine_info(load))
    print(text)
    if args.write:
        write_section("shield_scaling", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
