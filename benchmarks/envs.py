"""Raw step rates of every environment, single and batched; native ``spread`` against bare mpe2.

``python -m benchmarks.run_all envs`` (or ``make bench``) measures and rewrites the
"Environments" section of ``benchmarks/BENCHMARKS.md`` between its markers. Every rate is the
best of ``repeats`` timed windows of at least ``min_seconds`` each, on one core; the spread
comparison alternates the native env and bare mpe2 (a list of ``simple_spread_v3`` parallel
envs stepped in a loop) window by window so that load from other processes hits both alike.
It also checks, over many random episodes, that the native ``spread`` returns what mpe2 returns
for the same seeds and actions.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_variable] = "1"

import dataclasses  # noqa: E402 - must follow the thread pinning above
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from mpe2 import simple_spread_v3  # noqa: E402

from benchmarks.common import BENCHMARKS_MD, markers, write_section  # noqa: E402
from src.envs import make_env, make_vector_env  # noqa: E402
from src.envs.spread_core import NativeSpreadVectorEnv, SpreadConfig  # noqa: E402

START_MARKER, END_MARKER = markers("envs")
SECTION_HEADING = "## Environments"
HAZARD_GRID_TARGET = 1_000_000  # agent-steps/s of hazard_grid with 256 copies x 3 agents
SPREAD_SPEEDUP_TARGET = 50.0  # native spread (batch copies) vs the bare mpe2 loop, CPU time
RENDER_TARGET = 1_000  # frames/s of the native renderers
IDENTITY_EPISODES = 1_024  # random episodes of the native-vs-mpe2 identity check
IDENTITY_TOLERANCE = 1e-6  # largest allowed difference of observations and rewards
_ACTION_BLOCK = 64  # distinct pre-drawn action arrays cycled through while timing


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


def timed_rate(step: Callable[[int], None], *, min_seconds: float) -> tuple[float, float]:
    """Calls of ``step(i)`` per wall-clock second and per CPU second, over one window.

    The CPU rate counts only time this process ran, so it stays close to the idle-machine rate
    when other processes share the cores; the wall-clock rate is what a user sees.
    """
    calls, batch = 0, 8
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:  # at least one batch, so a zero budget still measures something
        for _ in range(batch):
            step(calls)
            calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            break
        batch = min(batch * 2, 4096)
    cpu = max(time.process_time() - cpu_start, 1e-9)
    return calls / elapsed, calls / cpu


def best_rates(
    steps: dict[str, Callable[[int], None]], *, min_seconds: float, repeats: int
) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU) rates of each stepper over ``repeats`` windows, taken in turns."""
    best = dict.fromkeys(steps, (0.0, 0.0))
    for _ in range(repeats):
        for key, step in steps.items():
            wall, cpu = timed_rate(step, min_seconds=min_seconds)
            best[key] = (max(best[key][0], wall), max(best[key][1], cpu))
    return best


def vector_stepper(name: str, num_envs: int, **params: object) -> tuple[Callable[[int], None], int]:
    """A stepper of our vector interface (auto-reset included) and its agent count."""
    env = make_vector_env(name, num_envs=num_envs, seed=0, **params)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.n_actions, size=(_ACTION_BLOCK, num_envs, env.n_agents))

    def step(i: int) -> None:
        env.step(actions[i % _ACTION_BLOCK])

    return step, env.n_agents


def parallel_stepper(env: object, n_agents: int) -> Callable[[int], None]:
    """A stepper of a PettingZoo ParallelEnv through its dict API, resetting finished episodes."""
    agents = list(env.possible_agents)  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, size=(_ACTION_BLOCK, n_agents)).tolist()
    env.reset(seed=0)  # type: ignore[attr-defined]

    def step(i: int) -> None:
        env.step(dict(zip(agents, actions[i % _ACTION_BLOCK], strict=True)))  # type: ignore[attr-defined]
        if not env.agents:  # type: ignore[attr-defined]
            env.reset()  # type: ignore[attr-defined]

    return step


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


