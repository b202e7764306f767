"""Safety costs for envs that put none into their infos: named functions of the env's state.

A task's per-step cost is `infos[agent]["cost"]` when its env provides it. Otherwise the config
names a cost function (`custom_envs: {tag: {factory: ..., cost: mpe2_collisions}}`): one of
`COST_FUNCTIONS` below, or an import path `module:function` of the user's own. A cost function
is called after every step with the env (after the step) and the step's infos, and returns
each live agent's cost; a cost > 0 is a violation by that agent.

The mpe2 functions read the physical state of any mpe2 scenario (`env.unwrapped.world`), so they
apply to every mpe2 task; `spread_mpe2` takes its collision cost from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np

from src.custom import ComponentError, load_entry

__all__ = [
    "COST_FUNCTIONS",
    "PROXIMITY",
    "CostFunction",
    "mpe2_adversary_proximity",
    "mpe2_collisions",
    "resolve_cost",
]

CostFunction: TypeAlias = Callable[[Any, Mapping[str, Mapping[str, Any]]], Mapping[str, float]]
"""`(env, infos) -> {agent: cost}` for the agents of the step just taken."""

PROXIMITY = 0.5
"""Centre distance below which `mpe2_adversary_proximity` counts two opposing agents as close
(the world is about 2 x 2; agents are 0.05 to 0.15 in radius)."""


def _world_agents(env: Any, cost: str) -> list[Any]:
    world = getattr(getattr(env, "unwrapped", env), "world", None)
    if world is None or not hasattr(world, "agents"):
        raise ComponentError(
            f"cost function {cost!r} needs an mpe2 env (env.unwrapped.world), "
            f"got {type(env).__name__}"
        )
    return list(world.agents)


def _distance(a: Any, b: Any) -> float:
    # mpe2's own is_collision arithmetic, so the verdicts agree with its benchmark data.
    return float(np.sqrt(np.sum(np.square(a.state.p_pos - b.state.p_pos))))


def mpe2_collisions(env: Any, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """1 for an agent whose body overlaps another agent's (mpe2's collision test: centre
    distance below the sum of the sizes, for agents that collide), else 0."""
    agents = _world_agents(env, "mpe2_collisions")
    costs = {}
    for agent in agents:
        hit = agent.collide and any(
            other is not agent and _distance(other, agent) < other.size + agent.size
            for other in agents
        )
        costs[agent.name] = 1.0 if hit else 0.0
    return costs


def mpe2_adversary_proximity(env: Any, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """1 for an agent when an agent of the other side (mpe2's `adversary` flag) is within
    `PROXIMITY` of it, else 0: the adversaries must be kept at a distance."""
    agents = _world_agents(env, "mpe2_adversary_proximity")
    costs = {}
    for agent in agents:
        side = bool(getattr(agent, "adversary", False))
        close = any(
            bool(getattr(other, "adversary", False)) != side and _distance(other, agent) < PROXIMITY
            for other in agents
        )
        costs[agent.name] = 1.0 if close else 0.0
    return costs


COST_FUNCTIONS: dict[str, CostFunction] = {
    "mpe2_collisions": mpe2_collisions,
    "mpe2_adversary_proximity": mpe2_adversary_proximity,
}
"""The cost functions a config may name without an import path."""


def resolve_cost(spec: str) -> CostFunction:
    """The cost function `spec` names: a key of `COST_FUNCTIONS` or `module:function`."""
    if spec in COST_FUNCTIONS:
        return COST_FUNCTIONS[spec]
    if ":" not in spec:
        raise ComponentError(
            f"cost {spec!r}: not a cost function name ({', '.join(sorted(COST_FUNCTIONS))}) "
            "nor an import path 'module:function'"
        )
    function = load_entry(spec)
    if not callable(function):
        raise ComponentError(f"cost {spec!r}: is a {type(function).__name__}, not a function")
    return function
