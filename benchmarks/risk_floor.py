"""Risk floors of the native grid tasks: exact DP of terminating tasks, witness of continuing ones.

*Continuing tasks* (``continuing=True``, the default: new goals on arrival, traffic that keeps
flowing) have a joint state of every agent's cell *and goal*, too large for the DP below; their
floor is bounded from above by the careful centralised witness team of
:mod:`src.analysis.floor` on the evaluation layouts of every run, and ``--witness --write``
writes that table for ``config/config.yaml`` and ``config/paper.yaml`` into BENCHMARKS.md.
``spread`` (continuous positions, no DP) gets its witness floor in the same table: a careful
team that keeps the agents' coasting paths apart (:class:`src.envs.witness.SpreadTeam`).

*Terminating tasks* (``continuing=False``: agents stay on their goal, the episode ends when all
are there) get the exact floor. For one layout (grid size, hazard map, goals, slip probability)
the joint state is the tuple of all agents' cells; whether an agent is on its goal follows from
its cell. The true dynamics of :mod:`src.envs.grid_core` are modelled exactly: each agent's
intended action is executed with probability ``1 - slip_prob`` and otherwise replaced by each
of the other four with ``slip_prob / 4`` (``slip_mode="any"``) or by staying
(``slip_mode="stay"``), independently per agent; agents on their goal stay; moves off the
grid stay; a step is a *violation* if any agent ends it on a hazard, two agents end it in one
cell, or two agents swap cells. The first violation ends the computation (it is counted once),
and the state where every agent is on its goal is absorbing and safe (the episode terminates
there).

With ``H`` steps remaining, :func:`solve_min_risk` computes

    V_H(s) = min over centralised, fully observed joint policies of P(violation within H steps),

the team's minimum risk, together with the minimising (time-dependent, deterministic) joint
policy. Every policy of any method (decentralised, partially observed, learned) is one of these
joint policies or a mixture of them, so none has a lower episode violation probability from
that start: V_H is a floor. Only states without a violation are represented: tuples of
non-hazard cells (road cells in ``intersection``); any transition leaving that set is a
violation.

The pure minimum does not ask agents to reach their goals, and it is typically reached by
*parking* agents on cells without hazardous neighbours (the junction of ``intersection``, most
lattice cells of ``hazard_grid``) until truncation. ``require_completion=True`` gives the floor
of P(violation or episode not finished within H) instead, which bounds the violation
probability of policies that finish their episodes.

The DP is vectorised over all joint states and joint actions. The slip noise factorises over
agents, so the expectation over the ``5 ** A`` executed joint actions is done agent by agent
(``A`` contractions with a 5x5 matrix) rather than as a ``5 ** A x 5 ** A`` sum.

:func:`evaluate_policy` runs the same recursion for a *given* stochastic joint policy (V^pi),
and :func:`monte_carlo_risk` rolls a policy out in the real vector env for cross-checks.

Command line, over the evaluation layouts (reset seeds ``1_000_000 + i``) of the default
experiment (``env_params`` of ``config/config.yaml``, with ``--param`` overrides)::

    python -m benchmarks.risk_floor --witness --results results/default --write
    python -m benchmarks.risk_floor --env hazard_grid --episodes 200 \\
        --param continuing=false --param slip_mode=any --param n_hazards=8
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402 - must follow the thread pinning above
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from benchmarks.common import write_section  # noqa: E402
from src.envs import make_vector_env  # noqa: E402
from src.envs.base import VectorEnv  # noqa: E402

__all__ = [
    "EVAL_SEED_OFFSET",
    "N_ACTIONS",
    "JointModel",
    "LayoutFloor",
    "RiskSolution",
    "binomial_interval",
    "build_model",
    "decode_joint_actions",
    "default_env_params",
    "effective_slip_prob",
    "encode_joint_actions",
    "evaluate_policy",
    "evaluation_env",
    "hazard_only_floor",
    "layout_floors",
    "main",
    "model_from_env",
    "monte_carlo_risk",
    "product_policy",
    "solve_min_risk",
    "summarize",
]

N_ACTIONS = 5
"""Actions per agent: 0 stay, 1 up, 2 down, 3 left, 4 right (as in ``grid_core``)."""
EVAL_SEED_OFFSET = 1_000_000
"""Evaluation layout i is the episode reset with seed ``EVAL_SEED_OFFSET + i``."""
CONFIG_PATH = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
PAPER_PATH = CONFIG_PATH.with_name("paper.yaml")
_DROW = np.array([0, -1, 1, 0, 0], dtype=np.int64)
_DCOL = np.array([0, 0, 0, -1, 1], dtype=np.int64)


def effective_slip_prob(slip_prob: float) -> float:
    """The slip probability the env really uses: its 32-bit threshold ``round(p * 2**32) / 2**32``.

    It differs from ``slip_prob`` by less than ``2**-33``; the "other" action is exactly uniform.
    """
    return round(float(slip_prob) * 2**32) / 2**32


def encode_joint_actions(actions: np.ndarray) -> np.ndarray:
    """Joint action index ``sum_i a_i * 5 ** (A - 1 - i)`` of per-agent actions ``[..., A]``."""
    actions = np.asarray(actions, dtype=np.int64)
    n_agents = actions.shape[-1]
    weights = N_ACTIONS ** np.arange(n_agents - 1, -1, -1, dtype=np.int64)
    return actions @ weights


def decode_joint_actions(index: np.ndarray, n_agents: int) -> np.ndarray:
    """Per-agent actions ``[..., A]`` of joint action indices (inverse of the encoding)."""
    index = np.asarray(index, dtype=np.int64)
    weights = N_ACTIONS ** np.arange(n_agents - 1, -1, -1, dtype=np.int64)
    return (index[..., None] // weights) % N_ACTIONS


@dataclass(frozen=True, eq=False)
class JointModel:
    """Exact transition model of one layout over the violation-free joint states.

    Joint state ``s`` is the C-order index of the agents' *local* cells ``(k_0, ..., k_{A-1})``
    in ``cells`` (the allowed, non-hazard cells), ``s = sum_i k_i * K ** (A - 1 - i)``. Tuples
    with two agents in one cell are kept for simple indexing; they are never reached (entering
    them is a violation). Joint (executed or intended) actions use the same C-order over agents.
    """

    size: int
    """Side of the grid."""
    n_agents: int
    """Agents A of the model (a layout's agents, or a subset of them)."""
    slip_prob: float
    """Slip probability used by the DP (see :func:`effective_slip_prob`)."""
    cells: np.ndarray
    """Global indices ``[K]`` of the allowed cells (row * size + col), ascending."""
    local_of: np.ndarray
    """``[size * size]`` local index of each global cell, ``-1`` for hazard cells."""
    goals: np.ndarray
    """Global goal cell ``[A]`` of each agent."""
    next_state: np.ndarray
    """``[S, 5 ** A]`` int: joint state after executing a joint action, ``-1`` on a violation."""
    done: np.ndarray
    """``[S]`` bool: every agent on its goal (absorbing, safe)."""
    slip_matrix: np.ndarray
    """``[5, 5]``: probability of executing action e (column) when intending a (row)."""
    slip_mode: str = "any"
    """``any``: a slip is one of the other four actions; ``stay``: a slip keeps the agent."""

    @property
    def n_states(self) -> int:
        """Number of joint states ``S = K ** A``."""
        return int(self.done.size)

    @property
    def n_joint_actions(self) -> int:
        """Number of joint actions ``5 ** A``."""
        return N_ACTIONS**self.n_agents

    def state_index(self, cells: np.ndarray) -> np.ndarray:
        """Joint state indices of global cells ``[..., A]``; ``-1`` where a cell is a hazard."""
        cells = np.asarray(cells, dtype=np.int64)
        local = self.local_of[cells]
        weights = len(self.cells) ** np.arange(self.n_agents - 1, -1, -1, dtype=np.int64)
        index = local @ weights
        return np.where((local < 0).any(axis=-1), -1, index)

    def state_cells(self) -> np.ndarray:
        """Global cells ``[S, A]`` of every joint state (inverse of :meth:`state_index`)."""
        k = len(self.cells)
        local = np.indices((k,) * self.n_agents).reshape(self.n_agents, -1).T
        return self.cells[local]

    def expect(self, values: np.ndarray) -> np.ndarray:
        """``Q[s, a] = sum_e P(e | a) * W[s, e]`` for ``W = values`` ``[S, 5 ** A]``.

        The slip noise is a product over agents, so this is one contraction per agent, and the
        per-agent matrix is ``(1 - 5p/4) I + (p/4) 1 1^T``: each contraction is a sum over one
        axis plus a scaled copy, done in place on a copy of ``values``.
        """
        p = self.slip_prob
        keep, spread = 1.0 - p - p / (N_ACTIONS - 1), p / (N_ACTIONS - 1)
        w = np.array(values, dtype=np.float64)
        n_states, n_agents = values.shape[0], self.n_agents
        for i in range(n_agents):
            # Agent i's executed action is the middle axis; sum it by slices (fast strides).
            shaped = w.reshape(n_states * N_ACTIONS**i, N_ACTIONS, N_ACTIONS ** (n_agents - 1 - i))
            if self.slip_mode == "stay":
                # (1 - p) I + p e_0^T: the intended action, or staying (action 0).
                stay = shaped[:, 0].copy()
                shaped *= 1.0 - p
                shaped += p * stay[:, None]
                continue
            total = shaped[:, 0] + shaped[:, 1]
            for e in range(2, N_ACTIONS):
                total += shaped[:, e]
            total *= spread
            shaped *= keep
            shaped += total[:, None]
        return w

    def backup(
        self, future: np.ndarray, *, violation: float = 1.0, done: float = 0.0
    ) -> np.ndarray:
        """``Q[s, a] = E[W(s, e) | a]`` with ``W`` = ``violation`` if the step is a violation,
        ``done`` if every agent is then on its goal, else ``future`` of the next state.

        The defaults give P(violation now, or later with ``future`` risk of the next state).
        """
        padded = np.append(np.where(self.done, done, future), violation)  # index -1: violation
        return self.expect(padded[self.next_state])


def build_model(
    hazard: np.ndarray,
    goals: Sequence[int] | np.ndarray,
    *,
    size: int,
    slip_prob: float,
    slip_mode: str = "any",
) -> JointModel:
    """The exact joint model of agents with goal cells ``goals`` on a grid with ``hazard``.

    ``hazard`` is a bool ``[size * size]`` map (off-road cells for ``intersection``). Pass a
    subset of a layout's goals to model only those agents (their risk ignores the others).
    ``slip_prob`` is used as given; pass :func:`effective_slip_prob` of it to match the env.
    """
    hazard = np.asarray(hazard, dtype=bool).reshape(-1)
    goals = np.asarray(goals, dtype=np.int64).reshape(-1)
    n_cells = size * size
    if hazard.size != n_cells:
        raise ValueError(f"hazard has {hazard.size} cells, expected size**2 = {n_cells}")
    if goals.size < 1:
        raise ValueError("need at least one agent (goal)")
    if goals.min() < 0 or goals.max() >= n_cells or hazard[goals].any():
        raise ValueError(f"goals {goals.tolist()} must be non-hazard cells of the grid")
    if not 0.0 <= slip_prob <= 1.0:
        raise ValueError(f"slip_prob must be a probability, got {slip_prob}")
    if slip_mode not in ("any", "stay"):
        raise ValueError(f"slip_mode must be 'any' or 'stay', got {slip_mode!r}")
    n_agents = int(goals.size)
    cells = np.flatnonzero(~hazard)
    k = len(cells)
    local_of = np.full(n_cells, -1, dtype=np.int64)
    local_of[cells] = np.arange(k)
    rows, cols = np.divmod(cells, size)
    moved = np.clip(rows[:, None] + _DROW, 0, size - 1) * size + np.clip(
        cols[:, None] + _DCOL, 0, size - 1
    )  # [K, 5] global cell reached by executing each action
    step = local_of[moved]  # [K, 5] local cell reached, -1 on a hazard

    # Agent i along axes (i, A + i) of a [K]*A + [5]*A array.
    shape = (k,) * n_agents + (N_ACTIONS,) * n_agents
    cur, nxt = [], []
    for i in range(n_agents):
        on_goal = cells == goals[i]
        agent_step = np.where(on_goal[:, None], np.arange(k)[:, None], step)  # goal: stay
        view = [1] * (2 * n_agents)
        view[i], view[n_agents + i] = k, N_ACTIONS
        nxt.append(agent_step.reshape(view))
        cur_view = [1] * (2 * n_agents)
        cur_view[i] = k
        cur.append(np.arange(k).reshape(cur_view))
    violation = np.zeros(shape, dtype=bool)
    index = np.zeros(shape, dtype=np.int64)
    for i in range(n_agents):
        violation |= nxt[i] < 0
        index = index * k + nxt[i]
        for j in range(i + 1, n_agents):
            same = nxt[i] == nxt[j]
            swapped = (nxt[i] == cur[j]) & (nxt[j] == cur[i])
            violation |= same | swapped
    n_states = k**n_agents
    next_state = np.where(violation, -1, index).reshape(n_states, N_ACTIONS**n_agents)
    dtype = np.int32 if n_states < 2**31 - 1 else np.int64
    local_goals = local_of[goals]
    on_goal_all = np.ones((k,) * n_agents, dtype=bool)
    for i in range(n_agents):
        view = [1] * n_agents
        view[i] = k
        on_goal_all = on_goal_all & (np.arange(k) == local_goals[i]).reshape(view)
    p = float(slip_prob)
    if slip_mode == "stay":
        slip_matrix = np.eye(N_ACTIONS) * (1.0 - p)
        slip_matrix[:, 0] += p
    else:
        slip_matrix = np.full((N_ACTIONS, N_ACTIONS), p / (N_ACTIONS - 1))
        np.fill_diagonal(slip_matrix, 1.0 - p)
    return JointModel(
        size=size,
        n_agents=n_agents,
        slip_prob=p,
        cells=cells,
        local_of=local_of,
        goals=goals,
        next_state=next_state.astype(dtype),
        done=on_goal_all.reshape(-1),
        slip_matrix=slip_matrix,
        slip_mode=slip_mode,
    )


def model_from_env(
    env: VectorEnv, index: int = 0, agents: Sequence[int] | None = None
) -> JointModel:
    """The joint model of copy ``index`` of a native grid vector env (its current layout).

    ``agents`` selects a subset of the agents (default: all).
    """
    state = env.get_state()
    size, slip, slip_mode = _dp_dynamics(env, state)
    chosen = list(range(env.n_agents)) if agents is None else list(agents)
    return build_model(
        state["hazard"][index],
        state["goal"][index][chosen],
        size=size,
        slip_prob=slip,
        slip_mode=slip_mode,
    )


def _dp_dynamics(env: VectorEnv, state: dict[str, Any]) -> tuple[int, float, str]:
    """Grid size, effective slip probability and slip mode of a native grid env's state.

    Refuses what the DP does not model: envs without a hazard map and goals, and continuing
    tasks, whose goals change on arrival (the joint state here is the agents' cells only).
    """
    if "hazard" not in state or "goal" not in state:
        raise ValueError(f"{type(env).__name__} is not a native grid env")
    config = state["config"]
    if config.get("continuing", False):
        raise ValueError(
            f"{env.name} with continuing=True: goals change on arrival, which the joint state "
            "of this DP (agents' cells) does not hold; its floor is the witness team's "
            "(src.analysis.floor)"
        )
    slip = effective_slip_prob(config["slip_prob"])
    return int(config["size"]), slip, str(config.get("slip_mode", "any"))


@dataclass(frozen=True, eq=False)
class RiskSolution:
    """Result of :func:`solve_min_risk` for horizon ``H``."""

    model: JointModel
    """The model solved."""
    horizon: int
    """Steps H covered (the env's ``max_steps`` for an episode from its reset)."""
    value: np.ndarray
    """``[S]`` float64: V_H, the minimum probability of a violation within H steps."""
    policy: np.ndarray
    """``[H, S]`` joint action index to take at episode step t (H - t steps remaining)."""

    def first_action(self, cells: np.ndarray) -> np.ndarray:
        """Per-agent actions ``[..., A]`` minimising the risk from global ``cells [..., A]``."""
        return decode_joint_actions(
            self.policy[0][self.model.state_index(cells)], self.model.n_agents
        )

    def risk(self, cells: np.ndarray) -> np.ndarray:
        """V_H at global ``cells [..., A]`` (1.0 for a state with an agent on a hazard)."""
        index = self.model.state_index(cells)
        return np.where(index < 0, 1.0, self.value[index])


def solve_min_risk(
    model: JointModel, horizon: int, *, require_completion: bool = False
) -> RiskSolution:
    """Minimum violation probability V_H over all joint policies, and a minimising policy.

    Backward induction: ``V_0 = 0``; ``V_h(s) = min_a sum_e P(e | a) W_h(s, e)`` with
    ``W_h(s, e) = 1`` if executing ``e`` in ``s`` is a violation, else ``V_{h-1}`` of the next
    state (0 if every agent is then on its goal). Ties go to the lowest joint action index.

    The pure minimum may be reached by *parking* agents on cells without hazardous neighbours
    instead of finishing the episode. With ``require_completion`` the DP instead minimises
    P(violation, or not every agent on its goal after H steps) (``V_0 = 1`` off the goal
    states): a floor for policies that must also finish within H steps.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    value = _terminal(model, require_completion)
    action_dtype = np.uint8 if model.n_joint_actions <= 256 else np.int32
    policy = np.zeros((horizon, model.n_states), dtype=action_dtype)
    for t in range(horizon - 1, -1, -1):
        q = model.backup(value)
        policy[t] = q.argmin(axis=1)
        value = np.take_along_axis(q, policy[t][:, None].astype(np.int64), axis=1)[:, 0]
        value[model.done] = 0.0
    return RiskSolution(model=model, horizon=horizon, value=value, policy=policy)


def _terminal(model: JointModel, require_completion: bool) -> np.ndarray:
    """``V_0``: 0 everywhere, or 1 off the all-on-goal states if completion is required."""
    if require_completion:
        return np.where(model.done, 0.0, 1.0)
    return np.zeros(model.n_states)


def evaluate_policy(
    model: JointModel,
    policy: np.ndarray,
    horizon: int,
    *,
    require_completion: bool = False,
    quantity: str = "risk",
) -> np.ndarray:
    """V^pi_H ``[S]``: exact violation probability within ``horizon`` steps under ``policy``.

    ``policy`` is either deterministic, joint action indices ``[S]`` (stationary) or ``[H, S]``
    (index t = episode step, H - t steps remaining), or stochastic, joint action
    probabilities ``[S, 5 ** A]`` or ``[H, S, 5 ** A]``. Use :func:`product_policy` for
    independent per-agent distributions. Rows of unreachable states are ignored.
    ``require_completion`` counts an unfinished episode after H steps as a failure (as in
    :func:`solve_min_risk`). ``quantity="completion"`` returns instead the probability that
    every agent is on its goal within H steps with no violation before.
    """
    if quantity not in ("risk", "completion"):
        raise ValueError(f"quantity must be 'risk' or 'completion', got {quantity!r}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    policy = np.asarray(policy)
    s, j = model.n_states, model.n_joint_actions
    stochastic = policy.dtype.kind == "f"
    per_step = policy.ndim == (3 if stochastic else 2)
    expected = ((horizon,) if per_step else ()) + ((s, j) if stochastic else (s,))
    if policy.shape != expected:
        raise ValueError(f"policy has shape {policy.shape}, expected {expected} for this model")
    if quantity == "completion":
        # Success indicator: 0 after a violation, 1 once every agent is on its goal.
        on_violation, on_done = 0.0, 1.0
        value = model.done.astype(np.float64)
    else:
        on_violation, on_done = 1.0, 0.0
        value = _terminal(model, require_completion)
    rows = np.arange(s)
    for t in range(horizon - 1, -1, -1):
        q = model.backup(value, violation=on_violation, done=on_done)
        pi = policy[t] if per_step else policy
        value = (q * pi).sum(axis=1) if stochastic else q[rows, pi.astype(np.int64)]
        value[model.done] = on_done
    return value


def product_policy(per_agent: np.ndarray) -> np.ndarray:
    """Joint action probabilities ``[..., 5 ** A]`` of independent per-agent ``[..., A, 5]``."""
    per_agent = np.asarray(per_agent, dtype=np.float64)
    n_agents = per_agent.shape[-2]
    joint = per_agent[..., 0, :]
    for i in range(1, n_agents):
        joint = (joint[..., :, None] * per_agent[..., i, None, :]).reshape(
            *per_agent.shape[:-2], -1
        )
    return joint


def hazard_only_floor(
    hazard: np.ndarray,
    goals: Sequence[int] | np.ndarray,
    starts: np.ndarray,
    *,
    size: int,
    slip_prob: float,
    horizon: int,
    require_completion: bool = False,
    slip_mode: str = "any",
) -> tuple[np.ndarray, np.ndarray]:
    """``1 - prod_i (1 - p_i)`` ``[...]`` and the per-agent floors ``p_i`` ``[..., A]``.

    ``p_i`` is the floor of agent i alone with hazards only, from ``starts [..., A]``. Agents
    move independently, so without collisions the team's minimum is exactly the product form;
    collisions only add violations, so it is a lower bound of the joint floor.
    """
    starts = np.asarray(starts, dtype=np.int64)
    per_agent = np.stack(
        [
            solve_min_risk(
                build_model(hazard, [goal], size=size, slip_prob=slip_prob, slip_mode=slip_mode),
                horizon,
                require_completion=require_completion,
            ).risk(starts[..., [i]])
            for i, goal in enumerate(np.asarray(goals).tolist())
        ],
        axis=-1,
    )
    return 1.0 - np.prod(1.0 - per_agent, axis=-1), per_agent


def monte_carlo_risk(
    env: VectorEnv,
    model: JointModel,
    policy: np.ndarray,
    *,
    index: int = 0,
    rollouts: int = 10_000,
    seed: int = 0,
    agents: Sequence[int] | None = None,
    require_completion: bool = False,
) -> tuple[int, int]:
    """Roll ``policy`` out in the real env from copy ``index``'s state; (violations, rollouts).

    The copy is cloned ``rollouts`` times with fresh stream keys (as ``true_lookahead_risk`` in
    ``src.algos.shield.diagnostics``); ``env`` is not changed. ``policy`` is as for
    :func:`evaluate_policy` with ``H`` = the steps left before the env's truncation. Agents
    outside ``agents`` (default: all agents are modelled) stay put and their costs are ignored;
    a rollout counts until its episode ends. With ``require_completion`` a rollout whose episode
    is truncated (not every agent on its goal) also counts as a failure.
    """
    if require_completion and agents is not None:
        raise ValueError("require_completion needs every agent in the model")
    state = env.get_state()
    if "keys" not in state:
        raise ValueError(f"{type(env).__name__} is not a native grid env")
    chosen = np.arange(env.n_agents) if agents is None else np.asarray(agents, dtype=np.int64)
    if len(chosen) != model.n_agents:
        raise ValueError(f"model has {model.n_agents} agents, got agents {chosen.tolist()}")
    horizon = int(env.max_steps - state["steps"][index])
    policy = np.asarray(policy)
    stochastic = policy.dtype.kind == "f"
    per_step = policy.ndim == (3 if stochastic else 2)
    if per_step and policy.shape[0] != horizon:
        raise ValueError(
            f"policy covers {policy.shape[0]} steps, but the env truncates in {horizon}"
        )
    clone = {
        key: np.repeat(value[index : index + 1], rollouts, axis=0)
        if isinstance(value, np.ndarray) and value.shape[:1] == (env.num_envs,)
        else value
        for key, value in state.items()
    }
    rng = np.random.default_rng(seed)
    clone["keys"] = rng.integers(0, 2**63, size=rollouts, dtype=np.int64).astype(np.uint64)
    clone["finished"] = np.zeros(rollouts, dtype=bool)
    sim = type(env)(env.config, num_envs=rollouts, seed=0)
    sim.reset()
    sim.set_state(clone)
    alive = np.ones(rollouts, dtype=bool)
    violated = np.zeros(rollouts, dtype=bool)
    completed = np.zeros(rollouts, dtype=bool)
    actions = np.zeros((rollouts, env.n_agents), dtype=np.int64)
    for t in range(horizon):
        cells = sim.get_state()["cell"][:, chosen]
        s = model.state_index(cells)
        active = alive & ~violated  # after its first violation a rollout no longer matters
        if (s[active] < 0).any():
            raise RuntimeError("a rollout left the model's states without a violation")
        s = np.where(active, s, 0)
        pi = policy[t] if per_step else policy
        if stochastic:
            cdf = np.cumsum(pi[s], axis=1)
            u = rng.random((rollouts, 1)) * cdf[:, -1:]
            joint = np.minimum((u >= cdf).sum(axis=1), model.n_joint_actions - 1)
        else:
            joint = pi[s].astype(np.int64)
        actions[:, chosen] = decode_joint_actions(joint, model.n_agents)
        result = sim.step(actions)
        violated |= alive & (np.asarray(result.cost)[:, chosen] > 0).any(axis=1)
        ended = np.asarray(result.terminated).any(axis=1) | np.asarray(result.truncated).any(axis=1)
        alive &= ~ended
        completed |= np.asarray(result.terminated).any(axis=1) & ended
    failed = violated | ~completed if require_completion else violated
    return int(failed.sum()), rollouts


# ---------------------------------------------------------------------- evaluation layouts


def default_env_params(env_name: str, config_path: Path = CONFIG_PATH) -> dict[str, Any]:
    """``env_params[env_name]`` of the default experiment config (``config/config.yaml``)."""
    with open(config_path) as handle:
        config = yaml.safe_load(handle)
    return dict(config.get("env_params", {}).get(env_name, {}))


def evaluation_env(env_name: str, n_layouts: int, **params: Any) -> VectorEnv:
    """A vector env of ``n_layouts`` copies reset to evaluation layouts ``0 .. n_layouts - 1``."""
    env = make_vector_env(env_name, num_envs=n_layouts, seed=None, **params)
    env.reset(seed=[EVAL_SEED_OFFSET + i for i in range(n_layouts)])
    return env


@dataclass(frozen=True)
class LayoutFloor:
    """Floors of one evaluation layout (every value a lower bound of the episode risk)."""

    layout: int
    """Evaluation layout index i (reset seed ``1_000_000 + i``)."""
    joint: float
    """V_H of the exact joint DP of all agents: the minimum risk."""
    hazard_only: float
    """``1 - prod(1 - p_i)`` of the per-agent hazard-only floors (<= ``joint``)."""
    best_pair: float
    """Largest exact joint floor of two agents, ignoring the rest (<= ``joint``; NaN if
    A < 3 or pairs were skipped)."""
    completion: float
    """P(every agent on its goal within H steps, no violation) under the minimising policy
    (NaN unless asked for)."""
    solve: int
    """Index of the joint solve this layout's value comes from (shared by layouts with the same
    hazards and goals)."""
    seconds: float
    """Wall time of that joint solve."""


def layout_floors(
    env: VectorEnv,
    horizon: int | None = None,
    *,
    pairs: bool = True,
    keep: Sequence[int] = (),
    require_completion: bool = False,
    completion: bool = False,
) -> tuple[list[LayoutFloor], dict[int, RiskSolution]]:
    """Floors of every copy's current layout, and the joint solutions of the copies in ``keep``.

    Copies with the same hazards and goals share one solve (V_H covers every start state), so
    e.g. the 200 ``intersection`` layouts need at most 24 joint solves. Only the solutions of
    copies in ``keep`` are returned (each holds its model's transition table).
    ``require_completion`` is passed to every solve; ``completion`` also evaluates the
    probability that the minimising joint policy finishes the episode.
    """
    state = env.get_state()
    size, slip, slip_mode = _dp_dynamics(env, state)
    horizon = env.max_steps if horizon is None else horizon
    n_agents = env.n_agents
    groups: dict[bytes, list[int]] = {}
    for e in range(env.num_envs):
        groups.setdefault(state["hazard"][e].tobytes() + state["goal"][e].tobytes(), []).append(e)
    floors: dict[int, LayoutFloor] = {}
    kept: dict[int, RiskSolution] = {}
    for group, members in enumerate(groups.values()):
        hazard, goals = state["hazard"][members[0]], state["goal"][members[0]]
        starts = state["cell"][members]  # [M, A]
        begin = time.perf_counter()
        model = build_model(hazard, goals, size=size, slip_prob=slip, slip_mode=slip_mode)
        solution = solve_min_risk(model, horizon, require_completion=require_completion)
        seconds = time.perf_counter() - begin
        joint = solution.risk(starts)
        finished = np.full(len(members), np.nan)
        if completion:
            done = evaluate_policy(model, solution.policy, horizon, quantity="completion")
            finished = done[model.state_index(starts)]
        kept.update({e: solution for e in members if e in keep})
        del solution, model
        hazard_only, _ = hazard_only_floor(
            hazard,
            goals,
            starts,
            size=size,
            slip_prob=slip,
            horizon=horizon,
            require_completion=require_completion,
            slip_mode=slip_mode,
        )
        best_pair = np.full(len(members), np.nan)
        if pairs and n_agents > 2:
            best_pair = np.max(
                [
                    solve_min_risk(
                        build_model(
                            hazard, goals[[i, j]], size=size, slip_prob=slip, slip_mode=slip_mode
                        ),
                        horizon,
                        require_completion=require_completion,
                    ).risk(starts[:, [i, j]])
                    for i in range(n_agents)
                    for j in range(i + 1, n_agents)
                ],
                axis=0,
            )
        for m, e in enumerate(members):
            floors[e] = LayoutFloor(
                layout=e,
                joint=float(joint[m]),
                hazard_only=float(hazard_only[m]),
                best_pair=float(best_pair[m]),
                completion=float(finished[m]),
                solve=group,
                seconds=seconds,
            )
    return [floors[e] for e in range(env.num_envs)], kept


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Mean, median, 90th percentile, max, and the fractions above 0.05 and 0.1."""
    array = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(array.mean()),
        "median": float(np.median(array)),
        "p90": float(np.quantile(array, 0.9)),
        "max": float(array.max()),
        "frac>0.05": float((array > 0.05).mean()),
        "frac>0.1": float((array > 0.1).mean()),
    }


