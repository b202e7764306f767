"""``mamujoco`` through our vector interface against the bare ``mamujoco_v1`` loop.

``python -m benchmarks.run_all mamujoco`` (or ``python -m benchmarks.mamujoco``) measures and
rewrites the "Multi-Agent MuJoCo" section of ``benchmarks/BENCHMARKS.md`` between its markers.
For each scenario, at E copies, it steps

- ours: ``make_vector_env("mamujoco", num_envs=E, ...)`` with ``[E, A, joints]`` float32 Box
  actions (action checks and clipping, costs, auto-reset, fresh ``[E, A, ...]`` arrays);
- bare: the loop a user writes with Gymnasium-Robotics alone, a list of E
  ``mamujoco_v1.parallel_env(scenario, agent_conf)`` envs stepped with dict actions and reset
  when their episode ends;

with the same pre-drawn uniformly random actions, episodes of ``max_steps`` steps on both.
Rates are env-steps per second (one copy advancing once), the best of ``repeats`` windows of
at least ``min_seconds`` each, the two loops taken in turn so that load from other processes
hits both alike; the ratio is ours over bare. It also times one frame of MuJoCo's offscreen
renderer and a snapshot round trip (``get_state`` and ``set_state`` of E copies).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_variable] = "1"

import platform  # noqa: E402 - must follow the thread pinning above
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import BENCHMARKS_MD, write_section  # noqa: E402
from benchmarks.envs import best_rates  # noqa: E402
from src.envs import make_env, make_vector_env  # noqa: E402
from src.envs.mamujoco import MaMuJoCoVectorEnv, compiler_warnings, load_mamujoco  # noqa: E402

SECTION = "mamujoco"
SECTION_HEADING = "## Multi-Agent MuJoCo"
SCENARIOS: tuple[tuple[str, str], ...] = (("HalfCheetah", "2x3"), ("Ant", "2x4"))
COPIES: tuple[int, ...] = (1, 16)
MAX_STEPS = 1000  # Gymnasium's MuJoCo episode length, on both sides
_ACTION_BLOCK = 64  # distinct pre-drawn action arrays cycled through while timing


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


def _actions(env: MaMuJoCoVectorEnv) -> np.ndarray:
    """``[_ACTION_BLOCK, E, A, joints]`` uniformly random float32 actions in [-1, 1]."""
    rng = np.random.default_rng(0)
    shape = (_ACTION_BLOCK, env.num_envs, env.n_agents, *env.action_shape)
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def steppers(
    scenario: str, agent_conf: str, copies: int
) -> tuple[Callable[[int], None], Callable[[int], None], int]:
    """Our vector stepper and the bare loop's for ``copies`` copies, and the agent count."""
    params = {"scenario": scenario, "agent_conf": agent_conf, "max_steps": MAX_STEPS}
    ours = make_vector_env("mamujoco", num_envs=copies, seed=0, **params)
    assert isinstance(ours, MaMuJoCoVectorEnv)
    ours.reset()
    actions = _actions(ours)

    def step_ours(i: int) -> None:
        ours.step(actions[i % _ACTION_BLOCK])

    mujoco, parallel_env = load_mamujoco()
    with compiler_warnings(mujoco):  # not MuJoCo's log file in the working directory
        bare = [
            parallel_env(scenario, agent_conf, max_episode_steps=MAX_STEPS) for _ in range(copies)
        ]
    for seed, env in enumerate(bare):
        env.reset(seed=seed)
    agents = list(bare[0].possible_agents)

    def step_bare(i: int) -> None:
        for env, row in zip(bare, actions[i % _ACTION_BLOCK], strict=True):
            env.step(dict(zip(agents, row, strict=True)))
            if not env.agents:
                env.reset()

    return step_ours, step_bare, ours.n_agents


def render_seconds(repeats: int) -> float:
    """Seconds per frame of one copy's ``render()`` (480 x 480, MuJoCo's offscreen renderer),
    best of ``repeats`` frames after the first (which starts the renderer)."""
    env = make_env("mamujoco", render_mode="rgb_array")
    env.reset(seed=0)
    env.render()
    best = float("inf")
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        env.render()
        best = min(best, time.perf_counter() - start)
    env.close()
    return best


