"""``hazard_grid``: agents walk to their goals on a grid strewn with hazard cells.

Layout of an episode (drawn from the copy's random stream): ``n_hazards`` hazard cells are
chosen among the *hazard sites*, the cells whose row and column are both odd; starts and goals
are ``2 * n_agents`` distinct non-hazard cells. Every cell with an even row or an even column
is therefore hazard-free and these cells form a connected lattice touching every other
non-hazard cell, so each agent always has a hazard-free path to its goal. The lattice is not the
shortest path in general: an agent that walks straight to its goal crosses hazard sites, and a
slip next to a hazard can push it in, so safe behaviour must be learned.

With ``continuing`` (default) an agent that reaches its goal gets a new one at once: a
non-hazard cell, drawn uniformly among those that no agent stands on and that is no other
agent's goal, so the team keeps working until the hidden cap and the return counts goals.
Agents observe the others' last moves (``observe_moves``), which a careful agent needs to
avoid walking into someone who is about to move into the same cell.

Dynamics, costs, rewards and observations are those of :mod:`src.envs.grid_core`.
``slip_mode="any", continuing=False, observe_moves=False, neighbour_view=0, n_hazards=8``
give the original task.

>>> env = HazardGridVectorEnv(HazardGridConfig(), num_envs=4, seed=0)
>>> env.reset().shape
(4, 3, 49)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.envs.base import check_int
from src.envs.grid_core import GridConfig, GridVectorEnv
from src.envs.rng import draw, index_terms

__all__ = ["HazardGridConfig", "HazardGridVectorEnv"]

_MAX_KEY = np.uint64(np.iinfo(np.uint64).max)


@dataclass(frozen=True, kw_only=True)
class HazardGridConfig(GridConfig):
    """Parameters of ``hazard_grid`` (the shared grid parameters plus the hazard count)."""

    n_hazards: int = 4
    """Hazard cells per episode, placed on cells with odd row and odd column."""
    observe_moves: bool = True
    """Agents observe their own and every other agent's last move (``False``: positions only,
    the original observation)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""
        super().validate()
        sites = (self.size // 2) ** 2
        check_int("n_hazards", self.n_hazards, low=0)
        if not isinstance(self.observe_moves, bool):
            raise ValueError(f"observe_moves must be true or false, got {self.observe_moves!r}")
        if self.n_hazards > sites:
            raise ValueError(
                f"n_hazards={self.n_hazards} exceeds the {sites} hazard sites (cells with odd "
                f"row and odd column) of a {self.size}x{self.size} grid"
            )
        free = self.size * self.size - self.n_hazards
        if 2 * self.n_agents > free:
            raise ValueError(
                f"grid too small for the agents: size={self.size} leaves {free} non-hazard "
                f"cells, but n_agents={self.n_agents} need {2 * self.n_agents} distinct start "
                "and goal cells"
            )


class HazardGridVectorEnv(GridVectorEnv):
    """Batched ``hazard_grid``: see the module docstring."""

    name = "hazard_grid"
    config_class = HazardGridConfig

    def _observes_moves(self) -> bool:
        """Last moves are observed when the config says so."""
        return bool(self.config.observe_moves)

    def _build_layout(self) -> None:
        """The hazard sites and the draw indices of hazards, starts and goals."""
        self._n_hazards = self.config.n_hazards
        rows, cols = self._row, self._col
        self._sites = np.flatnonzero((rows % 2 == 1) & (cols % 2 == 1))
        # Draw indices: first one per hazard site, then one per cell (for starts and goals).
        self._site_terms = index_terms(np.arange(len(self._sites)))
        self._cell_terms = index_terms(len(self._sites) + np.arange(self.n_cells))
        # A new goal draws one key per cell.
        self._respawn_draws = self.n_cells
        self._goal_terms = [
            index_terms([self._respawn_index(a, c) for c in range(self.n_cells)])
            for a in range(self.n_agents)
        ]

    def _place(
        self, keys: np.ndarray, counters: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_rows = len(keys)
        n_agents = self.n_agents
        n_hazards = self._n_hazards
        # A random permutation per copy is the argsort of independent random keys.
        site_order = np.argsort(draw(keys, counters, self._site_terms), axis=1, kind="stable")
        hazard = np.zeros((n_rows, self.n_cells), dtype=bool)
        chosen = self._sites.take(site_order[:, :n_hazards])
        hazard[np.arange(n_rows)[:, None], chosen] = True
        # Hazards sort last (their keys are the maximum; the others use 63 bits), so the first
        # 2A cells of the order are distinct non-hazard cells.
        cell_keys = draw(keys, counters, self._cell_terms) >> np.uint64(1)
        cell_keys[hazard] = _MAX_KEY
        order = np.argsort(cell_keys, axis=1, kind="stable")[:, : 2 * n_agents]
        return order[:, :n_agents], order[:, n_agents:], hazard

    def _respawn(
        self, rows: np.ndarray, agent: int, keys: np.ndarray, counters: np.ndarray
    ) -> np.ndarray:
        """A new goal for ``agent``: uniform over free non-hazard cells (always exists)."""
        n_rows = len(rows)
        forbidden = self._hazpad[rows][:, self._pad_of] > 0  # [R, C]
        sequence = np.arange(n_rows)[:, None]
        forbidden[sequence, self._cell[rows]] = True  # cells with an agent on them
        others = np.delete(np.arange(self.n_agents), agent)
        forbidden[sequence, self._goal[rows][:, others]] = True  # the others' goals
        cell_keys = draw(keys, counters, self._goal_terms[agent]) >> np.uint64(1)
        cell_keys[forbidden] = _MAX_KEY
        self._goal[rows, agent] = np.argmin(cell_keys, axis=1)
        return np.ones(n_rows, dtype=bool)