def binomial_interval(k: int, n: int, confidence: float = 0.99) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a success probability from k of n."""
    from scipy.stats import beta

    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` env parameter overrides (values read as YAML: 8, 0.1, false, any)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--param {item!r}: expected KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    return overrides


def witness_rows(config_path: Path, results: Path | None = None) -> list[dict[str, Any]]:
    """The witness floor (``src.analysis.floor``) of every env of a config that has a witness
    (the continuing grid tasks and ``spread``).

    The reference goal rate is unconstrained ippo's evaluation goals at the floor's horizon
    when ``results`` holds the experiment's ``tables/eval.parquet`` with ippo rows, else the
    greedy team's.
    """
    from src.analysis.floor import FEASIBLE_FRACTION, feasible, floor_settings, task_floor
    from src.config.workflow import check_workflow_config

    with open(config_path, encoding="utf-8") as handle:
        workflow_config = check_workflow_config(yaml.safe_load(handle))
    evaluation = None
    if results is not None and (results / "tables" / "eval.parquet").exists():
        import pandas as pd

        evaluation = pd.read_parquet(results / "tables" / "eval.parquet")
    rows = []
    for env_name in workflow_config["envs"]:
        settings = floor_settings(workflow_config, env_name)
        begin = time.perf_counter()
        floor = task_floor(**settings)
        seconds = time.perf_counter() - begin
        if floor.method == "none":
            continue
        ippo_goals = math.nan
        if evaluation is not None:
            ippo = evaluation[
                (evaluation["env"] == env_name)
                & (evaluation["algo"] == "ippo")
                & (evaluation["horizon"] == floor.horizon)
            ]
            if len(ippo) and ippo["mean_goals"].notna().all():
                ippo_goals = float(np.average(ippo["mean_goals"], weights=ippo["n"]))
        max_risk = float(workflow_config["base"]["max_risk"])
        rows.append(
            {
                "config": config_path.name,
                "env": env_name,
                "agents": settings["env_params"]["n_agents"],
                "env_params": settings["env_params"],
                "floor": floor,
                "max_risk": max_risk,
                "bound": FEASIBLE_FRACTION * max_risk,
                "ippo_goals": ippo_goals,
                "feasible": feasible(floor, max_risk=max_risk, ippo_goals=ippo_goals),
                "seconds": seconds,
            }
        )
    return rows


def witness_markdown(rows: Sequence[dict[str, Any]], command: str) -> str:
    """The section of BENCHMARKS.md: one line per (config, env)."""
    lines = [
        f"Measured on {time.strftime('%Y-%m-%d', time.gmtime())} by `{command}`.",
        "",
        "| config | env | agents | H | layouts | careful team P(viol. ≤ H) [upper] | max_risk / 4 "
        "| goals: careful / reference | careless (greedy) P(viol. ≤ H) | feasible |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        floor = row["floor"]
        ippo = not math.isnan(row["ippo_goals"])
        reference = row["ippo_goals"] if ippo else floor.greedy_goals
        label = "ippo" if ippo else "greedy"
        lines.append(
            f"| {row['config']} | {row['env']} | {row['agents']} | {floor.horizon} | "
            f"{floor.episodes} | {floor.p_violation:.3f} [{floor.p_upper:.4f}] | "
            f"{row['bound']:.4f} | {floor.goals:.1f} / {reference:.1f} ({label}) = "
            f"{floor.goals / reference:.2f} | {floor.greedy_p_violation:.3f} | "
            f"{'yes' if row['feasible'] else 'no'} |"
        )
    spread = [row for row in rows if row["env"] == "spread"]
    if spread:
        spawns = ", ".join(
            f"`spawn: {row['env_params'].get('spawn', 'mpe2')}` in {row['config']}"
            for row in spread
        )
        lines += [
            "",
            "spread: goals are the landmarks covered (an agent closer than 0.1) at each step, "
            "summed over the episode; the reference is the careless team's, which heads for the "
            "same landmarks ignoring the others (spread reports no arrivals, so ippo has no "
            f"goals to compare with). Agents spawn with {spawns}.",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Floors over the evaluation layouts: the exact DP of terminating tasks, or the witness."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["hazard_grid", "intersection", "both"], default="both")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation layouts")
    parser.add_argument("--horizon", type=int, default=None, help="default: env max_steps")
    parser.add_argument("--config", type=Path, default=CONFIG_PATH)
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env parameter over the config's, e.g. continuing=false slip_mode=any",
    )
    parser.add_argument("--no-pairs", action="store_true", help="skip the 2-agent floors")
    parser.add_argument("--mc-layouts", type=int, default=0, help="layouts to cross-check by MC")
    parser.add_argument("--mc-rollouts", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the MC rollout keys")
    parser.add_argument(
        "--require-completion",
        action="store_true",
        help="minimise P(violation or episode not finished within H) instead",
    )
    parser.add_argument(
        "--completion",
        action="store_true",
        help="also report P(episode finished) under the minimising policy",
    )
    parser.add_argument(
        "--witness",
        action="store_true",
        help="witness floors of every env with a witness (continuing grid tasks, spread) of "
        "config.yaml and paper.yaml",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="the default experiment's results folder (ippo's goals as the reference)",
    )
    parser.add_argument("--write", action="store_true", help="write the BENCHMARKS.md section")
    args = parser.parse_args(argv)
    if args.witness:
        rows = witness_rows(CONFIG_PATH, args.results) + witness_rows(PAPER_PATH)
        command = "python -m benchmarks.risk_floor --witness" + (
            f" --results {args.results}" if args.results else ""
        )
        markdown = witness_markdown(rows, command)
        print(markdown)
        if args.write:
            write_section("risk_floor", markdown)
        return 0
    overrides = _parse_params(args.param)
    names = ["hazard_grid", "intersection"] if args.env == "both" else [args.env]
    for name in names:
        params = {**default_env_params(name, args.config), **overrides}
        env = evaluation_env(name, args.episodes, **params)
        horizon = env.max_steps if args.horizon is None else args.horizon
        begin = time.perf_counter()
        mc = range(min(args.mc_layouts, env.num_envs))
        floors, kept = layout_floors(
            env,
            horizon,
            pairs=not args.no_pairs,
            keep=mc,
            require_completion=args.require_completion,
            completion=args.completion,
        )
        total = time.perf_counter() - begin
        solve_times = list({f.solve: f.seconds for f in floors}.values())
        print(
            f"{name} {params} H={horizon}{' require_completion' if args.require_completion else ''}"
            f": {args.episodes} layouts, {len(solve_times)} joint "
            f"solves of {np.mean(solve_times):.3f} s each (mean; max {max(solve_times):.3f} s), "
            f"{total:.1f} s in all including per-agent and pair floors"
        )
        for label, values in (
            ("joint floor (minimum risk)", [f.joint for f in floors]),
            ("hazard-only floor 1-prod(1-p_i)", [f.hazard_only for f in floors]),
            ("best 2-agent joint floor", [f.best_pair for f in floors]),
            ("P(finish) of minimising policy", [f.completion for f in floors]),
        ):
            if np.isnan(values).any() or (label.startswith("best") and env.n_agents <= 2):
                continue
            stats = summarize(values)
            if label.startswith("P(finish)"):
                stats = {"mean": stats["mean"], "median": stats["median"], "min": min(values)}
            print(f"  {label:32s} " + "  ".join(f"{k} {v:.4f}" for k, v in stats.items()))
        if mc and horizon != env.max_steps:
            print("  (no MC cross-check: the env truncates at max_steps, not at --horizon)")
            mc = range(0)
        for e in mc:
            solution = kept[e]
            k, n = monte_carlo_risk(
                env,
                solution.model,
                solution.policy,
                index=e,
                rollouts=args.mc_rollouts,
                seed=args.seed + e,
                require_completion=args.require_completion,
            )
            low, high = binomial_interval(k, n, 0.99)
            value = floors[e].joint
            verdict = "agrees" if low <= value <= high else "DISAGREES"
            print(
                f"  MC layout {e}: V_H {value:.5f}, empirical {k}/{n} = {k / n:.5f}, "
                f"99% CI [{low:.5f}, {high:.5f}] {verdict}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
