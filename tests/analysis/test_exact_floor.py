"""The exact risk floor's dynamic programme (src.analysis.exact_floor): hand-computed cases, the
env's own transitions, and Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from src.analysis.exact_floor import (
    N_ACTIONS,
    build_model,
    decode_joint_actions,
    effective_slip_prob,
    encode_joint_actions,
    model_from_env,
    monte_carlo_risk,
    policy_risk,
    product_policy,
    solve_min_risk,
)
from src.envs import make_vector_env
from src.stats import clopper_pearson_interval

# The DP models terminating episodes: the tests build the original tasks.
ORIGINAL = {"slip_mode": "any", "continuing": False, "neighbour_view": 0}

# 3x3 grid, cells numbered row-major: the agent at (0, 1) = 1 has its goal at (0, 0) = 0.
_START, _GOAL = 1, 0


def _grid_with_hazards(size: int, cells: list[int]) -> np.ndarray:
    hazard = np.zeros(size * size, dtype=bool)
    hazard[cells] = True
    return hazard


@pytest.mark.parametrize(
    ("hazards", "n_hazardous_directions"),
    [([4], 1), ([4, 2], 2)],  # below the agent; below and to the right of it
)
def test_one_step_from_goal_next_to_hazards(hazards, n_hazardous_directions):
    p = 0.1
    model = build_model(_grid_with_hazards(3, hazards), [_GOAL], size=3, slip_prob=p)
    solution = solve_min_risk(model, 1)
    start = np.array([_START])
    # Any action not into a hazard; each slip towards a hazard (p / 4 each) is a violation.
    assert solution.risk(start) == pytest.approx(n_hazardous_directions * p / 4, abs=1e-12)
    action = int(solution.first_action(start)[0])
    target = {0: _START, 1: _START, 2: 4, 3: 0, 4: 2}[action]  # up leaves the grid: stays
    assert target not in hazards


def test_two_steps_in_a_corridor_above_a_row_of_hazards():
    p = 0.1
    # Row 1 is hazardous, so every cell of row 0 but the goal has one hazardous neighbour.
    model = build_model(_grid_with_hazards(3, [3, 4, 5]), [_GOAL], size=3, slip_prob=p)
    start = np.array([_START])
    two = solve_min_risk(model, 2)
    # Intend "left": slip down (p/4) is a violation; slips stay/up (p/2) and right (p/4) leave
    # the agent on a row-0 cell with one step and risk p/4 to go.
    assert two.risk(start) == pytest.approx(p / 4 + (3 * p / 4) * (p / 4), abs=1e-12)
    assert two.first_action(start).tolist() == [3]  # the unique minimiser
    # Requiring the episode to finish: one step succeeds only by executing "left".
    one = solve_min_risk(model, 1, require_completion=True)
    assert one.risk(start) == pytest.approx(p, abs=1e-12)
    assert one.first_action(start).tolist() == [3]


def test_the_env_slip_probability_is_the_32_bit_threshold():
    assert effective_slip_prob(0.1) == pytest.approx(0.1, abs=2**-33)
    assert effective_slip_prob(0.0) == 0.0
    assert effective_slip_prob(1.0) == 1.0


def test_joint_action_encoding_round_trips_and_products_are_distributions():
    actions = np.array([[0, 0, 0], [4, 3, 2], [1, 0, 4]])
    index = encode_joint_actions(actions)
    assert index.tolist() == [0, 4 * 25 + 3 * 5 + 2, 25 + 4]
    assert np.array_equal(decode_joint_actions(index, 3), actions)
    per_agent = np.random.default_rng(0).dirichlet(np.ones(N_ACTIONS), size=(7, 3))
    joint = product_policy(per_agent)
    assert joint.shape == (7, N_ACTIONS**3)
    assert np.allclose(joint.sum(axis=1), 1.0)
    assert np.allclose(
        joint[:, index[1]], per_agent[:, 0, 4] * per_agent[:, 1, 3] * per_agent[:, 2, 2]
    )


@pytest.mark.parametrize("slip_mode", ["any", "stay"])
def test_expectation_is_the_product_slip_matrix(slip_mode):
    model = build_model(
        _grid_with_hazards(3, [4]), [0, 8], size=3, slip_prob=0.3, slip_mode=slip_mode
    )
    w = np.random.default_rng(1).random((model.n_states, N_ACTIONS**2))
    explicit = w @ np.kron(model.slip_matrix, model.slip_matrix).T
    assert np.allclose(model.expect(w), explicit)
    assert np.allclose(model.slip_matrix.sum(axis=1), 1.0)
    if slip_mode == "stay":
        # A slip keeps the agent: moving right executes right (0.7) or stay (0.3), never more.
        np.testing.assert_allclose(model.slip_matrix[4], [0.3, 0, 0, 0, 0.7])


def test_a_stay_slip_never_pushes_an_agent_into_a_hazard():
    # One step from the goal with hazards all around: with stay-slips the floor is 0, with
    # slips to any side it is the chance of slipping towards a hazard.
    hazard = _grid_with_hazards(3, [2, 4])
    stay = build_model(hazard, [_GOAL], size=3, slip_prob=0.3, slip_mode="stay")
    anywhere = build_model(hazard, [_GOAL], size=3, slip_prob=0.3, slip_mode="any")
    start = np.array([_START])
    assert solve_min_risk(stay, 1).risk(start) == 0.0
    assert solve_min_risk(anywhere, 1).risk(start) == pytest.approx(2 * 0.3 / 4)


def test_continuing_tasks_are_refused_by_the_dp():
    env = make_vector_env("hazard_grid", num_envs=1, seed=0, n_agents=2)
    env.reset()
    with pytest.raises(ValueError, match="continuing=True"):
        model_from_env(env)


def _all_states_and_actions(model, n_agents):
    cells = model.state_cells()
    distinct = np.array([len(set(row)) == n_agents for row in cells.tolist()])
    states = np.flatnonzero(distinct)
    joint = np.arange(model.n_joint_actions)
    return np.repeat(states, len(joint)), np.tile(joint, len(states))


@pytest.mark.parametrize(
    ("name", "params", "sample"),
    [
        ("hazard_grid", {"size": 4, "n_hazards": 3, "n_agents": 2}, None),
        ("intersection", {"size": 6, "n_agents": 3, "start_jitter": 1}, 20_000),
    ],
)
def test_transitions_match_the_env_step_without_slips(name, params, sample):
    env = make_vector_env(name, num_envs=1, seed=5, slip_prob=0.0, **ORIGINAL, **params)
    env.reset()
    model = model_from_env(env)
    n_agents = env.n_agents
    states, joint = _all_states_and_actions(model, n_agents)
    if sample is not None:
        pick = np.random.default_rng(2).choice(len(states), size=sample, replace=False)
        states, joint = states[pick], joint[pick]
    n = len(states)
    snapshot = env.get_state()
    cells = model.state_cells()[states]
    batch = {
        key: np.repeat(value, n, axis=0)
        if isinstance(value, np.ndarray) and value.shape[:1] == (1,)
        else value
        for key, value in snapshot.items()
    }
    batch["cell"] = cells
    batch["at_goal"] = cells == batch["goal"]
    sim = type(env)(env.config, num_envs=n, seed=0, autoreset=False)
    sim.reset()
    sim.set_state(batch)
    result = sim.step(decode_joint_actions(joint, n_agents))
    violation = (result.cost > 0).any(axis=1)
    predicted = model.next_state[states, joint]
    assert np.array_equal(violation, predicted < 0)
    assert violation.any() and (~violation).any()
    # Without a violation the env's next cells are the model's next state, and the episode
    # terminates exactly in the model's all-on-goal states.
    safe = ~violation
    after = sim.get_state()["cell"][safe]
    assert np.array_equal(model.state_index(after), predicted[safe])
    assert np.array_equal(result.terminated[safe, 0], model.done[predicted[safe]])


def _tiny_hazard_grid(n_layouts: int):
    env = make_vector_env(
        "hazard_grid",
        num_envs=n_layouts,
        seed=None,
        size=4,
        n_hazards=2,
        n_agents=2,
        slip_prob=0.2,
        max_steps=12,
        **ORIGINAL,
    )
    env.reset(seed=[100 + i for i in range(n_layouts)])
    return env


@pytest.mark.parametrize("require_completion", [False, True])
def test_optimal_policy_rolled_out_in_the_env_matches_the_dp(require_completion):
    env = _tiny_hazard_grid(2)
    starts = env.get_state()["cell"]
    for e in range(env.num_envs):
        model = model_from_env(env, e)
        solution = solve_min_risk(model, env.max_steps, require_completion=require_completion)
        value = float(solution.risk(starts[e]))
        assert value > 0.01  # a check with something to check
        k, n = monte_carlo_risk(
            env,
            model,
            solution.policy,
            index=e,
            rollouts=20_000,
            seed=e,
            require_completion=require_completion,
        )
        low, high = clopper_pearson_interval(k=k, n=n, confidence=0.999)
        assert low <= value <= high, (e, value, k / n)
        exact = policy_risk(
            model, solution.policy, env.max_steps, require_completion=require_completion
        )
        assert np.allclose(exact, solution.value)
        if require_completion:
            # Failing = violating or not finishing: the complement of finishing safely.
            finished = policy_risk(model, solution.policy, env.max_steps, quantity="completion")
            assert np.allclose(solution.value, 1.0 - finished)


def test_given_stochastic_policy_is_evaluated_exactly():
    env = _tiny_hazard_grid(1)
    model = model_from_env(env)
    start = model.state_index(env.get_state()["cell"][0])
    # A random stationary decentralised policy: per state, independent per-agent distributions.
    per_agent = np.random.default_rng(3).dirichlet(np.ones(N_ACTIONS), size=(model.n_states, 2))
    policy = product_policy(per_agent)
    value = policy_risk(model, policy, env.max_steps)
    floor = solve_min_risk(model, env.max_steps).value
    assert np.all(value >= floor - 1e-12)
    k, n = monte_carlo_risk(env, model, policy, rollouts=20_000, seed=7)
    low, high = clopper_pearson_interval(k=k, n=n, confidence=0.999)
    assert low <= value[start] <= high, (value[start], k / n)
    # The same policy given per step equals the stationary one.
    per_step = np.broadcast_to(policy, (env.max_steps, *policy.shape))
    assert np.allclose(policy_risk(model, per_step, env.max_steps), value)