def bare_mpe2_stepper(num_envs: int, config: SpreadConfig) -> Callable[[int], None]:
    """The loop a user writes with mpe2 alone: a list of parallel envs, dict actions, resets."""
    envs = bare_mpe2_envs(num_envs, config)
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    agents = list(envs[0].possible_agents)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, size=(_ACTION_BLOCK, num_envs, config.n_agents))

    def step(i: int) -> None:
        for env, row in zip(envs, actions[i % _ACTION_BLOCK].tolist(), strict=True):
            env.step(dict(zip(agents, row, strict=True)))
            if not env.agents:
                env.reset()

    return step


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
    totals: dict[str, Any] = {
        "episodes": 0,
        "discrete_episodes": 0,
        "continuous_episodes": 0,
        "agent_steps": 0,
        "collisions": 0,
        "max_obs_diff": 0.0,
        "max_reward_diff": 0.0,
        "flag_mismatches": 0,
        "bit_identical": True,
    }
    discrete = episodes - episodes // 4
    for continuous, wanted in ((False, discrete), (True, episodes - discrete)):
        if wanted <= 0:
            continue
        copies = min(num_envs, wanted)
        rounds = -(-wanted // copies)  # episodes per copy, rounded up
        config = SpreadConfig(continuous_actions=continuous)
        native = make_vector_env("spread", num_envs=copies, **dataclasses.asdict(config))
        assert isinstance(native, NativeSpreadVectorEnv)
        bare = bare_mpe2_envs(copies, config)
        agents = list(bare[0].possible_agents)
        block_seed = seed + (1_000_000 if continuous else 0)
        rng = np.random.default_rng(block_seed)
        obs = native.reset(block_seed)
        expected = np.array(
            [
                [o[a] for a in agents]
                for o in (env.reset(seed=block_seed + e)[0] for e, env in enumerate(bare))
            ]
        )
        _accumulate(totals, "max_obs_diff", obs, expected)
        finished = 0
        for _ in range(rounds * config.max_steps):
            if continuous:
                actions = rng.random((copies, config.n_agents, 5), dtype=np.float32)
            else:
                actions = rng.integers(0, 5, size=(copies, config.n_agents))
            result = native.step(actions)
            reward = native.last_reward
            for e, env in enumerate(bare):
                obs_e, rew_e, term_e, trunc_e, info_e = env.step(
                    {a: actions[e, i] for i, a in enumerate(agents)}
                )
                _accumulate(totals, "max_obs_diff", result.final_obs[e], [obs_e[a] for a in agents])
                _accumulate(totals, "max_reward_diff", reward[e], [rew_e[a] for a in agents])
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
                    _accumulate(
                        totals, "max_obs_diff", result.obs[e], [reset_obs[a] for a in agents]
                    )
            totals["agent_steps"] += copies * config.n_agents
        totals["episodes"] += finished
        totals["continuous_episodes" if continuous else "discrete_episodes"] += finished
        for env in bare:
            env.close()
    totals["ok"] = (
        totals["flag_mismatches"] == 0
        and totals["max_obs_diff"] <= IDENTITY_TOLERANCE
        and totals["max_reward_diff"] <= IDENTITY_TOLERANCE
    )
    return totals


def _accumulate(totals: dict[str, Any], key: str, ours: Any, theirs: Any) -> None:
    """Track the largest absolute difference and whether every value was bit-identical."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    totals[key] = max(totals[key], float(np.abs(a - b).max()))
    totals["bit_identical"] = totals["bit_identical"] and bool(np.array_equal(a, b))


def measure(
    *,
    min_seconds: float,
    repeats: int,
    batch: int = 256,
    identity_episodes: int = IDENTITY_EPISODES,
) -> dict:
    """Run every measurement; returns rows, render rates, spread ratios and the identity check."""
    rows: list[Row] = []
    renders: dict[str, float] = {}
    for name in ("hazard_grid", "intersection"):
        single, n_agents = vector_stepper(name, 1)
        batched, _ = vector_stepper(name, batch)
        view = parallel_stepper(make_env(name), n_agents)
        rates = best_rates(
            {"vector 1": single, "vector B": batched, "parallel": view},
            min_seconds=min_seconds,
            repeats=repeats,
        )
        rows.append(Row(name, "VectorEnv", 1, n_agents, *rates["vector 1"]))
        rows.append(Row(name, "VectorEnv", batch, n_agents, *rates["vector B"]))
        rows.append(Row(name, "ParallelEnv (dict API)", 1, n_agents, *rates["parallel"]))
        renders[name] = render_rate(name, min_seconds=min_seconds, repeats=repeats)

    config = SpreadConfig()
    ratios: dict[int, tuple[float, float]] = {}
    for copies in (1, batch):
        ours, n_agents = vector_stepper("spread", copies)
        rates = best_rates(
            {"ours": ours, "bare": bare_mpe2_stepper(copies, config)},
            min_seconds=min_seconds,
            repeats=repeats,
        )
        rows.append(Row("spread", "VectorEnv (native)", copies, n_agents, *rates["ours"]))
        rows.append(Row("spread", "bare mpe2 list loop", copies, n_agents, *rates["bare"]))
        ratios[copies] = _ratios(rates["ours"], rates["bare"])
    bare_parallel = bare_mpe2_envs(1, config)[0]
    rates = best_rates(
        {
            "ours": parallel_stepper(make_env("spread"), config.n_agents),
            "bare": parallel_stepper(bare_parallel, config.n_agents),
        },
        min_seconds=min_seconds,
        repeats=repeats,
    )
    rows.append(Row("spread", "ParallelEnv (native, dict API)", 1, config.n_agents, *rates["ours"]))
    rows.append(Row("spread", "bare mpe2 ParallelEnv", 1, config.n_agents, *rates["bare"]))
    ratios[0] = _ratios(rates["ours"], rates["bare"])
    renders["spread"] = render_rate("spread", min_seconds=min_seconds, repeats=repeats)
    identity = identity_check(episodes=identity_episodes)
    return {
        "rows": rows,
        "renders": renders,
        "spread_ratios": ratios,
        "batch": batch,
        "identity": identity,
    }


def _ratios(ours: tuple[float, float], bare: tuple[float, float]) -> tuple[float, float]:
    """(wall-clock, CPU-time) rate ratios of our interface to bare mpe2."""
    return ours[0] / bare[0], ours[1] / bare[1]


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def to_markdown(results: dict, *, load_before: tuple, load_after: tuple, seconds: float) -> str:
    """The section body (between the markers) for ``results`` of :func:`measure`."""
    rows: list[Row] = results["rows"]
    lines = [
        "| env | interface | copies E | agents A | steps/s | agent-steps/s | agent-steps/CPU-s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.env} | {row.interface} | {row.copies} | {row.agents} | "
            f"{row.steps_per_second:,.0f} | {row.agent_steps_per_second:,.0f} | "
            f"{row.agent_steps_per_cpu_second:,.0f} |"
        )
    batch = results["batch"]
    hazard = next(
        r
        for r in rows
        if r.env == "hazard_grid" and r.copies == batch and r.interface == "VectorEnv"
    )
    ratios = results["spread_ratios"]
    renders = results["renders"]
    targets = [
        f"- `hazard_grid` VectorEnv, {batch} copies x {hazard.agents} agents: "
        f"{hazard.agent_steps_per_second:,.0f} agent-steps/s wall-clock, "
        f"{hazard.agent_steps_per_cpu_second:,.0f} per CPU second (target >= "
        f"{HAZARD_GRID_TARGET:,} wall-clock): "
        f"{_verdict(hazard.agent_steps_per_second >= HAZARD_GRID_TARGET)}",
    ]
    for copies, (wall, cpu) in sorted(ratios.items()):
        label = "ParallelEnv (dict API)" if copies == 0 else f"VectorEnv with E={copies}"
        # The verdict uses CPU time: wall-clock windows of two loops taken in turn on a shared
        # machine differ by the load each window happened to meet.
        target = (
            f" (target >= {SPREAD_SPEEDUP_TARGET:.0f}x): {_verdict(cpu >= SPREAD_SPEEDUP_TARGET)}"
            if copies == batch
            else " (no target)"
        )
        targets.append(
            f"- native `spread` {label} / bare mpe2 at the same number of copies, "
            f"agent-steps: {cpu:,.1f}x in CPU time, {wall:,.1f}x wall-clock{target}"
        )
    for name, fps in renders.items():
        targets.append(
            f"- `{name}` render, rgb_array ({'700x700, ' if name == 'spread' else ''}NumPy): "
            f"{fps:,.0f} frames/s (target >= {RENDER_TARGET:,}): {_verdict(fps >= RENDER_TARGET)}"
        )
    identity = results["identity"]
    targets.append(
        f"- native `spread` = mpe2 `simple_spread_v3`, same seeds and uniformly random actions: "
        f"{identity['episodes']:,} episodes ({identity['discrete_episodes']:,} discrete, "
        f"{identity['continuous_episodes']:,} continuous actions; 128 copies, auto-resets "
        f"included), {identity['agent_steps']:,} agent-steps, {identity['collisions']:,} of them "
        f"colliding; largest difference {identity['max_obs_diff']:.1e} in observations and "
        f"{identity['max_reward_diff']:.1e} in rewards, {identity['flag_mismatches']} steps with "
        f"a different cost or end flag"
        f"{' (all bit-identical)' if identity['bit_identical'] else ''} (target: differences "
        f"<= {IDENTITY_TOLERANCE:g}, no mismatch): {_verdict(identity['ok'])}"
    )
    load = ", ".join(f"{value:.2f}" for value in load_before)
    load_end = ", ".join(f"{value:.2f}" for value in load_after)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}, "
        f"NumPy {np.__version__}"
    )
    return "\n".join(
        [
            "Measured by `python -m benchmarks.run_all envs` (`make bench`) on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}; one thread "
            f"(`OMP_NUM_THREADS=1`), {seconds:.0f} s in total. Load average (1, 5, 15 min) "
            f"before: {load}; after: {load_end}. The machine was shared, so rates on an idle "
            "machine are higher; ratios compare windows taken in turn under the same load.",
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
) -> dict:
    """Measure everything, print the section and write it into ``path``; returns the results."""
    if min_seconds < 0 or repeats < 1:
        raise ValueError(f"need min_seconds >= 0 and repeats >= 1, got {min_seconds}, {repeats}")
    load_before = os.getloadavg()
    start = time.perf_counter()
    results = measure(
        min_seconds=min_seconds,
        repeats=repeats,
        batch=batch,
        identity_episodes=identity_episodes,
    )
    body = to_markdown(
        results,
        load_before=load_before,
        load_after=os.getloadavg(),
        seconds=time.perf_counter() - start,
    )
    print(body)
    write_section("envs", body, heading=SECTION_HEADING, path=path)
    return results


if __name__ == "__main__":
    main()
