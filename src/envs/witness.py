"""Centralised, fully observing reference teams of the native grid tasks.

Two teams that act on the true state of a :class:`~src.envs.grid_core.GridVectorEnv` (read with
``get_state``; they are diagnostics, never part of a learning method):

* :class:`CarefulTeam`: the *witness* of a task's risk floor. Agents take turns (priority
  rotates every step) and move along a shortest hazard-free path, never into a hazard, a cell
  another agent stands on, or a cell an agent earlier in the turn order moves into; at most
  ``junction_capacity`` agents may be in the cells that several routes share (``intersection``'s
  central 2x2 junction), which rules out gridlock. Under ``slip_mode="stay"`` this team never
  violates: a slip keeps an agent on a cell nobody moves into, targets are distinct, and nobody
  enters an occupied cell, so no two agents share or swap cells. Its violation probability is
  therefore an upper bound (here exactly 0) of the least risk a working team can reach, and its
  goal rate shows what such a team still earns.
* :func:`greedy_actions`: the careless team: every agent takes a shortest path on the whole grid
  (hazards and the others ignored), ties broken at random. It earns about what unconstrained
  IPPO earns and shows how often carelessness violates.

:func:`rollout_team` runs either team (or any action function) on given reset seeds and counts
violations and goals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from src.envs.grid_core import GridVectorEnv

__all__ = [
    "CarefulTeam",
    "TeamRollout",
    "distance_tables",
    "greedy_actions",
    "rollout_team",
]

_DROW = np.array([0, -1, 1, 0, 0], dtype=np.int64)
_DCOL = np.array([0, 0, 0, -1, 1], dtype=np.int64)
_FAR = 10**6

ActionFunction = Callable[[GridVectorEnv, np.random.Generator, int], np.ndarray]


def distance_tables(free: np.ndarray, size: int) -> np.ndarray:
    """All-pairs shortest path lengths ``[R, C, C]`` over the ``free`` cells ``[R, C]`` of R maps.

    Moves are the four grid steps between free cells; unreachable pairs (and pairs with a
    non-free end) get ``_FAR``. Breadth-first by repeated relaxation, vectorised over maps.
    """
    n_rows, n_cells = free.shape
    cells = np.arange(n_cells)
    rows, cols = np.divmod(cells, size)
    dist = np.full((n_rows, n_cells, n_cells), _FAR, dtype=np.int64)
    dist[:, cells, cells] = np.where(free, 0, _FAR)
    neighbours = []
    for dr, dc in zip(_DROW[1:], _DCOL[1:], strict=True):
        r, c = rows + dr, cols + dc
        inside = (r >= 0) & (r < size) & (c >= 0) & (c < size)
        neighbours.append(np.where(inside, r * size + c, cells))
    for _ in range(n_cells):
        best = dist
        for nb in neighbours:
            # dist[s, t] <= dist[nb(s), t] + 1 when both s and nb(s) are free
            step = dist[:, nb, :] + 1
            ok = free[:, :, None] & free[:, nb][:, :, None]
            best = np.minimum(best, np.where(ok, step, _FAR))
        if np.array_equal(best, dist):
            break
        dist = best
    return dist


def _targets(env: GridVectorEnv, cell: np.ndarray) -> np.ndarray:
    """Cell reached by each action ``[E, A, 5]`` (off-grid moves stay)."""
    size = env.size
    row, col = np.divmod(cell, size)
    r = np.clip(row[..., None] + _DROW, 0, size - 1)
    c = np.clip(col[..., None] + _DCOL, 0, size - 1)
    return r * size + c


def greedy_actions(env: GridVectorEnv, rng: np.random.Generator, step: int) -> np.ndarray:
    """Every agent steps towards its goal by Manhattan distance, ignoring hazards and others."""
    state = env.get_state()
    cell, goal = state["cell"], state["goal"]
    targets = _targets(env, cell)  # [E, A, 5]
    size = env.size
    tr, tc = np.divmod(targets, size)
    gr, gc = np.divmod(goal, size)
    dist = np.abs(tr - gr[..., None]) + np.abs(tc - gc[..., None])
    noise = rng.random(dist.shape) * 0.5  # random tie-break among equally short moves
    return np.argmin(dist + noise, axis=2)


class CarefulTeam:
    """The witness team (see the module docstring), called as ``team(env, rng, step)``.

    A team keeps the hazard-free distance tables of the layouts it has seen (a layout's hazards
    stay fixed for its episode), so use one team per rollout.
    """

    def __init__(self, *, junction_capacity: int = 3) -> None:
        """At most ``junction_capacity`` agents in the cells that routes share at once."""
        if junction_capacity < 1:
            raise ValueError(f"junction_capacity must be >= 1, got {junction_capacity}")
        self.junction_capacity = junction_capacity
        self._tables: dict[bytes, np.ndarray] = {}

    def _safe_distances(self, env: GridVectorEnv, hazard: np.ndarray) -> np.ndarray:
        """``[E, C, C]`` hazard-free shortest path lengths of every copy's map."""
        out = np.empty((len(hazard), env.n_cells, env.n_cells), dtype=np.int64)
        keys = [np.packbits(hazard[e]).tobytes() + bytes([env.size]) for e in range(len(hazard))]
        missing = [e for e, key in enumerate(keys) if key not in self._tables]
        if missing:
            tables = distance_tables(~hazard[missing], env.size)
            for e, table in zip(missing, tables, strict=True):
                self._tables[keys[e]] = table
        for e, key in enumerate(keys):
            out[e] = self._tables[key]
        return out

    def __call__(self, env: GridVectorEnv, rng: np.random.Generator, step: int) -> np.ndarray:
        """The team's joint action ``[E, A]`` in the current state of every copy of ``env``."""
        junction_capacity = self.junction_capacity
        state = env.get_state()
        cell, goal, hazard = state["cell"], state["goal"], state["hazard"]
        at_goal = state["at_goal"]
        n_envs, n_agents = cell.shape
        dist = self._safe_distances(env, hazard)  # [E, C, C]
        targets = _targets(env, cell)  # [E, A, 5]
        rows = np.arange(n_envs)
        junction = env.shared_cells()
        in_junction = np.isin(cell, junction).sum(axis=1) if junction.size else np.zeros(n_envs)
        occupied = np.zeros((n_envs, env.n_cells), dtype=bool)
        occupied[rows[:, None], cell] = True
        claimed = np.zeros((n_envs, env.n_cells), dtype=bool)
        actions = np.zeros((n_envs, n_agents), dtype=np.int64)
        for k in range(n_agents):
            agent = (step + k) % n_agents
            target = targets[:, agent]  # [E, 5]
            own = cell[:, agent]
            allowed = ~hazard[rows[:, None], target] & ~claimed[rows[:, None], target]
            allowed &= ~occupied[rows[:, None], target] | (target == own[:, None])
            if junction.size:
                entering = np.isin(target, junction) & ~np.isin(own, junction)[:, None]
                allowed &= ~entering | (in_junction < junction_capacity)[:, None]
            allowed[:, 0] = True  # staying is always safe: nobody moves into an occupied cell
            to_goal = dist[rows[:, None], target, goal[:, agent][:, None]]  # [E, 5]
            here = dist[rows, own, goal[:, agent]]
            score = np.where(allowed, to_goal, _FAR).astype(np.float64)
            # Deadlocks (nobody can get closer): sometimes step aside to a free cell.
            stuck = (score.min(axis=1) >= here) & ~at_goal[:, agent]
            aside = allowed & (target != own[:, None])
            score += rng.random(score.shape) * 0.5
            wiggle = stuck & (rng.random(n_envs) < 0.3) & aside.any(axis=1)
            score[wiggle] = np.where(aside[wiggle], rng.random((int(wiggle.sum()), 5)), _FAR)
            choice = np.argmin(score, axis=1)
            chosen = target[rows, choice]
            moving = chosen != own
            claimed[rows[moving], chosen[moving]] = True
            if junction.size:
                in_junction = in_junction + (
                    np.isin(chosen, junction) & ~np.isin(own, junction)
                ).astype(int)
            actions[:, agent] = choice
        return actions


