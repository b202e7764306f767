"""Raw step rates of every environment, single and batched; native `spread` against bare mpe2.

Each env's VectorEnv (1 and `batch` copies) and ParallelEnv step rates and its renderer's
frames per second; the native `spread` against its peer, bare mpe2 (a list of
`simple_spread_v3` parallel envs, and one ParallelEnv), window by window so that other load
hits both alike; and over many random episodes that native `spread` returns what mpe2 returns
for the same seeds and actions. Rates are the best of `repeats` windows, on one core.

Run: `python -m benchmarks.run_all envs` (or `make bench`); writes the envs section of
BENCHMARKS.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mpe2 import simple_spread_v3

from benchmarks.common import (
    ACTION_BLOCK,
    BENCHMARKS_MD,
    Clock,
    best_rates,
    cycling,
    dict_loop,
    markers,
    measured_by,
    met,
    table,
    write_section,
)
from src.envs import make_env, make_vector_env
from src.envs.spread_core import NativeSpreadVectorEnv, SpreadConfig

START_MARKER, END_MARKER = markers("envs")
SECTION_HEADING = "## Environments"
HAZARD_GRID_TARGET = 1_000_000  # agent-steps/s of hazard_grid with 256 copies x 3 agents
SPREAD_SPEEDUP_TARGET = 50.0  # native spread (batch copies) vs the bare mpe2 loop, CPU time
RENDER_TARGET = 1_000  # frames/s of the native renderers
IDENTITY_EPISODES = 1_024  # random episodes of the native-vs-mpe2 identity check
IDENTITY_TOLERANCE = 1e-6  # largest allowed difference of observations and rewards


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    env: str
    interface: str
    copies: int
    agents: int
    steps_per_second: float
    steps_per_cpu_second: float

    @property
    def agent_steps_per_second(self) -> float:
        """Wall-clock rate counted per agent and copy."""
        return self.steps_per_second * self.copies * self.agents

    @property
    def agent_steps_per_cpu_second(self) -> float:
        """Rate per second of this process's CPU time, counted per agent and copy."""
        return self.steps_per_cpu_second * self.copies * self.agents


def vector_stepper(name: str, num_envs: int) -> tuple[Callable[[int], None], int]:
    """A stepper of our vector interface (auto-reset included) and its agent count."""
    env = make_vector_env(name, num_envs=num_envs, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.n_actions, size=(ACTION_BLOCK, num_envs, env.n_agents))
    return cycling(env.step, actions), env.n_agents


def parallel_stepper(envs: list[Any], n_agents: int) -> Callable[[int], None]:
    """A stepper of PettingZoo ParallelEnvs through their dict API, random actions."""
    shape = (ACTION_BLOCK, len(envs), n_agents)
    return cycling(dict_loop(envs), np.random.default_rng(0).integers(0, 5, size=shape).tolist())


def bare_mpe2_envs(num_envs: int, config: SpreadConfig) -> list[Any]:
    """``num_envs`` mpe2 ``simple_spread_v3`` parallel envs with ``config``'s parameters."""
    return [
        simple_spread_v3.parallel_env(
            N=config.n_agents,
            local_ratio=config.local_ratio,
            max_cycles=config.max_steps,
            continuous_actions=config.continuous_actions,
            benchmark_data=True,
        )
        for _ in range(num_envs)
    ]


def render_rate(name: str, *, min_seconds: float, repeats: int) -> float:
    """Frames per second of ``render()`` of one copy (the ParallelEnv in rgb_array mode)."""
    env = make_env(name, render_mode="rgb_array")
    env.reset(seed=0)
    rates = best_rates({name: lambda _: env.render()}, min_seconds=min_seconds, repeats=repeats)
    return rates[name][0]


