"""The batched NumPy core shared by the native grid tasks (``hazard_grid``, ``intersection``).

One :meth:`GridVectorEnv.step` advances all ``num_envs`` copies with a fixed number of array
operations: no Python loop over copies or agents. A task only says where agents, goals and
hazard cells go at the start of an episode (:meth:`GridVectorEnv._place`); movement, slips,
collisions, costs, rewards, observations, auto-reset and rendering are shared.

Dynamics of one step, per copy:

1. Each agent's action (0 stay, 1 up, 2 down, 3 left, 4 right) *slips* with probability
   ``slip_prob``: with ``slip_mode="stay"`` (default) the agent stays where it is, so a slip
   never moves anyone into a hazard or another agent; with ``slip_mode="any"`` (the original
   dynamics) the action is replaced by one of the other four actions, uniformly. Agents on
   their goal stay there.
2. Moves off the grid leave the agent in place. Agents never block each other.
3. Cost (an indicator, at most 1 per agent and step): 1 to an agent whose cell after the step is
   a hazard (it entered or stayed on it), and 1 to each agent in a collision: two agents in the
   same cell after the step, or two agents that swapped cells.
4. Reward: ``progress_reward`` times the decrease of the Manhattan distance to the own goal,
   ``goal_reward`` on arrival, ``-step_penalty`` every step the agent is not on its goal.
5. With ``continuing=True`` (default) work goes on until the hidden cap: an agent that reaches
   its goal is given new work by the task (:meth:`GridVectorEnv._respawn`: a new goal, or a
   re-entry into traffic) after the step's costs, and episodes only end by truncation at
   ``max_steps``. With ``continuing=False`` (the original dynamics) agents stay on their goal
   and the episode terminates when every agent is on its goal. Finished copies reset in the
   same call (``autoreset``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from src.envs.base import (
    StepResult,
    VectorEnv,
    check_actions,
    check_config,
    check_int,
    check_number,
    check_probability,
    check_snapshot,
    first_reset_seeds,
    require_reset,
    resolve_seeds,
)
from src.envs.rendering import agent_colours, draw_grid
from src.envs.rng import draw, index_terms, seed_keys, uniform_below

__all__ = ["ACTION_NAMES", "SLIP_MODES", "GridConfig", "GridVectorEnv"]

ACTION_NAMES = ("stay", "up", "down", "left", "right")
_DROW = np.array([0, -1, 1, 0, 0], dtype=np.int64)
_DCOL = np.array([0, 0, 0, -1, 1], dtype=np.int64)
_N_ACTIONS = len(ACTION_NAMES)
_MAX_SIZE = 64
_VIEW = 3  # side of the local hazard view centred on the agent
SLIP_MODES = ("stay", "any")


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """Parameters shared by the native grid tasks; tasks subclass it to add their own."""

    n_agents: int = 3
    """Number of agents."""
    size: int = 8
    """Side of the square grid in cells."""
    slip_prob: float = 0.1
    """Probability that an agent's action slips (see ``slip_mode``)."""
    slip_mode: str = "stay"
    """What a slip does: ``stay`` keeps the agent in place (a careful agent can always keep a
    margin from hazards and the others); ``any`` replaces the action by one of the other four
    (the original dynamics: a slip can push an agent into a hazard next to it)."""
    continuing: bool = True
    """Work continues until the hidden cap (new goal, or re-entry, on arrival); ``False``: agents
    stay on their goal and the episode terminates when all are there (the original tasks)."""
    neighbour_view: int = 5
    """Side of the square window around an agent in which it sees the other agents' cells (an
    occupancy map, 1 where another agent stands); odd, 0 for none (the original observation).
    A 5x5 window shows every agent that could move into the same cell as it next step."""
    max_steps: int = 50
    """Hidden episode cap: episodes are truncated after this many steps."""
    progress_reward: float = 0.1
    """Reward per cell of decrease in Manhattan distance to the agent's goal."""
    goal_reward: float = 1.0
    """Reward on the step an agent reaches its goal."""
    step_penalty: float = 0.01
    """Penalty for every step an agent is not on its goal."""
    cell_pixels: int = 32
    """Side of one rendered cell in pixels."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""
        check_int("n_agents", self.n_agents, low=1)
        check_int("size", self.size, low=2, high=_MAX_SIZE)
        check_probability("slip_prob", self.slip_prob)
        if self.slip_mode not in SLIP_MODES:
            raise ValueError(
                f"slip_mode must be one of {', '.join(SLIP_MODES)}, got {self.slip_mode!r}"
            )
        if not isinstance(self.continuing, bool):
            raise ValueError(f"continuing must be true or false, got {self.continuing!r}")
        check_int("max_steps", self.max_steps, low=1)
        check_int("neighbour_view", self.neighbour_view, low=0, high=2 * _MAX_SIZE - 1)
        if self.neighbour_view % 2 == 0 and self.neighbour_view != 0:
            raise ValueError(f"neighbour_view must be odd or 0, got {self.neighbour_view}")
        check_number("progress_reward", self.progress_reward)
        check_number("goal_reward", self.goal_reward)
        check_number("step_penalty", self.step_penalty)
        check_int("cell_pixels", self.cell_pixels, low=2, high=256)


class GridVectorEnv(VectorEnv):
    """Batched grid task: ``num_envs`` copies of ``n_agents`` agents in flat NumPy arrays.

    Subclasses set :attr:`name`, :attr:`config_class`, the colours, :attr:`observe_velocity`,
    build their fixed tables in :meth:`_build_layout` and implement :meth:`_place`. Observation
    of agent i (float32, in [-1, 1]): own row and column divided by ``size - 1``; vector to own
    goal; own last move (if :attr:`observe_velocity`); the 3x3 hazard view around it (1 =
    hazard, row-major, off-grid cells 0); for every other agent in agent order its relative
    position (and last move); the ``neighbour_view`` occupancy window of the others (if any);
    1 if on its goal. Never the step count.
    """

    n_actions: int = _N_ACTIONS
    config_class: ClassVar[type[GridConfig]] = GridConfig
    """The task's config dataclass: the constructor rejects any other config."""
    observe_velocity: bool = False
    """Whether observations and the state carry every agent's last move (see
    :meth:`_observes_moves`, which a task may base on its config)."""
    floor_colour: ClassVar[tuple[int, int, int]] = (245, 245, 245)
    hazard_colour: ClassVar[tuple[int, int, int]] = (200, 40, 40)

    def __init__(
        self,
        config: GridConfig,
        *,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
        autoreset: bool = True,
    ) -> None:
        check_config(config, self.config_class)
        check_int("num_envs", num_envs, low=1)
        self.config = config
        self.num_envs = num_envs
        self.n_agents = config.n_agents
        self.agents = [f"agent_{i}" for i in range(config.n_agents)]
        self.max_steps = config.max_steps
        self.size = config.size
        self.autoreset = autoreset
        self._initial_seeds = resolve_seeds(seed, num_envs)
        self._build_tables()
        self.observe_velocity = self._observes_moves()
        per_other = 4 if self.observe_velocity else 2
        own = 6 if self.observe_velocity else 4
        self._nview = config.neighbour_view if self.n_agents > 1 else 0
        self.obs_dim = own + _VIEW * _VIEW + per_other * (self.n_agents - 1) + self._nview**2 + 1
        self.state_dim = self.n_agents * (5 + (2 if self.observe_velocity else 0)) + self.n_cells
        self._colours = agent_colours(self.n_agents)
        self._allocate()
        self._build_layout()

    # ------------------------------------------------------------------ setup

    def _build_tables(self) -> None:
        size = self.size
        self.n_cells = size * size
        rows, cols = np.divmod(np.arange(self.n_cells, dtype=np.int64), size)
        self._row = rows
        self._col = cols
        self._rown = (rows / (size - 1)).astype(np.float32)
        self._coln = (cols / (size - 1)).astype(np.float32)
        # _move[cell * 5 + action] is the cell reached; moving off the grid keeps the cell.
        next_rows = np.clip(rows[:, None] + _DROW, 0, size - 1)
        next_cols = np.clip(cols[:, None] + _DCOL, 0, size - 1)
        self._move = (next_rows * size + next_cols).ravel()
        # Hazards live in a grid padded by one cell so the local view never leaves the array.
        padded = size + 2
        self._n_padded = padded * padded
        self._pad_of = (rows + 1) * padded + cols + 1
        half = _VIEW // 2
        offsets = np.array(
            [dr * padded + dc for dr in range(-half, half + 1) for dc in range(-half, half + 1)],
            dtype=np.int64,
        )
        # _view[cell] lists the padded indices of the 3x3 window around the cell.
        self._view = self._pad_of[:, None] + offsets
        n_agents = self.n_agents
        self._others = np.array(
            [[j for j in range(n_agents) if j != i] for i in range(n_agents)], dtype=np.int64
        ).reshape(n_agents, n_agents - 1)
        self._offdiag = ~np.eye(n_agents, dtype=bool)
        self._agent_terms = index_terms(np.arange(n_agents))
        self._pad_rows = (np.arange(self.num_envs, dtype=np.int64) * self._n_padded)[:, None]
        self._floor = np.broadcast_to(
            np.array(self.floor_colour, dtype=np.uint8), (self.n_cells, 3)
        ).copy()

    def _allocate(self) -> None:
        shape = (self.num_envs, self.n_agents)
        self._keys: np.ndarray | None = None
        self._counters = np.zeros(self.num_envs, dtype=np.uint64)
        self._cell = np.zeros(shape, dtype=np.int64)
        self._goal = np.zeros(shape, dtype=np.int64)
        self._goal_row = np.zeros(shape, dtype=np.int64)
        self._goal_col = np.zeros(shape, dtype=np.int64)
        self._dist = np.zeros(shape, dtype=np.int64)
        self._at_goal = np.zeros(shape, dtype=bool)
        self._vel = np.zeros((*shape, 2), dtype=np.float32)
        self._steps = np.zeros(self.num_envs, dtype=np.int64)
        self._hazpad = np.zeros((self.num_envs, self._n_padded), dtype=np.float32)
        self._finished = np.zeros(self.num_envs, dtype=bool)

    def _observes_moves(self) -> bool:
        """Whether agents observe last moves (the class's :attr:`observe_velocity` by default)."""
        return type(self).observe_velocity

    def _build_layout(self) -> None:
        """Build the task's own fixed tables, after the shared ones (none by default)."""

    def _respawn(
        self, rows: np.ndarray, agent: int, keys: np.ndarray, counters: np.ndarray
    ) -> np.ndarray:
        """New work for ``agent`` on its goal in copies ``rows`` (``continuing`` tasks only).

        Called after a step's costs, agent by agent, for the copies where the agent is on its
        goal. Update ``self._goal`` (and ``self._cell`` for a re-entry) of those rows; return
        the bool mask ``[len(rows)]`` of rows where new work was given (the others wait on
        their goal and are asked again next step). A re-entry also resets the agent's last
        move in ``self._vel``. Draw only from
        ``rng.draw(keys, counters, ...)`` with draw indices from :meth:`_respawn_index`.
        """
        raise NotImplementedError(f"{type(self).__name__} has no continuing dynamics")

    def shared_cells(self) -> np.ndarray:
        """Cells that several agents' routes must cross (none by default)."""
        return np.zeros(0, dtype=np.int64)

    def _respawn_index(self, agent: int, k: int) -> int:
        """Draw index of the ``k``-th respawn draw of ``agent`` (after the slip draws)."""
        return self.n_agents + agent * self._respawn_draws + k

    _respawn_draws: int = 0
    """Random draws one respawn of one agent uses (set by a continuing task)."""

    @abstractmethod
    def _place(
        self, keys: np.ndarray, counters: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start cells ``[R, A]``, goal cells ``[R, A]`` and hazards ``[R, C]`` bool.

        Draw only from ``rng.draw(keys, counters, ...)`` so episodes follow the copy's stream.
        Starts and goals must be distinct cells, each start different from its own goal.
        """

    # ------------------------------------------------------------------ episode control

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Start a new episode in every copy; returns obs ``[E, A, D]`` float32."""
        seeds = first_reset_seeds(
            seed, self.num_envs, initial=self._initial_seeds, started=self._keys is not None
        )
        if seeds is not None:
            self._keys = seed_keys(seeds)
            self._counters = np.zeros(self.num_envs, dtype=np.uint64)
        self._reset_rows(np.arange(self.num_envs))
        return self._observe(self._cell, self._goal, self._at_goal, self._vel, self._hazpad)

    def _reset_rows(self, idx: np.ndarray) -> None:
        assert self._keys is not None
        counters = self._counters[idx]
        start, goal, hazard = self._place(self._keys[idx], counters)
        self._counters[idx] = counters + np.uint64(1)
        self._cell[idx] = start
        self._goal[idx] = goal
        self._at_goal[idx] = False
        self._vel[idx] = 0.0
        self._steps[idx] = 0
        self._finished[idx] = False
        padded = np.zeros((len(idx), self._n_padded), dtype=np.float32)
        padded[:, self._pad_of] = hazard
        self._hazpad[idx] = padded
        self._goal_row[idx] = self._row.take(goal)
        self._goal_col[idx] = self._col.take(goal)
        self._dist[idx] = np.abs(self._row.take(start) - self._goal_row[idx]) + np.abs(
            self._col.take(start) - self._goal_col[idx]
        )

    def _refresh_goal_tables(self) -> None:
        # Derived from cell and goal; kept as arrays so a step never recomputes them.
        self._goal_row = self._row.take(self._goal)
        self._goal_col = self._col.take(self._goal)
        self._dist = np.abs(self._row.take(self._cell) - self._goal_row) + np.abs(
            self._col.take(self._cell) - self._goal_col
        )

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every copy by one step; finished copies reset if ``autoreset``."""
        require_reset(self._keys is not None, "step")
        if self._finished.any():
            raise RuntimeError(
                "an episode has ended in a copy without autoreset; call reset() first"
            )
        config = self.config
        n_agents = self.n_agents
        act = check_actions(actions, self.num_envs, n_agents, _N_ACTIONS)

        bits = draw(self._keys, self._counters, self._agent_terms)  # [E, A] uint64
        step_counters = self._counters.copy()
        self._counters += np.uint64(1)
        slipped = uniform_below(bits, config.slip_prob)
        if config.slip_mode == "any":
            other = (act + 1 + ((bits >> np.uint64(32)) & np.uint64(3)).astype(np.int64)) % 5
        else:
            other = 0  # a slip keeps the agent in place
        active = ~self._at_goal
        executed = np.where(slipped, other, act) * active  # agents on their goal stay

        old = self._cell
        new = self._move.take(old * _N_ACTIONS + executed)  # [E, A]

        same = new[:, :, None] == new[:, None, :]  # [E, A, A]
        swapped = (new[:, :, None] == old[:, None, :]) & (old[:, :, None] == new[:, None, :])
        collided = ((same | swapped) & self._offdiag).any(axis=2)
        on_hazard = self._hazpad.take(self._pad_rows + self._pad_of.take(new)) > 0
        cost = (collided | on_hazard).astype(np.float32)

        new_row = self._row.take(new)
        new_col = self._col.take(new)
        dist = np.abs(new_row - self._goal_row) + np.abs(new_col - self._goal_col)
        reached = dist == 0
        reward = (
            config.progress_reward * (self._dist - dist)
            + config.goal_reward * (reached & active)
            - config.step_penalty * active
        ).astype(np.float32)

        if self.observe_velocity:
            self._vel = np.stack(
                (new_row - self._row.take(old), new_col - self._col.take(old)), axis=-1
            ).astype(np.float32)
        arrived = reached & active
        self._cell = new
        self._dist = dist
        self._at_goal = reached.copy()  # respawns clear it; `reached` stays this step's fact
        self._steps += 1
        if config.continuing:
            self._give_work(step_counters)
            terminated = np.zeros(self.num_envs, dtype=bool)  # work ends only at the cap
        else:
            terminated = reached.all(axis=1)  # [E]
        truncated = (self._steps >= self.max_steps) & ~terminated
        done = terminated | truncated
        episode_step = self._steps.copy()
        final_obs = self._observe(self._cell, self._goal, self._at_goal, self._vel, self._hazpad)
        obs = final_obs.copy()
        if done.any():
            if self.autoreset:
                idx = np.flatnonzero(done)
                self._reset_rows(idx)
                obs[idx] = self._observe(
                    self._cell[idx],
                    self._goal[idx],
                    self._at_goal[idx],
                    self._vel[idx],
                    self._hazpad[idx],
                )
            else:
                self._finished = done
        return StepResult(
            obs=obs,
            reward=reward,
            cost=cost,
            terminated=np.repeat(terminated[:, None], n_agents, axis=1),
            truncated=np.repeat(truncated[:, None], n_agents, axis=1),
            final_obs=final_obs,
            episode_step=episode_step,
            collision=collided,
            arrived=arrived,
        )

    def _give_work(self, counters: np.ndarray) -> None:
        """Respawn every agent on its goal (agent by agent, all copies at once)."""
        for agent in range(self.n_agents):
            rows = np.flatnonzero(self._at_goal[:, agent])
            if rows.size == 0:
                continue
            assert self._keys is not None
            given = self._respawn(rows, agent, self._keys[rows], counters[rows])
            done = rows[given]
            self._at_goal[done, agent] = False
        self._refresh_goal_tables()

    # ------------------------------------------------------------------ observations

    def _observe(
        self,
        cell: np.ndarray,
        goal: np.ndarray,
        at_goal: np.ndarray,
        vel: np.ndarray,
        hazpad: np.ndarray,
    ) -> np.ndarray:
        """Observations ``[R, A, D]`` of ``R`` copies given their arrays (rows of the state)."""
        n_rows, n_agents = cell.shape
        obs = np.empty((n_rows, n_agents, self.obs_dim), dtype=np.float32)
        row = self._rown.take(cell)
        col = self._coln.take(cell)
        obs[:, :, 0] = row
        obs[:, :, 1] = col
        obs[:, :, 2] = self._rown.take(goal) - row
        obs[:, :, 3] = self._coln.take(goal) - col
        k = 4
        if self.observe_velocity:
            obs[:, :, 4:6] = vel
            k = 6
        pad_rows = (np.arange(n_rows, dtype=np.int64) * self._n_padded)[:, None, None]
        obs[:, :, k : k + _VIEW * _VIEW] = hazpad.take(self._view[cell] + pad_rows)
        k += _VIEW * _VIEW
        if n_agents > 1:
            # Per other agent j (in agent order): drow, dcol (, vrow, vcol), interleaved.
            others = self._others
            width = 4 if self.observe_velocity else 2
            end = k + width * (n_agents - 1)
            obs[:, :, k:end:width] = row[:, others] - row[:, :, None]
            obs[:, :, k + 1 : end : width] = col[:, others] - col[:, :, None]
            if self.observe_velocity:
                obs[:, :, k + 2 : end : width] = vel[:, others, 0]
                obs[:, :, k + 3 : end : width] = vel[:, others, 1]
            k = end
        if self._nview:
            obs[:, :, k : k + self._nview**2] = self._neighbours(cell)
        obs[:, :, -1] = at_goal
        return obs

    def _neighbours(self, cell: np.ndarray) -> np.ndarray:
        """``[R, A, W * W]`` occupancy of the ``W x W`` window around each agent (row-major)."""
        width = self._nview
        half = width // 2
        others = self._others
        rows, cols = self._row.take(cell), self._col.take(cell)  # [R, A]
        drow = rows[:, others] - rows[:, :, None]  # [R, A, A - 1]
        dcol = cols[:, others] - cols[:, :, None]
        inside = (np.abs(drow) <= half) & (np.abs(dcol) <= half)
        index = (drow + half) * width + dcol + half
        view = np.zeros((*cell.shape, width * width), dtype=np.float32)
        r, a, j = np.nonzero(inside)
        view[r, a, index[r, a, j]] = 1.0
        return view

    def global_state(self) -> np.ndarray:
        """Global state ``[E, state_dim]`` float32 (the ``state()`` of the ParallelEnv view).

        Per agent: row and column, goal row and column (divided by ``size - 1``), on-goal flag,
        last move (if observed); then the full hazard map, row-major.
        """
        parts = [
            self._rown.take(self._cell),
            self._coln.take(self._cell),
            self._rown.take(self._goal),
            self._coln.take(self._goal),
            self._at_goal.astype(np.float32),
        ]
        if self.observe_velocity:
            parts += [self._vel[:, :, 0], self._vel[:, :, 1]]
        return np.concatenate([*parts, self._hazpad[:, self._pad_of]], axis=1)

    # ------------------------------------------------------------------ state and rendering

    def get_state(self) -> dict[str, Any]:
        """Copies of every array that determines the future (keys, counters, positions...)."""
        require_reset(self._keys is not None, "get_state")
        return {
            "name": self.name,
            "config": asdict(self.config),
            "keys": self._keys.copy(),
            "counters": self._counters.copy(),
            "cell": self._cell.copy(),
            "goal": self._goal.copy(),
            "at_goal": self._at_goal.copy(),
            "vel": self._vel.copy(),
            "steps": self._steps.copy(),
            "hazard": self._hazpad[:, self._pad_of] > 0,
            "finished": self._finished.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot (arrays are copied in)."""
        e, a = self.num_envs, self.n_agents
        shapes = {
            "keys": (e,),
            "counters": (e,),
            "cell": (e, a),
            "goal": (e, a),
            "at_goal": (e, a),
            "vel": (e, a, 2),
            "steps": (e,),
            "hazard": (e, self.n_cells),
            "finished": (e,),
        }
        check_snapshot(state, name=self.name, config=self.config, shapes=shapes)
        for key in ("cell", "goal"):
            cells = np.asarray(state[key])
            if cells.min() < 0 or cells.max() >= self.n_cells:
                raise ValueError(f"state[{key!r}] holds cells outside [0, {self.n_cells - 1}]")
        self._keys = np.array(state["keys"], dtype=np.uint64)
        self._counters = np.array(state["counters"], dtype=np.uint64)
        self._cell = np.array(state["cell"], dtype=np.int64)
        self._goal = np.array(state["goal"], dtype=np.int64)
        self._at_goal = np.array(state["at_goal"], dtype=bool)
        self._vel = np.array(state["vel"], dtype=np.float32)
        self._steps = np.array(state["steps"], dtype=np.int64)
        self._finished = np.array(state["finished"], dtype=bool)
        self._hazpad = np.zeros((e, self._n_padded), dtype=np.float32)
        self._hazpad[:, self._pad_of] = np.asarray(state["hazard"], dtype=bool)
        self._refresh_goal_tables()

    def observe(self) -> np.ndarray:
        """Observations ``[E, A, D]`` of the current state (as ``reset``/``step`` return them)."""
        return self._observe(self._cell, self._goal, self._at_goal, self._vel, self._hazpad)

    def render(self, index: int = 0) -> np.ndarray:
        """``[H, W, 3]`` uint8 frame of copy ``index``."""
        check_int("index", index, low=0, high=self.num_envs - 1)
        require_reset(self._keys is not None, "render")
        return draw_grid(
            size=self.size,
            cell_pixels=self.config.cell_pixels,
            floor=self._floor,
            hazard=self._hazpad[index, self._pad_of] > 0,
            hazard_colour=np.array(self.hazard_colour, dtype=np.uint8),
            cells=self._cell[index],
            goals=self._goal[index],
            colours=self._colours,
        )