@dataclass(frozen=True)
class TeamRollout:
    """Per-episode results of a team on N reset seeds."""

    first_violation: np.ndarray
    """``[N]`` 1-based step of the first violation, -1 if none within the horizon."""
    goals: np.ndarray
    """``[N]`` goals reached by the whole team within the horizon."""
    horizon: int
    """Steps rolled out per episode."""

    def p_violation(self, horizon: int) -> float:
        """Fraction of episodes with a violation within ``horizon`` steps."""
        fv = self.first_violation
        return float(((fv > 0) & (fv <= horizon)).mean())

    @property
    def goal_rate(self) -> float:
        """Mean goals reached per episode and step (whole team)."""
        return float(self.goals.mean() / self.horizon)


def rollout_team(
    make_env: Callable[[int], GridVectorEnv],
    actions: ActionFunction,
    seeds: Sequence[int],
    *,
    horizon: int,
    rng_seed: int = 0,
) -> TeamRollout:
    """Roll ``actions`` out for ``horizon`` steps from each reset seed (one copy per seed).

    ``make_env(E)`` must return an env of E copies whose hidden cap is at least ``horizon``.
    Goals are the arrivals the env reports (``StepResult.arrived``).
    """
    env = make_env(len(seeds))
    env.reset(seed=[int(s) for s in seeds])
    rng = np.random.default_rng(rng_seed)
    n = len(seeds)
    first = np.full(n, -1, dtype=np.int64)
    goals = np.zeros(n, dtype=np.int64)
    for t in range(horizon):
        result = env.step(actions(env, rng, t))
        if result.arrived is None:
            raise ValueError(f"{env.name} does not report arrivals")
        goals += np.asarray(result.arrived).sum(axis=1)
        hit = (result.cost > 0).any(axis=1) & (first < 0)
        first[hit] = t + 1
        if (result.terminated | result.truncated).any():
            break
    env.close()
    return TeamRollout(first_violation=first, goals=goals, horizon=horizon)
