"""``intersection``: agents cross a four-way junction where safety depends on the others.

The grid holds a cross-shaped two-lane road; every off-road cell is a hazard. Each episode the
agents get distinct arms of the cross at random (north, east, south, west; at most four agents)
and drive on the right-hand lane of their arm to the far end of the opposite arm. Every route
passes the central 2x2 junction, where routes cross, so a collision (same cell, or swapping
cells) is avoided only by timing one's moves against the others': waiting, backing up or
side-stepping into the other lane. Agents observe the others' relative positions and last
moves, which is what an opponent model needs to predict them. Starts lie up to
``start_jitter`` cells in from the edge, so arrival times at the junction vary.

With ``continuing`` (default) traffic keeps flowing: a car that reaches the end of its route
leaves and re-enters at once from an arm that no other car drives on, at a start cell (edge
plus jitter) that no car occupies, on that arm's route; if no such cell is free it waits at its
exit and tries again next step. Episodes end only at the hidden cap; the return counts routes
completed. Every route crosses the junction, so the other cars are the main risk: slips keep a
car in place (``slip_mode="stay"``) and never push it off the road.

Dynamics, costs, rewards and observations are those of :mod:`src.envs.grid_core`; the
observation includes every agent's last move (``observe_velocity``).
``slip_mode="any", continuing=False, neighbour_view=0`` give the original task.

>>> env = IntersectionVectorEnv(IntersectionConfig(), num_envs=2, seed=0)
>>> env.reset().shape
(2, 4, 53)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.envs.base import check_int
from src.envs.grid_core import GridConfig, GridVectorEnv
from src.envs.rng import draw, index_terms

__all__ = ["IntersectionConfig", "IntersectionVectorEnv"]

_N_ARMS = 4
_MAX_KEY = np.uint64(np.iinfo(np.uint64).max)


@dataclass(frozen=True, kw_only=True)
class IntersectionConfig(GridConfig):
    """Parameters of ``intersection`` (shared grid parameters with junction defaults)."""

    n_agents: int = 4
    """Number of agents, one per arm of the junction (1 to 4)."""
    size: int = 10
    """Side of the square grid; the road is the two middle rows and columns."""
    slip_prob: float = 0.02
    """Probability that an agent's action is replaced by one of the other four actions.

    Lower than ``hazard_grid``'s: every arm cell borders the verge, so slips alone would
    otherwise dominate the violations that the other agents should cause."""
    max_steps: int = 40
    """Hidden episode cap: episodes are truncated after this many steps."""
    start_jitter: int = 2
    """Starts lie 0..start_jitter cells in from the grid edge, uniformly."""

    @property
    def arm_length(self) -> int:
        """Cells of the shortest arm between the grid edge and the junction."""
        return self.size // 2 - 1

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""
        super().validate()
        check_int("n_agents", self.n_agents, low=1, high=_N_ARMS)
        check_int("size", self.size, low=6)
        check_int("start_jitter", self.start_jitter, low=0, high=self.arm_length - 1)


class IntersectionVectorEnv(GridVectorEnv):
    """Batched ``intersection``: see the module docstring."""

    name = "intersection"
    config_class = IntersectionConfig
    observe_velocity = True
    floor_colour = (225, 225, 225)
    hazard_colour = (110, 150, 90)

    def _build_layout(self) -> None:
        """The road, the start cells of every arm and jitter, the goals and the draw indices."""
        config = self.config
        size = self.size
        low = config.arm_length  # road rows and columns are low and low + 1
        road = (np.isin(self._row, (low, low + 1))) | (np.isin(self._col, (low, low + 1)))
        self._offroad = ~road
        n_jitter = config.start_jitter + 1
        jitter = np.arange(n_jitter)
        last = size - 1
        # Right-hand traffic, rows grow southwards. Arm 0 north (drives south in column low),
        # 1 east (drives west in row low), 2 south (drives north in column low + 1),
        # 3 west (drives east in row low + 1). _start[arm * n_jitter + j], _goal_of[arm].
        start_rc = [
            (jitter, np.full(n_jitter, low)),
            (np.full(n_jitter, low), last - jitter),
            (last - jitter, np.full(n_jitter, low + 1)),
            (np.full(n_jitter, low + 1), jitter),
        ]
        self._start = np.concatenate([r * size + c for r, c in start_rc]).astype(np.int64)
        goal_rc = [(last, low), (low, 0), (0, low + 1), (low + 1, last)]
        self._goal_of = np.array([r * size + c for r, c in goal_rc], dtype=np.int64)
        self._n_jitter = n_jitter
        self._arm_terms = index_terms(np.arange(_N_ARMS))
        self._jitter_terms = index_terms(_N_ARMS + np.arange(self.n_agents))
        # A re-entry draws one key per arm and one jitter.
        self._respawn_draws = _N_ARMS + 1
        self._entry_terms = [
            index_terms([self._respawn_index(a, k) for k in range(_N_ARMS + 1)])
            for a in range(self.n_agents)
        ]

    def _place(
        self, keys: np.ndarray, counters: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_rows = len(keys)
        arms = np.argsort(draw(keys, counters, self._arm_terms), axis=1, kind="stable")
        arms = arms[:, : self.n_agents]
        bits = draw(keys, counters, self._jitter_terms) >> np.uint64(32)
        jitter = (bits % np.uint64(self._n_jitter)).astype(np.int64)
        start = self._start.take(arms * self._n_jitter + jitter)
        goal = self._goal_of.take(arms)
        hazard = np.broadcast_to(self._offroad, (n_rows, self.n_cells))
        return start, goal, hazard

    def _respawn(
        self, rows: np.ndarray, agent: int, keys: np.ndarray, counters: np.ndarray
    ) -> np.ndarray:
        """Re-enter ``agent`` from a free arm: uniform over arms no other car is routed on whose
        drawn start cell is empty; a car with no such arm waits on its exit."""
        n_rows = len(rows)
        bits = draw(keys, counters, self._entry_terms[agent])  # [R, 5]
        jitter = ((bits[:, _N_ARMS] >> np.uint64(32)) % np.uint64(self._n_jitter)).astype(np.int64)
        entry = self._start.reshape(_N_ARMS, self._n_jitter)[:, jitter].T  # [R, arms]
        others = np.delete(np.arange(self.n_agents), agent)
        cells = self._cell[rows]  # [R, A]
        # An arm is taken when another car is routed on it (its goal is that arm's exit).
        taken = (self._goal[rows][:, others, None] == self._goal_of[None, None, :]).any(axis=1)
        occupied = (entry[:, :, None] == cells[:, None, :]).any(axis=2)  # [R, arms]
        arm_keys = bits[:, :_N_ARMS] >> np.uint64(1)
        arm_keys[taken | occupied] = _MAX_KEY
        arm = np.argmin(arm_keys, axis=1)
        given = arm_keys[np.arange(n_rows), arm] != _MAX_KEY
        chosen = rows[given]
        self._cell[chosen, agent] = entry[given, arm[given]]
        self._goal[chosen, agent] = self._goal_of[arm[given]]
        self._vel[chosen, agent] = 0.0
        return given

    def shared_cells(self) -> np.ndarray:
        """The central 2x2 junction: every route crosses it."""
        low = self.config.arm_length
        return np.array(
            [r * self.size + c for r in (low, low + 1) for c in (low, low + 1)], dtype=np.int64
        )
