"""The exact risk floor of a terminating grid task: the least P(violation within H) of any team.

*Terminating tasks* (`continuing=False`: agents stay on their goal, the episode ends when all
are there) have a joint state small enough for an exact dynamic programme. For one layout the
joint state is the tuple of all agents' cells, with the true dynamics of `src.envs.grid_core`:
each agent's intended action is executed with probability `1 - slip_prob` and otherwise
replaced by each of the other four with `slip_prob / 4` (`slip_mode="any"`) or by staying
(`"stay"`), independently per agent; agents on their goal stay; moves off the grid stay; a step
is a *violation* if any agent ends it on a hazard, two agents end it in one cell, or two agents
swap cells. The first violation ends the computation, and the state where every agent is on
its goal is absorbing and safe. With H steps remaining, `solve_min_risk` computes

    V_H(s) = min over centralised, fully observed joint policies of P(violation within H steps)

and a minimising joint policy. Every policy of any method is one of these joint policies or a
mixture of them, so none has a lower violation probability from that start: V_H is a floor. The
pure minimum is typically reached by *parking* agents until truncation; `require_completion`
gives the floor of P(violation or episode not finished within H) instead. The expectation over
the `5 ** A` executed joint actions is done agent by agent (the slip noise factorises).
`policy_risk` runs the same recursion for a given policy, `monte_carlo_risk` rolls a policy
out in the real env as a cross-check.

*Continuing tasks* (new goals on arrival) have a joint state of every agent's cell *and goal*,
too large for this programme; their floor is the witness team's of `src.analysis.floor`, and
`grid_dynamics` refuses them. `benchmarks/risk_floor.py` prints the exact floors of the
evaluation layouts.

>>> encode_joint_actions(np.array([4, 3, 2])).item()
117
>>> decode_joint_actions(117, n_agents=3).tolist()
[4, 3, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from src.algos.shield.diagnostics import clone_env
from src.envs.base import VectorEnv

__all__ = [
    "N_ACTIONS",
    "JointModel",
    "RiskSolution",
    "build_model",
    "decode_joint_actions",
    "effective_slip_prob",
    "encode_joint_actions",
    "grid_dynamics",
    "model_from_env",
    "monte_carlo_risk",
    "policy_risk",
    "product_policy",
    "solve_min_risk",
]

N_ACTIONS = 5
"""Actions per agent: 0 stay, 1 up, 2 down, 3 left, 4 right (as in `grid_core`)."""
_DROW = np.array([0, -1, 1, 0, 0], dtype=np.int64)
_DCOL = np.array([0, 0, 0, -1, 1], dtype=np.int64)


def effective_slip_prob(slip_prob: float) -> float:
    """The slip probability the env really uses: its 32-bit threshold `round(p * 2**32) / 2**32`
    (it differs from `slip_prob` by less than `2**-33`)."""
    return round(float(slip_prob) * 2**32) / 2**32


def encode_joint_actions(actions: np.ndarray) -> np.ndarray:
    """Joint action index `sum_i a_i * 5 ** (A - 1 - i)` of per-agent actions `[..., A]`."""
    actions = np.asarray(actions, dtype=np.int64)
    return actions @ N_ACTIONS ** np.arange(actions.shape[-1] - 1, -1, -1, dtype=np.int64)


def decode_joint_actions(index: np.ndarray, n_agents: int) -> np.ndarray:
    """Per-agent actions `[..., A]` of joint action indices (inverse of the encoding)."""
    weights = N_ACTIONS ** np.arange(n_agents - 1, -1, -1, dtype=np.int64)
    return (np.asarray(index, dtype=np.int64)[..., None] // weights) % N_ACTIONS


@dataclass(frozen=True, eq=False)
class JointModel:
    """Exact transition model of one layout over the violation-free joint states.

    Joint state `s` is the C-order index of the agents' *local* cells `(k_0, ..., k_{A-1})` in
    `cells` (the allowed, non-hazard cells). Tuples with two agents in one cell are kept for
    simple indexing; they are never reached. Joint actions use the same C-order over agents.
    """

    size: int
    n_agents: int
    slip_prob: float
    """Slip probability used by the DP (see `effective_slip_prob`)."""
    cells: np.ndarray
    """Global indices `[K]` of the allowed cells (row * size + col), ascending."""
    local_of: np.ndarray
    """`[size * size]` local index of each global cell, `-1` for hazard cells."""
    goals: np.ndarray
    """Global goal cell `[A]` of each agent."""
    next_state: np.ndarray
    """`[S, 5 ** A]` int: joint state after executing a joint action, `-1` on a violation."""
    done: np.ndarray
    """`[S]` bool: every agent on its goal (absorbing, safe)."""
    slip_matrix: np.ndarray
    """`[5, 5]`: probability of executing action e (column) when intending a (row)."""
    slip_mode: str = "any"

    @property
    def n_states(self) -> int:
        """Number of joint states `S = K ** A`."""
        return int(self.done.size)

    @property
    def n_joint_actions(self) -> int:
        """Number of joint actions `5 ** A`."""
        return N_ACTIONS**self.n_agents

    def state_index(self, cells: np.ndarray) -> np.ndarray:
        """Joint state indices of global cells `[..., A]`; `-1` where a cell is a hazard."""
        local = self.local_of[np.asarray(cells, dtype=np.int64)]
        index = local @ len(self.cells) ** np.arange(self.n_agents - 1, -1, -1, dtype=np.int64)
        return np.where((local < 0).any(axis=-1), -1, index)

    def state_cells(self) -> np.ndarray:
        """Global cells `[S, A]` of every joint state (inverse of `state_index`)."""
        local = np.indices((len(self.cells),) * self.n_agents).reshape(self.n_agents, -1).T
        return self.cells[local]

    def expect(self, values: np.ndarray) -> np.ndarray:
        """`Q[s, a] = sum_e P(e | a) * W[s, e]` for `W = values` `[S, 5 ** A]`: one contraction
        per agent with `(1 - 5p/4) I + (p/4) 1 1^T` (or `(1 - p) I + p e_0^T` for stay-slips),
        done in place on a copy of `values`."""
        p, n_states, n_agents = self.slip_prob, values.shape[0], self.n_agents
        w = np.array(values, dtype=np.float64)
        for i in range(n_agents):
            # Agent i's executed action is the middle axis; sum it by slices (fast strides).
            shaped = w.reshape(n_states * N_ACTIONS**i, N_ACTIONS, N_ACTIONS ** (n_agents - 1 - i))
            if self.slip_mode == "stay":
                stay = shaped[:, 0].copy()
                shaped *= 1.0 - p
                shaped += p * stay[:, None]
                continue
            total = shaped[:, 0] + shaped[:, 1]
            for e in range(2, N_ACTIONS):
                total += shaped[:, e]
            total *= p / (N_ACTIONS - 1)
            shaped *= 1.0 - p - p / (N_ACTIONS - 1)
            shaped += total[:, None]
        return w

    def backup(
        self, future: np.ndarray, *, violation: float = 1.0, done: float = 0.0
    ) -> np.ndarray:
        """`Q[s, a] = E[W(s, e) | a]` with `W` = `violation` if the step is a violation, `done`
        if every agent is then on its goal, else `future` of the next state."""
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
    """The exact joint model of agents with goal cells `goals` on a grid with `hazard` (a bool
    `[size * size]` map; off-road cells for `intersection`). `slip_prob` is used as given; pass
    `effective_slip_prob` of it to match the env."""
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
        agent_step = np.where((cells == goals[i])[:, None], np.arange(k)[:, None], step)
        view = [1] * (2 * n_agents)
        view[i], view[n_agents + i] = k, N_ACTIONS
        nxt.append(agent_step.reshape(view))
        view[n_agents + i] = 1
        cur.append(np.arange(k).reshape(view))
    violation = np.zeros(shape, dtype=bool)
    index = np.zeros(shape, dtype=np.int64)
    for i in range(n_agents):
        violation |= nxt[i] < 0
        index = index * k + nxt[i]
        for j in range(i + 1, n_agents):
            violation |= (nxt[i] == nxt[j]) | ((nxt[i] == cur[j]) & (nxt[j] == cur[i]))
    n_states = k**n_agents
    next_state = np.where(violation, -1, index).reshape(n_states, N_ACTIONS**n_agents)
    on_goal_all = np.ones((k,) * n_agents, dtype=bool)
    for i, goal in enumerate(local_of[goals]):
        view = [1] * n_agents
        view[i] = k
        on_goal_all = on_goal_all & (np.arange(k) == goal).reshape(view)
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
        next_state=next_state.astype(np.int32 if n_states < 2**31 - 1 else np.int64),
        done=on_goal_all.reshape(-1),
        slip_matrix=slip_matrix,
        slip_mode=slip_mode,
    )


def grid_dynamics(env: VectorEnv) -> tuple[dict[str, Any], int, float, str]:
    """The state, grid size, effective slip probability and slip mode of a native grid env:
    with a copy's hazard map and goals from the state, the arguments of `build_model`.

    Refuses what the DP does not model: envs without a hazard map and goals, and continuing
    tasks, whose goals change on arrival (the joint state here is the agents' cells only).
    """
    state = env.get_state()
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
    return state, int(config["size"]), slip, str(config.get("slip_mode", "any"))


def model_from_env(env: VectorEnv, index: int = 0) -> JointModel:
    """The joint model of copy `index` of a native grid vector env (its current layout)."""
    state, size, slip, slip_mode = grid_dynamics(env)
    return build_model(
        state["hazard"][index], state["goal"][index], size=size, slip_prob=slip, slip_mode=slip_mode
    )


@dataclass(frozen=True, eq=False)
class RiskSolution:
    """Result of `solve_min_risk` for horizon `H`."""

    model: JointModel
    horizon: int
    value: np.ndarray
    """`[S]` float64: V_H, the minimum probability of a violation within H steps."""
    policy: np.ndarray
    """`[H, S]` joint action index to take at episode step t (H - t steps remaining)."""

    def first_action(self, cells: np.ndarray) -> np.ndarray:
        """Per-agent actions `[..., A]` minimising the risk from global `cells [..., A]`."""
        joint = self.policy[0][self.model.state_index(cells)]
        return decode_joint_actions(joint, self.model.n_agents)

    def risk(self, cells: np.ndarray) -> np.ndarray:
        """V_H at global `cells [..., A]` (1.0 for a state with an agent on a hazard)."""
        index = self.model.state_index(cells)
        return np.where(index < 0, 1.0, self.value[index])


def solve_min_risk(
    model: JointModel, horizon: int, *, require_completion: bool = False
) -> RiskSolution:
    """Minimum violation probability V_H over all joint policies, and a minimising policy.

    Backward induction: `V_0 = 0`; `V_h(s) = min_a sum_e P(e | a) W_h(s, e)` with `W_h(s, e) =
    1` if executing `e` in `s` is a violation, else `V_{h-1}` of the next state (0 if every
    agent is then on its goal). Ties go to the lowest joint action index. With
    `require_completion`, `V_0 = 1` off the goal states: P(violation, or not every agent on its
    goal after H steps), a floor for policies that must also finish within H steps.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    value = _terminal(model, require_completion)
    dtype = np.uint8 if model.n_joint_actions <= 256 else np.int32
    policy = np.zeros((horizon, model.n_states), dtype=dtype)
    for t in range(horizon - 1, -1, -1):
        q = model.backup(value)
        policy[t] = q.argmin(axis=1)
        value = np.take_along_axis(q, policy[t][:, None].astype(np.int64), axis=1)[:, 0]
        value[model.done] = 0.0
    return RiskSolution(model=model, horizon=horizon, value=value, policy=policy)


def _terminal(model: JointModel, require_completion: bool) -> np.ndarray:
    """`V_0`: 0 everywhere, or 1 off the all-on-goal states if completion is required."""
    if require_completion:
        return np.where(model.done, 0.0, 1.0)
    return np.zeros(model.n_states)


def _policy_shape(policy: np.ndarray) -> tuple[bool, bool]:
    """Whether a policy is stochastic (probabilities) and given per step."""
    stochastic = policy.dtype.kind == "f"
    return stochastic, policy.ndim == (3 if stochastic else 2)


def policy_risk(
    model: JointModel,
    policy: np.ndarray,
    horizon: int,
    *,
    require_completion: bool = False,
    quantity: str = "risk",
) -> np.ndarray:
    """V^pi_H `[S]`: exact violation probability within `horizon` steps under `policy`.

    `policy` is deterministic, joint action indices `[S]` (stationary) or `[H, S]` (index t =
    episode step), or stochastic, joint action probabilities `[S, 5 ** A]` or `[H, S, 5 ** A]`
    (`product_policy` of independent per-agent ones). `require_completion` as in
    `solve_min_risk`; `quantity="completion"` returns instead the probability that every agent
    is on its goal within H steps with no violation before.
    """
    if quantity not in ("risk", "completion"):
        raise ValueError(f"quantity must be 'risk' or 'completion', got {quantity!r}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    policy = np.asarray(policy)
    s, j = model.n_states, model.n_joint_actions
    stochastic, per_step = _policy_shape(policy)
    expected = ((horizon,) if per_step else ()) + ((s, j) if stochastic else (s,))
    if policy.shape != expected:
        raise ValueError(f"policy has shape {policy.shape}, expected {expected} for this model")
    if quantity == "completion":  # 0 after a violation, 1 once every agent is on its goal
        on_violation, on_done, value = 0.0, 1.0, model.done.astype(np.float64)
    else:
        on_violation, on_done, value = 1.0, 0.0, _terminal(model, require_completion)
    rows = np.arange(s)
    for t in range(horizon - 1, -1, -1):
        q = model.backup(value, violation=on_violation, done=on_done)
        pi = policy[t] if per_step else policy
        value = (q * pi).sum(axis=1) if stochastic else q[rows, pi.astype(np.int64)]
        value[model.done] = on_done
    return value


def product_policy(per_agent: np.ndarray) -> np.ndarray:
    """Joint action probabilities `[..., 5 ** A]` of independent per-agent `[..., A, 5]`."""
    per_agent = np.asarray(per_agent, dtype=np.float64)
    joint = per_agent[..., 0, :]
    for i in range(1, per_agent.shape[-2]):
        joint = (joint[..., :, None] * per_agent[..., i, None, :]).reshape(
            *per_agent.shape[:-2], -1
        )
    return joint


def monte_carlo_risk(
    env: VectorEnv,
    model: JointModel,
    policy: np.ndarray,
    *,
    index: int = 0,
    rollouts: int = 10_000,
    seed: int = 0,
    require_completion: bool = False,
) -> tuple[int, int]:
    """Roll `policy` out in the real env from copy `index`'s state; (violations, rollouts).

    The copy is cloned `rollouts` times with fresh streams (`diagnostics.clone_env`); `env` is
    not changed. `policy` is as for `policy_risk` with `H` = the steps left before the env's
    truncation; a rollout counts until its episode ends. With `require_completion` a rollout
    whose episode is truncated (not every agent on its goal) also counts as a failure.
    """
    horizon = int(env.max_steps - env.get_state()["steps"][index])
    policy = np.asarray(policy)
    stochastic, per_step = _policy_shape(policy)
    if per_step and policy.shape[0] != horizon:
        raise ValueError(
            f"policy covers {policy.shape[0]} steps, but the env truncates in {horizon}"
        )
    sim = clone_env(env, np.full(rollouts, index), seed=seed)
    rng = np.random.default_rng([seed, 1])
    alive = np.ones(rollouts, dtype=bool)
    violated = np.zeros(rollouts, dtype=bool)
    completed = np.zeros(rollouts, dtype=bool)
    for t in range(horizon):
        s = model.state_index(sim.get_state()["cell"])
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
        result = sim.step(decode_joint_actions(joint, model.n_agents))
        violated |= alive & (np.asarray(result.cost) > 0).any(axis=1)
        terminated = np.asarray(result.terminated).any(axis=1)
        ended = terminated | np.asarray(result.truncated).any(axis=1)
        alive &= ~ended
        completed |= terminated & ended
    failed = violated | ~completed if require_completion else violated
    return int(failed.sum()), rollouts
