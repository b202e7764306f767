"""The shield on the real `hazard_grid` with its true dynamics as the world model.

`ExactHazardGridModel` decodes every row's positions, goals and at-goal flags from the joint
observation, loads them (with the episode's hazard layout) into a batched copy of the env via
`set_state`, and steps it: with `slip_prob = 0` that is the exact transition, cost and
termination of the task. The true lookahead risk of each candidate is then computed by
enumerating every joint action sequence with the same model.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from src.algos.shield.shield import Shield
from src.envs.registry import make_vector_env
from tests.algos.shield.shield_toys import shield_config

SIZE, N_AGENTS, N_ACTIONS = 6, 2, 5


class ExactHazardGridModel:
    """The slip-free dynamics of one hazard_grid layout as a one-member WorldModel."""

    ensemble_size = 1

    def __init__(self, reference: dict, obs_dim: int) -> None:
        self.reference = reference  # get_state() of a 1-copy env: its hazard layout
        self.obs_dim = obs_dim
        self.envs: dict[int, object] = {}

    def _env(self, rows: int):
        if rows not in self.envs:
            env = make_vector_env(
                "hazard_grid",
                num_envs=rows,
                seed=0,
                n_agents=N_AGENTS,
                size=SIZE,
                n_hazards=4,
                slip_prob=0.0,
                max_steps=10_000,
            )
            env.reset(seed=0)
            self.envs[rows] = env
        return self.envs[rows]

    def step(self, joint_obs: np.ndarray, actions: np.ndarray):
        rows = joint_obs.shape[0]
        obs = joint_obs.reshape(rows, N_AGENTS, self.obs_dim)
        row = np.rint(obs[..., 0] * (SIZE - 1)).astype(np.int64)
        col = np.rint(obs[..., 1] * (SIZE - 1)).astype(np.int64)
        goal_row = row + np.rint(obs[..., 2] * (SIZE - 1)).astype(np.int64)
        goal_col = col + np.rint(obs[..., 3] * (SIZE - 1)).astype(np.int64)
        env = self._env(rows)
        state = env.get_state()
        state["cell"] = row * SIZE + col
        state["goal"] = goal_row * SIZE + goal_col
        state["at_goal"] = obs[..., -1] > 0.5
        state["hazard"] = np.repeat(self.reference["hazard"], rows, axis=0)
        state["steps"] = np.zeros(rows, dtype=np.int64)
        state["finished"] = np.zeros(rows, dtype=bool)
        env.set_state(state)
        result = env.step(actions)
        return (
            result.final_obs.reshape(rows, -1),
            (result.cost > 0).astype(np.float32),
            result.terminated.any(axis=1).astype(np.float32),
        )

    def predict(self, joint_obs: torch.Tensor, joint_action: torch.Tensor):
        m, n, width = joint_obs.shape
        nxt, cost, done = self.step(
            joint_obs.reshape(m * n, width).numpy(), joint_action.reshape(m * n, -1).numpy()
        )
        return (
            torch.from_numpy(nxt).reshape(m, n, width),
            torch.from_numpy(cost).reshape(m, n, N_AGENTS),
            torch.from_numpy(done).reshape(m, n),
        )


class Fixed:
    """A fixed action distribution as log-probabilities (policy and opponent model)."""

    def __init__(self, probs):
        self.log_dist = torch.tensor(probs, dtype=torch.float32).log()

    def __call__(self, obs, agent):
        return self.log_dist.expand(obs.shape[0], -1).clone()

    def joint_logits(self, joint_obs):
        return self.log_dist.expand(joint_obs.shape[0], N_AGENTS, -1).clone()


def true_risk(model, joint, agent, first, lookahead, own, other):
    """P(agent's cost within `lookahead` steps), by enumerating every joint action sequence."""
    own, other = np.asarray(own, float), np.asarray(other, float)
    states, weights = joint[None, :], np.ones(1)
    risk = 0.0
    for depth in range(lookahead):
        if len(states) == 0:
            break
        next_states, next_weights = [], []
        for a_own, a_other in itertools.product(range(N_ACTIONS), repeat=2):
            w_own = float(a_own == first) if depth == 0 else own[a_own]
            w = w_own * other[a_other]
            if w == 0.0:
                continue
            actions = np.zeros((len(states), N_AGENTS), dtype=np.int64)
            actions[:, agent], actions[:, 1 - agent] = a_own, a_other
            nxt, cost, done = model.step(states, actions)
            hit = cost[:, agent] > 0
            risk += float((weights * w)[hit].sum())
            keep = ~hit & (done == 0)
            next_states.append(nxt[keep])
            next_weights.append((weights * w)[keep])
        states, weights = np.concatenate(next_states), np.concatenate(next_weights)
    return risk


@pytest.mark.parametrize(
    ("lookahead", "own", "other", "mode"),
    [
        (1, [0.2] * 5, [0.2] * 5, "uniform"),  # true risks are multiples of 1/5
        (3, [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], "model"),  # deterministic: risks 0 or 1
    ],
)
def test_exact_hazard_grid_model_never_picks_an_unsafe_action_when_a_safe_one_exists(
    lookahead, own, other, mode
):
    env = make_vector_env(
        "hazard_grid",
        num_envs=1,
        seed=3,
        n_agents=N_AGENTS,
        size=SIZE,
        n_hazards=4,
        slip_prob=0.0,
        max_steps=40,
    )
    obs = env.reset(seed=3)
    model = ExactHazardGridModel(env.get_state(), env.obs_dim)
    config = shield_config(
        shield_opponent_mode=mode,
        rollout_count=200,
        lookahead=lookahead,
        ensemble_size=1,
    )
    shield = Shield(
        config=config,
        world_model=model,
        opponent_model=Fixed(other),
        policy_logits=Fixed(own),
        n_agents=N_AGENTS,
        obs_dim=env.obs_dim,
        n_actions=N_ACTIONS,
        max_steps=40,
        seed=0,
    )
    rng = np.random.default_rng(0)
    checked = refused = 0
    for step in range(1, 25):
        logits = torch.from_numpy(rng.normal(size=(1, N_AGENTS, N_ACTIONS)).astype(np.float32))
        proposed = rng.integers(0, N_ACTIONS, size=(1, N_AGENTS))
        executed, _ = shield.filter(obs, proposed, logits, np.array([step]))
        joint = obs.reshape(-1)
        for agent in range(N_AGENTS):
            risks = np.array(
                [true_risk(model, joint, agent, c, lookahead, own, other) for c in range(N_ACTIONS)]
            )
            safe = risks <= config.max_risk
            chosen = executed[0, agent]
            if safe.any():
                checked += 1
                assert safe[chosen], (step, agent, risks, chosen)
                refused += int(not safe[proposed[0, agent]])
            else:
                assert risks[chosen] == risks.min()
        predicted = model.step(joint[None], executed)
        result = env.step(executed)
        # The model is the true dynamics: it predicts the real step exactly.
        np.testing.assert_array_equal(predicted[0][0], result.final_obs.reshape(-1))
        np.testing.assert_array_equal(predicted[1][0], (result.cost[0] > 0).astype(np.float32))
        obs = result.obs
    assert checked > 20 and refused > 0
