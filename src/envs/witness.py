"""Centralised, fully observing reference teams of the native grid tasks and of ``spread``.

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

On ``spread`` (:class:`~src.envs.spread_core.NativeSpreadVectorEnv`) both roles are played by
:class:`SpreadTeam`: each agent heads for its landmark of the assignment with the least summed
distance (chosen at the episode start, when the landmarks are placed), steering its *rest point*
(where it would stop if it took no-ops from then on: the velocity decays by ``1 - damping`` every
step, so the rest point is ``p + v dt / damping``; an action moves it by ``u dt^2 / damping``,
0.2 per step) onto the landmark. ``careful=False`` is the careless team (the others ignored).
``careful=True`` is the witness: agents decide in turn (the order rotates every step) and an
agent takes its most useful action whose coasting path keeps every other agent at least
``clearance`` away, or no further inside that margin than a no-op would: the straight path from
where the pair stands after the step to where it would come to rest, with the earlier agents'
chosen actions and no-ops of the later ones. A no-op always passes this test, so if every pair's
coasting path keeps the collision distance, it still does after the step, and a team that starts
apart (``spawn: separated``) never collides, but for the soft contact forces of later steps,
which the check leaves out (they push colliding pairs apart and are negligible beyond 0.31).
Blocked agents sometimes step aside to break deadlocks.

:func:`rollout_team` runs any of these teams (or any action function) on given reset seeds and
counts violations and work: goals reached on the grid tasks, landmarks covered (an agent closer
than 0.1, mpe2's ``occupied_landmarks``) per step on ``spread``, summed over the episode.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from src.envs.base import StepResult, VectorEnv
from src.envs.grid_core import GridVectorEnv
from src.envs.spread_core import (
    CAPTURE_RADIUS,
    COLLISION_DISTANCE,
    CONTACT_FORCE,
    CONTACT_MARGIN,
    DAMPING,
    DISCRETE_CONTROLS,
    DT,
    NativeSpreadVectorEnv,
)

__all__ = [
    "CarefulTeam",
    "SpreadTeam",
    "TeamRollout",
    "distance_tables",
    "greedy_actions",
    "rollout_team",
]

_DROW = np.array([0, -1, 1, 0, 0], dtype=np.int64)
_DCOL = np.array([0, 0, 0, -1, 1], dtype=np.int64)
_FAR = 10**6

ActionFunction = Callable[[Any, np.random.Generator, int], np.ndarray]
"""``actions(env, rng, step)``: a team's joint action ``[E, A]`` in the current state of ``env``."""


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


def _norm(vectors: np.ndarray) -> np.ndarray:
    """Euclidean norms over the last axis (of length 2)."""
    return np.sqrt(vectors[..., 0] * vectors[..., 0] + vectors[..., 1] * vectors[..., 1])