def identity_check(*, episodes: int, num_envs: int = 128, seed: int = 0) -> dict[str, Any]:
    """Compare native ``spread`` with bare mpe2 over ``episodes`` uniformly random episodes.

    Three quarters of the episodes use discrete actions, the rest continuous ones. Copy ``e`` of
    a native vector env and an mpe2 parallel env are seeded alike and given the same actions;
    every step compares observations, rewards (float64), costs (mpe2's collision counts),
    truncations, and after each episode the auto-reset observations (the continued streams).
    """
    totals: dict[str, Any] = dict.fromkeys(
        ("episodes", "discrete_episodes", "continuous_episodes", "agent_steps", "collisions"), 0
    )
    totals |= {"max_obs_diff": 0.0, "max_reward_diff": 0.0, "flag_mismatches": 0}
    totals["bit_identical"] = True

    def compare(key: str, ours: Any, theirs: Any) -> None:
        a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
        totals[key] = max(totals[key], float(np.abs(a - b).max()))
        totals["bit_identical"] = totals["bit_identical"] and bool(np.array_equal(a, b))

    discrete = episodes - episodes // 4
    for continuous, wanted in ((False, discrete), (True, episodes - discrete)):
        if wanted <= 0:
            continue
        copies = min(num_envs, wanted)
        config = SpreadConfig(continuous_actions=continuous)
        native = make_vector_env("spread", num_envs=copies, **dataclasses.asdict(config))
        assert isinstance(native, NativeSpreadVectorEnv)
        bare = bare_mpe2_envs(copies, config)
        agents = list(bare[0].possible_agents)
        block_seed = seed + (1_000_000 if continuous else 0)
        rng = np.random.default_rng(block_seed)
        obs = native.reset(block_seed)
        resets = (env.reset(seed=block_seed + e)[0] for e, env in enumerate(bare))
        compare("max_obs_diff", obs, [[o[a] for a in agents] for o in resets])
        finished = 0
        for _ in range(-(-wanted // copies) * config.max_steps):  # episodes per copy, rounded up
            if continuous:
                actions = rng.random((copies, config.n_agents, 5), dtype=np.float32)
            else:
                actions = rng.integers(0, 5, size=(copies, config.n_agents))
            result = native.step(actions)
            for e, env in enumerate(bare):
                obs_e, rew_e, term_e, trunc_e, info_e = env.step(
                    {a: actions[e, i] for i, a in enumerate(agents)}
                )
                compare("max_obs_diff", result.final_obs[e], [obs_e[a] for a in agents])
                compare("max_reward_diff", native.last_reward[e], [rew_e[a] for a in agents])
                cost = [float(info_e[a]["benchmark_data"][1] > 0) for a in agents]
                flags = (
                    cost == result.cost[e].tolist()
                    and [trunc_e[a] for a in agents] == result.truncated[e].tolist()
                    and [term_e[a] for a in agents] == result.terminated[e].tolist()
                )
                totals["flag_mismatches"] += int(not flags)
                totals["collisions"] += int(sum(cost))
                if not env.agents:
                    finished += 1
                    reset_obs, _ = env.reset()
                    compare("max_obs_diff", result.obs[e], [reset_obs[a] for a in agents])
            totals["agent_steps"] += copies * config.n_agents
        totals["episodes"] += finished
        totals["continuous_episodes" if continuous else "discrete_episodes"] += finished
        for env in bare:
            env.close()
    totals["ok"] = (
        totals["flag_mismatches"] == 0
        and max(totals["max_obs_diff"], totals["max_reward_diff"]) <= IDENTITY_TOLERANCE
    )
    return totals


def measure(
    *,
    min_seconds: float,
    repeats: int,
    batch: int = 256,
    identity_episodes: int = IDENTITY_EPISODES,
) -> dict[str, Any]:
    """Every measurement: the rows, render rates, spread ratios and the identity check."""
    rows: list[Row] = []
    renders: dict[str, float] = {}
    ratios: dict[int, tuple[float, float]] = {}  # copies (0: ParallelEnv) -> (wall, CPU) ratio

    def timed(
        env: str, agents: int, steppers: dict[tuple[str, int], Callable[[int], None]]
    ) -> None:
        rates = best_rates(steppers, min_seconds=min_seconds, repeats=repeats)
        rows.extend(
            Row(env, label, copies, agents, *rates[label, copies]) for label, copies in rates
        )

    for name in ("hazard_grid", "intersection"):
        single, n_agents = vector_stepper(name, 1)
        batched, _ = vector_stepper(name, batch)
        parallel = parallel_stepper([make_env(name)], n_agents)
        steppers = {("VectorEnv", 1): single, ("VectorEnv", batch): batched}
        timed(name, n_agents, {**steppers, ("ParallelEnv (dict API)", 1): parallel})
        renders[name] = render_rate(name, min_seconds=min_seconds, repeats=repeats)
    config = SpreadConfig()
    agents = config.n_agents
    for copies in (1, batch):
        ours, _ = vector_stepper("spread", copies)
        bare = parallel_stepper(bare_mpe2_envs(copies, config), agents)
        labels = ("VectorEnv (native)", copies), ("bare mpe2 list loop", copies)
        timed("spread", agents, dict(zip(labels, (ours, bare), strict=True)))
        ratios[copies] = _ratios(rows[-2], rows[-1])
    ours = parallel_stepper([make_env("spread")], agents)
    bare = parallel_stepper(bare_mpe2_envs(1, config), agents)
    labels = ("ParallelEnv (native, dict API)", 1), ("bare mpe2 ParallelEnv", 1)
    timed("spread", agents, dict(zip(labels, (ours, bare), strict=True)))
    ratios[0] = _ratios(rows[-2], rows[-1])
    renders["spread"] = render_rate("spread", min_seconds=min_seconds, repeats=repeats)
    return {
        "rows": rows,
        "renders": renders,
        "spread_ratios": ratios,
        "batch": batch,
        "identity": identity_check(episodes=identity_episodes),
    }


def _ratios(ours: Row, bare: Row) -> tuple[float, float]:
    """(wall-clock, CPU-time) rate ratios of our interface to bare mpe2."""
    return (
        ours.steps_per_second / bare.steps_per_second,
        ours.steps_per_cpu_second / bare.steps_per_cpu_second,
    )


def to_markdown(results: dict[str, Any], machine: dict[str, Any]) -> str:
    """The section body (between the markers) for ``results`` of :func:`measure`."""
    rows: list[Row] = results["rows"]
    batch, identity = results["batch"], results["identity"]
    lines = table(
        "env | interface | copies E | agents A | steps/s | agent-steps/s | agent-steps/CPU-s",
        "llrrrrr",
        [
            f"{r.env} | {r.interface} | {r.copies} | {r.agents} | {r.steps_per_second:,.0f} | "
            f"{r.agent_steps_per_second:,.0f} | {r.agent_steps_per_cpu_second:,.0f}"
            for r in rows
        ],
    )
    grid = next(
        r for r in rows if (r.env, r.copies, r.interface) == ("hazard_grid", batch, "VectorEnv")
    )
    targets = [
        f"- `hazard_grid` VectorEnv, {batch} copies x {grid.agents} agents: "
        f"{grid.agent_steps_per_second:,.0f} agent-steps/s wall-clock, "
        f"{grid.agent_steps_per_cpu_second:,.0f} per CPU second (target >= "
        f"{HAZARD_GRID_TARGET:,} wall-clock): "
        f"{met(grid.agent_steps_per_second >= HAZARD_GRID_TARGET, '**missed**')}",
    ]
    for copies, (wall, cpu) in sorted(results["spread_ratios"].items()):
        label = "ParallelEnv (dict API)" if copies == 0 else f"VectorEnv with E={copies}"
        # The verdict uses CPU time: wall-clock windows of two loops taken in turn on a shared
        # machine differ by the load each window happened to meet.
        verdict = met(cpu >= SPREAD_SPEEDUP_TARGET, "**missed**")
        target = f" (target >= {SPREAD_SPEEDUP_TARGET:.0f}x): {verdict}"
        targets.append(
            f"- native `spread` {label} / bare mpe2 at the same number of copies, "
            f"agent-steps: {cpu:,.1f}x in CPU time, {wall:,.1f}x wall-clock"
            + (target if copies == batch else " (no target)")
        )
    for name, fps in results["renders"].items():
        targets.append(
            f"- `{name}` render, rgb_array ({'700x700, ' if name == 'spread' else ''}NumPy): "
            f"{fps:,.0f} frames/s (target >= {RENDER_TARGET:,}): "
            f"{met(fps >= RENDER_TARGET, '**missed**')}"
        )
    targets.append(
        f"- native `spread` = mpe2 `simple_spread_v3`, same seeds and uniformly random actions: "
        f"{identity['episodes']:,} episodes ({identity['discrete_episodes']:,} discrete, "
        f"{identity['continuous_episodes']:,} continuous actions; 128 copies, auto-resets "
        f"included), {identity['agent_steps']:,} agent-steps, {identity['collisions']:,} of them "
        f"colliding; largest difference {identity['max_obs_diff']:.1e} in observations and "
        f"{identity['max_reward_diff']:.1e} in rewards, {identity['flag_mismatches']} steps with "
        f"a different cost or end flag"
        f"{' (all bit-identical)' if identity['bit_identical'] else ''} (target: differences "
        f"<= {IDENTITY_TOLERANCE:g}, no mismatch): {met(identity['ok'], '**missed**')}"
    )
    command = "`python -m benchmarks.run_all envs` (`make bench`)"
    threads = "one thread (`OMP_NUM_THREADS=1`)"
    return "\n".join(
        [
            measured_by(command, machine, f"NumPy {machine['numpy']}", threads)
            + " The machine was shared, so rates on an idle machine are higher; ratios compare "
            "windows taken in turn under the same load.",
            "",
            *lines,
            "",
            "Targets:",
            "",
            *targets,
            "",
            "Steps/s counts vector steps (every copy advances once), over wall-clock time; "
            "agent-steps/CPU-s divides by the CPU time the benchmark process itself got, which "
            "approximates an idle core when the machine is shared. VectorEnv rates include "
            "action checks, auto-reset and fresh output arrays; bare mpe2 runs the same "
            "`simple_spread_v3` settings (`benchmark_data=True`) with dict actions and resets, "
            "one parallel env per copy.",
        ]
    )


def main(
    *,
    min_seconds: float = 1.0,
    repeats: int = 3,
    batch: int = 256,
    identity_episodes: int = IDENTITY_EPISODES,
    path: Path = BENCHMARKS_MD,
) -> dict[str, Any]:
    """Measure everything, print the section and write it into ``path``; returns the results."""
    clock = Clock()
    results = measure(
        min_seconds=min_seconds, repeats=repeats, batch=batch, identity_episodes=identity_episodes
    )
    body = to_markdown(results, clock.machine())
    print(body)
    write_section("envs", body, heading=SECTION_HEADING, path=path)
    return results


if __name__ == "__main__":
    main()
