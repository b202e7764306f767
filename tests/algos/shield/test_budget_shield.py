"""The shield (budget.BudgetShield) and its safety critic against exact answers.

With an exact model of the least risk-to-go (computed by dynamic programming on the true
dynamics of a small hazard_grid), the shield's calibrated risk equals the true risk of every
joint action in every state, and every joint action the shield executes keeps the risk-to-go
within the allowance (or is one no single agent's change makes safer) whatever the policy
proposes. A collision of two individually safe moves is refused. The safety critic's value
iteration finds the least risk-to-go of a small known model, its backup's descent bounds the
exact minimum from above, and the calibration factor covers a miscalibrated model at its
stated confidence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from src.algos.shield.bounds import calibration_factor, risk_bound
from src.algos.shield.budget import BudgetShield
from src.algos.shield.critic import RiskCritic
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.search import joint_actions
from src.analysis.exact_floor import encode_joint_actions, model_from_env, solve_min_risk
from src.envs.registry import make_vector_env
from tests.algos.shield.shield_toys import shield_config

SIZE, N_AGENTS, N_ACTIONS = 5, 2, 5


class ExactQ:
    """A one-member 'world model' whose step ends the imagination with the true least
    risk-to-go Q*(s, a) of the layout as its risk: the shield's U(s, a) is then exactly Q*."""

    ensemble_size = 1
    cost_dim = 1

    def __init__(self, env: object, horizon: int = 300) -> None:
        self.model = model_from_env(env, index=0)
        solution = solve_min_risk(self.model, horizon)
        self.q = self.model.backup(solution.value)  # [S, K], K in the DP's joint order
        self.order = encode_joint_actions(joint_actions(N_AGENTS, N_ACTIONS).numpy())

    def cells(self, joint_obs: torch.Tensor) -> np.ndarray:
        """Global cell of every agent from hazard_grid observations [..., A*D]."""
        obs = joint_obs.reshape(*joint_obs.shape[:-1], N_AGENTS, -1).numpy()
        rows = np.rint(obs[..., 0] * (SIZE - 1)).astype(np.int64)
        cols = np.rint(obs[..., 1] * (SIZE - 1)).astype(np.int64)
        return rows * SIZE + cols

    def q_star(self, joint_obs: torch.Tensor, joint_action: torch.Tensor) -> np.ndarray:
        state = self.model.state_index(self.cells(joint_obs))
        action = encode_joint_actions(joint_action.numpy())
        return np.where(state >= 0, self.q[np.maximum(state, 0), action], 1.0)

    def predict(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        risk = torch.from_numpy(self.q_star(joint_obs, joint_action)).float()
        return joint_obs.clone(), risk.unsqueeze(-1), torch.ones(joint_obs.shape[:-1])


def _env(num_envs: int, seed: int = 3) -> object:
    env = make_vector_env(
        "hazard_grid",
        num_envs=num_envs,
        seed=None,
        n_agents=N_AGENTS,
        size=SIZE,
        n_hazards=3,
        max_steps=60,
        # The exact model (src.analysis.exact_floor) is of the original dynamics.
        slip_mode="any",
        continuing=False,
        observe_moves=False,
        neighbour_view=0,
    )
    env.reset(seed=[seed] * num_envs)
    return env


def _shield(model: ExactQ, **overrides: object) -> BudgetShield:
    settings = {"horizon": 300, **overrides}
    config = shield_config(ensemble_size=1, **settings)
    return BudgetShield(
        config=config,
        world_model=model,
        critic=_critic(),
        n_agents=N_AGENTS,
        obs_dim=model_obs_dim(),
        n_actions=N_ACTIONS,
    )


def _critic(**overrides: object) -> RiskCritic:
    """A one-member critic of the layout's dimensions (the exact tests never fit it)."""
    settings = {"hidden": (8,), "learning_rate": 1e-3, "tau": 0.1, "horizon": 300, "seed": 0}
    settings.update(overrides)
    return RiskCritic(
        n_agents=N_AGENTS,
        obs_dim=model_obs_dim(),
        n_actions=N_ACTIONS,
        ensemble_size=1,
        **settings,
    )


def model_obs_dim() -> int:
    return _env(1).obs_dim


def test_certified_risk_is_the_true_risk_of_every_joint_action_in_every_state():
    env = _env(1)
    oracle = ExactQ(env)
    shield = _shield(oracle)
    state = env.get_state()
    options = joint_actions(N_AGENTS, N_ACTIONS)
    checked = 0
    # Every placement of the two agents on distinct non-hazard cells of the layout.
    free = np.flatnonzero(~state["hazard"][0])
    for a in free:
        for b in free:
            if a == b:
                continue
            state["cell"] = np.array([[a, b]])
            env.set_state(state)
            joint = torch.from_numpy(env.observe().reshape(1, -1))
            with torch.inference_mode():
                certified = shield.certified(
                    joint.repeat(len(options), 1), options, torch.full((len(options),), 60.0)
                ).numpy()
            truth = oracle.q_star(joint.repeat(len(options), 1), options)
            np.testing.assert_allclose(certified, truth, atol=1e-6)
            checked += 1
    assert checked == len(free) * (len(free) - 1)


def test_every_executed_action_keeps_the_risk_to_go_allowed_or_no_change_lowers_it():
    max_risk = 0.1
    env = _env(400)
    oracle = ExactQ(env)
    shield = _shield(oracle, max_risk=max_risk)
    shield.reset(400, 0)
    rng = np.random.default_rng(2)
    state = env.get_state()
    state["keys"] = rng.integers(0, 2**63, size=400, dtype=np.int64).astype(np.uint64)
    env.set_state(state)
    obs = env.observe()
    options = joint_actions(N_AGENTS, N_ACTIONS)
    judged = screened = 0
    for t in range(20):
        proposed = rng.integers(0, N_ACTIONS, size=(400, N_AGENTS))
        executed, _ = shield.filter(
            obs, proposed, torch.zeros(400, N_AGENTS, N_ACTIONS), np.full(400, t + 1)
        )
        joint = torch.from_numpy(obs.reshape(400, -1))
        taken = oracle.q_star(joint, torch.from_numpy(executed))
        every = oracle.q_star(
            joint.repeat_interleave(len(options), dim=0), options.repeat(400, 1)
        ).reshape(400, -1)
        # Within the allowance, or no change of one agent's action lowers the risk.
        over = taken > max_risk + 1e-9
        index = (executed * N_ACTIONS ** np.arange(N_AGENTS - 1, -1, -1)).sum(axis=1)
        for agent in range(N_AGENTS):
            weight = N_ACTIONS ** (N_AGENTS - 1 - agent)
            base = index - executed[:, agent] * weight
            neighbours = base[:, None] + np.arange(N_ACTIONS)[None, :] * weight
            lowest = np.take_along_axis(every, neighbours, axis=1).min(axis=1)
            assert np.all(taken[over] <= lowest[over] + 1e-9)
        passed = oracle.q_star(joint, torch.from_numpy(proposed)) <= max_risk
        assert np.array_equal(executed[passed], proposed[passed])  # allowed proposals pass
        screened += int(np.isnan(shield.last.safest).sum())
        judged += int((~np.isnan(shield.last.safest)).sum())
        obs = env.step(executed).obs
    assert screened > 0 and judged > 0  # both paths of the decision were taken


def test_a_collision_of_two_individually_safe_moves_is_refused():
    env = _env(1)
    oracle = ExactQ(env)
    shield = _shield(oracle, max_risk=0.3)
    state = env.get_state()
    free = set(np.flatnonzero(~state["hazard"][0]).tolist())
    # Two agents two cells apart on a row, with a free cell between them and free cells
    # around: each moving towards the middle is safe alone, together they collide.
    for left in sorted(free):
        col = left % SIZE
        middle, right = left + 1, left + 2
        if col + 2 < SIZE and {middle, right} <= free and state["goal"][0][0] != left:
            break
    else:
        pytest.fail("no suitable cells in the layout")
    state["cell"] = np.array([[left, right]])
    env.set_state(state)
    obs = env.observe()
    right_move, left_move = 4, 3
    solo = oracle.q_star(
        torch.from_numpy(obs.reshape(1, -1)).repeat(2, 1),
        torch.tensor([[right_move, 0], [0, left_move]]),
    )
    together = oracle.q_star(
        torch.from_numpy(obs.reshape(1, -1)), torch.tensor([[right_move, left_move]])
    )
    assert together[0] > 0.5 > max(solo)
    shield.reset(1, 0)
    executed, intervened = shield.filter(
        obs,
        np.array([[right_move, left_move]]),
        torch.zeros(1, N_AGENTS, N_ACTIONS),
        np.array([1]),
    )
    assert intervened.any() and executed.tolist() != [[right_move, left_move]]
    joint = torch.from_numpy(obs.reshape(1, -1))
    assert float(oracle.q_star(joint, torch.from_numpy(executed))[0]) < 0.5


class ChainModel:
    """A known model on a chain of cells 0..4 (obs: the cell), one agent, two actions.

    Action 0 stays; action 1 moves right. Staying in cell 0 risks 0.2; moving risks 0.05;
    cell 4 ends the episode. Least risk-to-go: stay in cells 1-3 (0), and in cell 0 move once
    (0.05), then stay.
    """

    ensemble_size = 2
    cost_dim = 1

    def predict(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cell = joint_obs[..., 0]
        move = joint_action[..., 0].float()
        next_cell = torch.clamp(cell + move, max=4.0)
        risk = torch.where(move > 0, torch.full_like(cell, 0.05), (cell == 0).float() * 0.2)
        done = (next_cell == 4).float()
        return next_cell.unsqueeze(-1), risk.unsqueeze(-1), done


def _known_model_critic(*, n_agents: int, horizon: int) -> RiskCritic:
    """A small critic of one-number observations and two actions, for the known models."""
    return RiskCritic(
        n_agents=n_agents,
        obs_dim=1,
        n_actions=2,
        ensemble_size=2,
        hidden=(32, 32),
        learning_rate=3e-3,
        tau=0.2,
        horizon=horizon,
        seed=0,
    )


def _standing_replay(cells: torch.Tensor) -> TransitionReplay:
    """A replay of the joint observations `cells` [N, A] (one number per agent), each a
    transition to itself with action 0, no cost and no end: the states the critic learns on."""
    n, agents = cells.shape
    replay = TransitionReplay(capacity=400, n_agents=agents, obs_dim=1, valid_fraction=0.1, seed=0)
    zeros = torch.zeros(n, agents)
    replay.add(
        obs=cells,
        action=torch.zeros(n, agents, dtype=torch.int64),
        next_obs=cells,
        cost=zeros,
        done=zeros[:, 0],
    )
    return replay


def test_value_iteration_finds_the_least_risk_to_go_of_a_known_model():
    critic = _known_model_critic(n_agents=1, horizon=8)
    replay = _standing_replay(torch.arange(5, dtype=torch.float32).repeat(60)[:, None])
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        critic.fit(replay, ChainModel(), steps=20, batch_size=32, generator=generator)
    cells = torch.arange(4, dtype=torch.float32)[:, None]
    with torch.no_grad():
        values = critic.all_members(cells, 8).numpy()
        one_step = critic.all_members(cells, 1).numpy()
    # From cell 0: move once (0.05), then stay; elsewhere: stay (0). With one step left in
    # cell 0, moving (0.05) still beats staying (0.2).
    np.testing.assert_allclose(values, [[0.05, 0.0, 0.0, 0.0]] * 2, atol=0.01)
    np.testing.assert_allclose(one_step[:, 0], [0.05, 0.05], atol=0.01)


@pytest.mark.parametrize(("mode", "coverage"), [("frequentist", 0.88), ("bayesian", 0.83)])
def test_calibration_factor_covers_an_optimistic_model_at_its_confidence(mode, coverage):
    # The model says 0.02; the truth is 0.04. With delta = 0.1 the scaled prediction must
    # reach the truth in at least 90% of repetitions for the Clopper-Pearson bound (a
    # frequentist guarantee; 0.88 allows for the 400 repetitions' own noise), and about as
    # often for the Beta posterior's quantile (a credible bound, not a coverage guarantee).
    rng = np.random.default_rng(0)
    repeats, covered = 400, 0
    for _ in range(repeats):
        observed = rng.random(500) < 0.04
        c = calibration_factor(
            predicted=np.full(500, 0.02), observed=observed, delta=0.1, mode=mode
        )
        covered += c * 0.02 >= 0.04
    assert covered / repeats >= coverage
    # A pessimistic model is scaled down, but never below the upper bound of the evidence.
    c = calibration_factor(
        predicted=np.full(500, 0.5), observed=np.zeros(500), delta=0.1, mode=mode
    )
    assert 0.0 < c < 0.05
    assert math.isclose(c * 0.5, float(risk_bound(k=0, n=500, delta=0.1, mode=mode)))
    assert math.isclose(
        calibration_factor(predicted=[0.1] * 10, observed=[1] * 10, delta=0.05, mode="mean"), 10.0
    )


def test_the_backups_descent_bounds_the_exact_minimum_from_above_and_mostly_meets_it():
    # With the exact model as the 'world model' (every step ends the imagination, its risk is
    # Q*), the backup target is the descent's least Q*(s, a); the exact minimum over every
    # joint action is Q*'s own.
    env = _env(1)
    oracle = ExactQ(env)
    state = env.get_state()
    free = np.flatnonzero(~state["hazard"][0])
    observations = []
    for a in free:
        for b in free:
            if a != b:
                state["cell"] = np.array([[a, b]])
                env.set_state(state)
                observations.append(env.observe().reshape(-1))
    obs = torch.from_numpy(np.stack(observations)).float().unsqueeze(0)  # [1, B, J]
    remaining = torch.full(obs.shape[:2], 5.0)
    with torch.no_grad():
        found = _critic().backup_targets(oracle, obs, remaining)[0].double()
    every = joint_actions(N_AGENTS, N_ACTIONS)  # [K, A]
    states = obs[0].repeat_interleave(len(every), dim=0)
    exact = oracle.q_star(states, every.repeat(obs.shape[1], 1)).reshape(obs.shape[1], -1)
    exact = torch.from_numpy(exact.min(axis=1)).float().double()
    assert torch.all(found >= exact - 1e-7)
    assert (found <= exact + 1e-7).float().mean() >= 0.9


def test_q_is_the_worst_member_of_the_one_step_recursion():
    """q from the option-wise prediction equals the recursion written out on the members'
    predicted successors: r + (1 - r)(1 - d) V(s', h - 1), the worst member's."""
    from src.algos.shield.world_model import TeamWorldModel

    a, d, n, members = 2, 4, 3, 2
    model = TeamWorldModel(
        n_agents=a,
        obs_dim=d,
        n_actions=n,
        ensemble_size=members,
        hidden=(8,),
        learning_rate=1e-3,
        seed=0,
    )
    critic = RiskCritic(
        n_agents=a,
        obs_dim=d,
        n_actions=n,
        ensemble_size=members,
        hidden=(8,),
        learning_rate=1e-3,
        tau=0.1,
        horizon=10,
        seed=1,
    )
    with torch.no_grad():  # away from the critic's start near 0, so the critic's value counts
        critic.members.biases[-1].fill_(-1.0)
        critic.members.weights[-1].normal_(0.0, 1.0, generator=torch.Generator().manual_seed(2))
    shield = BudgetShield(
        config=shield_config(ensemble_size=members, horizon=10),
        world_model=model,
        critic=critic,
        n_agents=a,
        obs_dim=d,
        n_actions=n,
    )
    gen = torch.Generator().manual_seed(3)
    joint = torch.randn(5, a * d, generator=gen)
    actions = torch.randint(0, n, (5, a), generator=gen)
    remaining = torch.full((5,), 10.0)
    with torch.no_grad():
        q = shield.member_q(joint, actions, remaining)  # [M, 5]
        obs = joint.unsqueeze(0).expand(members, 5, a * d)
        after, r, done = model.predict(obs, actions.unsqueeze(0).expand(members, 5, a))
        value = critic.values(after, 9)
        expected = r.squeeze(-1) + (1 - r.squeeze(-1)) * (1 - done) * value
        raw = shield.raw_risk(joint, actions, remaining)
    torch.testing.assert_close(q, expected, atol=1e-5, rtol=1e-5)
    assert (value > 1e-3).all()  # the critic's value counts
    torch.testing.assert_close(raw, q.amax(dim=0))
    # Rows of options naming their states (`state_index`) give the same numbers.
    rows = torch.tensor([4, 0, 4, 2])
    with torch.no_grad():
        shared = shield.member_q_options(
            joint, actions[rows].unsqueeze(1), remaining[rows], state_index=rows
        )
    torch.testing.assert_close(shared.squeeze(2), q[:, rows], atol=1e-6, rtol=1e-6)