def snapshot_seconds(copies: int, repeats: int) -> float:
    """Seconds of one ``get_state`` plus ``set_state`` of ``copies`` copies, best of
    ``repeats`` rounds of 20."""
    env = make_vector_env("mamujoco", num_envs=copies, seed=0)
    env.reset()
    actions = _actions(env)  # type: ignore[arg-type]
    for i in range(10):
        env.step(actions[i])
    best = float("inf")
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        for _ in range(20):
            env.set_state(env.get_state())
        best = min(best, (time.perf_counter() - start) / 20)
    return best


def _env_steps(rates: tuple[float, float], copies: int) -> tuple[float, float]:
    """(wall, CPU) env-steps per second from stepper calls per second at ``copies`` copies."""
    return rates[0] * copies, rates[1] * copies


def measure(*, min_seconds: float, repeats: int, copies: Sequence[int] = COPIES) -> dict:
    """Every measurement: the rows, the frame time and the snapshot time."""
    rows = []
    for scenario, agent_conf in SCENARIOS:
        for count in copies:
            ours, bare, agents = steppers(scenario, agent_conf, count)
            # A stepper call advances every copy once: rates times copies are env-steps.
            rates = best_rates(
                {"ours": ours, "bare": bare}, min_seconds=min_seconds, repeats=repeats
            )
            ours_rate, bare_rate = (_env_steps(rates[key], count) for key in ("ours", "bare"))
            rows.append(Row(scenario, agent_conf, count, agents, ours_rate, bare_rate))
    return {
        "rows": rows,
        "render_seconds": render_seconds(repeats),
        "snapshot_copies": max(copies),
        "snapshot_seconds": snapshot_seconds(max(copies), repeats),
    }


def to_markdown(results: dict, *, load_before: Sequence[float], seconds: float) -> str:
    """The section body (between the markers) for ``results`` of :func:`measure`."""
    mujoco, _ = load_mamujoco()
    lines = [
        "| scenario | copies E | agents A | ours env-steps/s | bare env-steps/s | ours / bare "
        "(wall) | ours / bare (CPU) | added CPU µs per env-step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        wall, cpu = row.ratio
        lines.append(
            f"| {row.scenario} {row.agent_conf} | {row.copies} | {row.agents} | "
            f"{row.ours[0]:,.0f} | {row.bare[0]:,.0f} | {wall:.2f} | {cpu:.2f} | "
            f"{row.added_microseconds:,.0f} |"
        )
    load = ", ".join(f"{value:.2f}" for value in load_before)
    load_end = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    machine = (
        f"{platform.machine()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}, "
        f"MuJoCo {mujoco.__version__}, NumPy {np.__version__}"
    )
    snapshot = results["snapshot_seconds"] * 1e3
    return "\n".join(
        [
            "Measured by `python -m benchmarks.run_all mamujoco` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}; one thread "
            f"(`OMP_NUM_THREADS=1`), {seconds:.0f} s in total. Load average (1, 5, 15 min) "
            f"before: {load}; after: {load_end}. The machine was shared, so rates on an idle "
            "machine are higher; ratios compare windows taken in turn under the same load.",
            "",
            *lines,
            "",
            f"- One frame (480 x 480, MuJoCo's offscreen renderer through EGL): "
            f"{results['render_seconds'] * 1e3:,.0f} ms.",
            f"- A snapshot round trip of {results['snapshot_copies']} copies (`get_state` then "
            f"`set_state`, MuJoCo integration state, body positions and generator of each): "
            f"{snapshot:,.2f} ms.",
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
    if min_seconds < 0 or repeats < 1:
        raise ValueError(f"need min_seconds >= 0 and repeats >= 1, got {min_seconds}, {repeats}")
    load_before = os.getloadavg()
    start = time.perf_counter()
    results = measure(min_seconds=min_seconds, repeats=repeats, copies=copies)
    body = to_markdown(results, load_before=load_before, seconds=time.perf_counter() - start)
    print(body)
    write_section(SECTION, body, heading=SECTION_HEADING, path=path)
    return results


if __name__ == "__main__":
    main()