def _segment_clearance(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Least norm of the points on the straight segments from ``start`` to ``end`` ``[..., 2]``."""
    span = end - start
    length2 = (span * span).sum(axis=-1)
    along = -(start * span).sum(axis=-1) / np.where(length2 > 0, length2, 1.0)
    along = np.clip(np.where(length2 > 0, along, 0.0), 0.0, 1.0)
    return _norm(start + along[..., None] * span)


def _contact_forces(pos: np.ndarray) -> np.ndarray:
    """``[E, A, 2]`` soft contact force on every agent from the others at positions ``pos``."""
    delta = pos[:, :, None, :] - pos[:, None, :, :]  # [E, A, A, 2]: p_i - p_j
    dist = _norm(delta)
    apart = dist > 0  # an agent exerts no force on itself
    penetration = CONTACT_MARGIN * np.logaddexp(0.0, (COLLISION_DISTANCE - dist) / CONTACT_MARGIN)
    scale = np.where(apart, CONTACT_FORCE * penetration / np.where(apart, dist, 1.0), 0.0)
    return (delta * scale[..., None]).sum(axis=2)


def _assigned_landmarks(pos: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """``[E, A, 2]`` landmark of each agent in the assignment with the least summed distance."""
    n_agents = pos.shape[1]
    perms = np.array(list(itertools.permutations(range(n_agents))), dtype=np.int64)  # [K, A]
    dist = _norm(pos[:, :, None, :] - landmarks[:, None, :, :])  # [E, A, L]
    total = dist[:, np.arange(n_agents), perms].sum(axis=2)  # [E, K]
    best = perms[np.argmin(total, axis=1)]  # [E, A]
    return np.take_along_axis(landmarks, best[:, :, None], axis=1)


class SpreadTeam:
    """The teams of ``spread`` (see the module docstring), called as ``team(env, rng, step)``.

    The landmarks are assigned at step 0, so use one team per rollout.
    """

    def __init__(
        self, *, careful: bool = True, clearance: float = 0.32, sidestep: float = 0.3
    ) -> None:
        """``careful``: the witness (else the careless team); ``clearance``: the margin kept
        between agents' coasting paths (at least the collision distance); ``sidestep``: the
        probability that a blocked agent takes a random safe move instead of waiting."""
        if clearance < COLLISION_DISTANCE:
            raise ValueError(
                f"clearance must be >= the collision distance {COLLISION_DISTANCE}, got {clearance}"
            )
        if not 0.0 <= sidestep <= 1.0:
            raise ValueError(f"sidestep must be a probability, got {sidestep}")
        self.careful = careful
        self.clearance = clearance
        self.sidestep = sidestep
        self._goal: np.ndarray | None = None

    def __call__(
        self, env: NativeSpreadVectorEnv, rng: np.random.Generator, step: int
    ) -> np.ndarray:
        """The team's joint discrete action ``[E, A]`` in the current state of every copy."""
        if env.continuous_actions:
            raise ValueError("the spread teams take discrete actions")
        state = env.get_state()
        pos, vel = state["pos"], state["vel"]
        n_envs, n_agents = pos.shape[:2]
        if step == 0 or self._goal is None or len(self._goal) != n_envs:
            self._goal = _assigned_landmarks(pos, state["landmarks"])
        after = pos + vel * DT  # positions after the step, whatever the actions
        # Rest points after a no-op (this step's contact forces included), and after each action.
        rest = after + (vel * (1 - DAMPING) + _contact_forces(pos) * DT) * (DT / DAMPING)
        options = rest[:, :, None, :] + DISCRETE_CONTROLS * (DT * DT / DAMPING)  # [E, A, 5, 2]
        miss = _norm(options - self._goal[:, :, None, :])  # [E, A, 5]
        order = np.argsort(miss + 1e-9 * (np.arange(DISCRETE_CONTROLS.shape[0]) > 0), axis=2)
        if not self.careful:
            return order[:, :, 0]
        rows = np.arange(n_envs)
        chosen = rest.copy()  # agents yet to decide take no-ops
        actions = np.zeros((n_envs, n_agents), dtype=np.int64)
        for k in range(n_agents):
            agent = (step + k) % n_agents
            others = np.array([j for j in range(n_agents) if j != agent], dtype=np.int64)
            start = after[:, agent, None, :] - after[:, others, :]  # [E, A-1, 2]
            end = options[:, agent, :, None, :] - chosen[:, None, others, :]  # [E, 5, A-1, 2]
            clear = _segment_clearance(start[:, None], end)  # [E, 5, A-1]
            bound = np.minimum(self.clearance, clear[:, :1])  # a no-op's clearance, capped
            safe = (clear >= bound).all(axis=2)  # [E, 5]; a no-op is always safe
            ranked = np.take_along_axis(safe, order[:, agent], axis=1)
            choice = order[rows, agent, np.argmax(ranked, axis=1)]
            # Blocked (its best move is unsafe): sometimes a random safe move instead of waiting.
            blocked = ~ranked[:, 0] & (order[:, agent, 0] != 0)
            moves = safe.copy()
            moves[:, 0] = False
            aside = blocked & moves.any(axis=1) & (rng.random(n_envs) < self.sidestep)
            if aside.any():
                noise = np.where(moves[aside], rng.random((int(aside.sum()), moves.shape[1])), 2.0)
                choice[aside] = np.argmin(noise, axis=1)
            actions[:, agent] = choice
            chosen[:, agent] = options[rows, agent, choice]
        return actions


@dataclass(frozen=True)
class TeamRollout:
    """Per-episode results of a team on N reset seeds."""

    first_violation: np.ndarray
    """``[N]`` 1-based step of the first violation, -1 if none within the horizon."""
    goals: np.ndarray
    """``[N]`` work of the whole team within the horizon: goals reached (grid tasks), or
    landmarks covered per step summed over the steps (``spread``)."""
    horizon: int
    """Steps rolled out per episode."""
    returns: np.ndarray | None = None
    """``[N]`` team return within the horizon (rewards summed over agents and steps)."""

    def p_violation(self, horizon: int) -> float:
        """Fraction of episodes with a violation within ``horizon`` steps."""
        fv = self.first_violation
        return float(((fv > 0) & (fv <= horizon)).mean())

    @property
    def goal_rate(self) -> float:
        """Mean goals reached per episode and step (whole team)."""
        return float(self.goals.mean() / self.horizon)


def _work(env: VectorEnv, result: StepResult) -> np.ndarray:
    """``[E]`` work of the team in the step: goals reached, or landmarks covered (``spread``)."""
    if isinstance(env, NativeSpreadVectorEnv):
        return np.count_nonzero(env.last_min_dists < CAPTURE_RADIUS, axis=1)
    if result.arrived is None:
        raise ValueError(f"{env.name} does not report arrivals")
    return np.asarray(result.arrived).sum(axis=1)


def rollout_team(
    make_env: Callable[[int], VectorEnv],
    actions: ActionFunction,
    seeds: Sequence[int],
    *,
    horizon: int,
    rng_seed: int = 0,
) -> TeamRollout:
    """Roll ``actions`` out for ``horizon`` steps from each reset seed (one copy per seed).

    ``make_env(E)`` must return an env of E copies whose hidden cap is at least ``horizon``.
    Goals are the arrivals the env reports (``StepResult.arrived``), or on ``spread`` the
    landmarks covered at every step.
    """
    env = make_env(len(seeds))
    env.reset(seed=[int(s) for s in seeds])
    rng = np.random.default_rng(rng_seed)
    n = len(seeds)
    first = np.full(n, -1, dtype=np.int64)
    goals = np.zeros(n, dtype=np.int64)
    returns = np.zeros(n)
    for t in range(horizon):
        result = env.step(actions(env, rng, t))
        goals += _work(env, result)
        returns += result.reward.sum(axis=1)
        hit = (result.cost > 0).any(axis=1) & (first < 0)
        first[hit] = t + 1
        if (result.terminated | result.truncated).any():
            break
    env.close()
    return TeamRollout(first_violation=first, goals=goals, horizon=horizon, returns=returns)
