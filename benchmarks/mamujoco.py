"""`mamujoco` through our vector interface against the bare `mamujoco_v1` loop.

Env-steps per second of `make_vector_env("mamujoco", num_envs=E)` with Box actions against its
peer, a list of E Gymnasium-Robotics `mamujoco_v1.parallel_env`s stepped with dict actions, per
scenario and E, the same random actions and `MAX_STEPS`-step episodes on both, the loops taken
in turn; one frame of MuJoCo's offscreen renderer and a snapshot round trip of E copies.

Run: `python -m benchmarks.run_all mamujoco`; writes the mamujoco section of BENCHMARKS.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    ACTION_BLOCK,
    BENCHMARKS_MD,
    Clock,
    best_rates,
    best_times,
    cycling,
    dict_loop,
    measured_by,
    table,
    write_section,
)
from src.envs import make_env, make_vector_env
from src.envs.mamujoco import MaMuJoCoVectorEnv, compiler_warnings, load_mamujoco

SECTION_HEADING = "## Multi-Agent MuJoCo"
SCENARIOS: tuple[tuple[str, str], ...] = (("HalfCheetah", "2x3"), ("Ant", "2x4"))
COPIES: tuple[int, ...] = (1, 16)
MAX_STEPS = 1000  # Gymnasium's MuJoCo episode length, on both sides


@dataclass(frozen=True)
class Row:
    """One line of the results table: both loops at one scenario and copy count."""

    scenario: str
    agent_conf: str
    copies: int
    agents: int
    ours: tuple[float, float]  # (wall-clock, CPU) env-steps per second
    bare: tuple[float, float]

    @property
    def ratio(self) -> tuple[float, float]:
        """(wall-clock, CPU-time) rate of ours over bare."""
        return self.ours[0] / self.bare[0], self.ours[1] / self.bare[1]

    @property
    def added_microseconds(self) -> float:
        """CPU microseconds our layers add to one env-step."""
        return 1e6 * (1.0 / self.ours[1] - 1.0 / self.bare[1])


def _vector_env(copies: int, **params: Any) -> tuple[MaMuJoCoVectorEnv, np.ndarray]:
    """Our vector env of `copies` copies, reset, and `[ACTION_BLOCK, E, A, joints]` uniformly
    random float32 actions in [-1, 1]."""
    env = make_vector_env("mamujoco", num_envs=copies, seed=0, **params)
    assert isinstance(env, MaMuJoCoVectorEnv)
    env.reset()
    shape = (ACTION_BLOCK, copies, env.n_agents, *env.action_shape)
    return env, np.random.default_rng(0).uniform(-1.0, 1.0, size=shape).astype(np.float32)


def measure_row(scenario: str, agent_conf: str, copies: int, **timing: Any) -> Row:
    """Both loops at `copies` copies, timed in turn (`timing`: of `best_rates`)."""
    ours, actions = _vector_env(
        copies, scenario=scenario, agent_conf=agent_conf, max_steps=MAX_STEPS
    )
    mujoco, parallel_env = load_mamujoco()
    with compiler_warnings(mujoco):  # not MuJoCo's log file in the working directory
        bare = [
            parallel_env(scenario, agent_conf, max_episode_steps=MAX_STEPS) for _ in range(copies)
        ]
    steppers = {"ours": cycling(ours.step, actions), "bare": cycling(dict_loop(bare), actions)}
    rates = best_rates(steppers, **timing)
    # A stepper call advances every copy once: rates times copies are env-steps.
    ours_rate, bare_rate = ((wall * copies, cpu * copies) for wall, cpu in rates.values())
    return Row(scenario, agent_conf, copies, ours.n_agents, ours_rate, bare_rate)


def measure(*, min_seconds: float, repeats: int, copies: Sequence[int] = COPIES) -> dict[str, Any]:
    """Every measurement: the rows, the frame time and the snapshot time."""
    rows = [
        measure_row(scenario, agent_conf, count, min_seconds=min_seconds, repeats=repeats)
        for scenario, agent_conf in SCENARIOS
        for count in copies
    ]
    frame = make_env("mamujoco", render_mode="rgb_array")
    frame.reset(seed=0)
    frame.render()  # the first frame starts the renderer
    render = best_times({"frame": frame.render}, repeats=repeats, clock=time.perf_counter)
    frame.close()
    env, actions = _vector_env(max(copies))
    for i in range(10):
        env.step(actions[i])

    def round_trips() -> None:
        for _ in range(20):
            env.set_state(env.get_state())

    snapshot = best_times({"20": round_trips}, repeats=repeats, clock=time.perf_counter)
    return {
        "rows": rows,
        "render_seconds": render["frame"],
        "snapshot_copies": max(copies),
        "snapshot_seconds": snapshot["20"] / 20,
    }


def to_markdown(results: dict[str, Any], machine: dict[str, Any]) -> str:
    """The section body (between the markers) for ``results`` of :func:`measure`."""
    mujoco, _ = load_mamujoco()
    lines = table(
        "scenario | copies E | agents A | ours env-steps/s | bare env-steps/s | ours / bare "
        "(wall) | ours / bare (CPU) | added CPU µs per env-step",
        "lrrrrrrr",
        [
            f"{r.scenario} {r.agent_conf} | {r.copies} | {r.agents} | {r.ours[0]:,.0f} | "
            f"{r.bare[0]:,.0f} | {r.ratio[0]:.2f} | {r.ratio[1]:.2f} | {r.added_microseconds:,.0f}"
            for r in results["rows"]
        ],
    )
    libraries = f"MuJoCo {mujoco.__version__}, NumPy {machine['numpy']}"
    command, threads = "`python -m benchmarks.run_all mamujoco`", "one thread (`OMP_NUM_THREADS=1`)"
    return "\n".join(
        [
            measured_by(command, machine, libraries, threads)
            + " The machine was shared, so rates on an idle machine are higher; ratios compare "
            "windows taken in turn under the same load.",
            "",
            *lines,
            "",
            f"- One frame (480 x 480, MuJoCo's offscreen renderer through EGL): "
            f"{results['render_seconds'] * 1e3:,.0f} ms.",
            f"- A snapshot round trip of {results['snapshot_copies']} copies (`get_state` then "
            f"`set_state`, MuJoCo integration state, body positions and generator of each): "
            f"{results['snapshot_seconds'] * 1e3:,.2f} ms.",
            "",
            "Env-steps/s counts copies advanced once, over wall-clock time. Ours is "
            "`make_vector_env('mamujoco', num_envs=E)` with `[E, A, joints]` float32 Box "
            "actions: action checks and clipping, the velocity cost, the hidden cap, "
            "auto-reset and fresh `[E, A, ...]` arrays. Bare is a list of E Gymnasium-Robotics "
            "`mamujoco_v1.parallel_env(scenario, agent_conf)` envs stepped with dict actions "
            f"and reset when done; both run {MAX_STEPS}-step episodes with the same "
            "uniformly random actions. CPU ratios divide rates per CPU second of the benchmark "
            "process, which approximates an idle core when the machine is shared; the added "
            "microseconds are the difference of the two loops' CPU time per env-step: the cost "
            "wrapper's checks of the env's contract and the vector layer over the list of "
            "copies (`src.envs.task`).",
        ]
    )


def main(
    *,
    min_seconds: float = 1.0,
    repeats: int = 3,
    copies: Sequence[int] = COPIES,
    path: Path = BENCHMARKS_MD,
) -> dict[str, Any]:
    """Measure everything, print the section and write it into ``path``; returns the results."""
    clock = Clock()
    results = measure(min_seconds=min_seconds, repeats=repeats, copies=copies)
    body = to_markdown(results, clock.machine())
    print(body)
    write_section("mamujoco", body, heading=SECTION_HEADING, path=path)
    return results


if __name__ == "__main__":
    main()
