"""hazard_grid: hand-built situations for costs and rewards, slips, layouts, observations."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from src.envs.hazard_grid import HazardGridConfig, HazardGridVectorEnv
from src.stats import clopper_pearson_interval

STAY, UP, DOWN, LEFT, RIGHT = range(5)
SIZE = 8


def cell(row: int, col: int, size: int = SIZE) -> int:
    return row * size + col


# The original task; the tests of the default (continuing) dynamics pass DEFAULT_DYNAMICS.
ORIGINAL = {"slip_mode": "any", "continuing": False, "observe_moves": False, "neighbour_view": 0}
DEFAULT_DYNAMICS = {
    "slip_mode": "stay",
    "continuing": True,
    "observe_moves": True,
    "neighbour_view": 5,
}


def make(num_envs: int = 1, **params) -> HazardGridVectorEnv:
    config = HazardGridConfig(**{"slip_prob": 0.0, **ORIGINAL, **params})
    env = HazardGridVectorEnv(config, num_envs=num_envs, seed=0)
    env.reset()
    return env


def place(env, *, cells, goals, hazards=(), at_goal=None, steps=0) -> None:
    """Put copy 0..E-1 (all the same) into a hand-built situation."""
    state = env.get_state()
    state["cell"][:] = cells
    state["goal"][:] = goals
    state["at_goal"][:] = False if at_goal is None else at_goal
    state["hazard"][:] = False
    state["hazard"][:, list(hazards)] = True
    state["steps"][:] = steps
    env.set_state(state)


FAR_GOALS = [cell(0, 7), cell(7, 0), cell(7, 7)]


def step(env, *actions) -> object:
    return env.step(np.array([actions] * env.num_envs))


def test_entering_a_hazard_costs_that_agent_exactly_one():
    env = make()
    place(env, cells=[cell(1, 0), cell(4, 4), cell(5, 2)], goals=FAR_GOALS, hazards=[cell(1, 1)])
    result = step(env, RIGHT, STAY, UP)
    np.testing.assert_array_equal(result.cost[0], [1.0, 0.0, 0.0])
    # Staying on the hazard is still being on it.
    result = step(env, STAY, STAY, STAY)
    np.testing.assert_array_equal(result.cost[0], [1.0, 0.0, 0.0])
    result = step(env, LEFT, STAY, STAY)
    np.testing.assert_array_equal(result.cost[0], [0.0, 0.0, 0.0])


def test_two_agents_in_one_cell_cost_one_each():
    env = make()
    place(env, cells=[cell(0, 0), cell(5, 4), cell(5, 6)], goals=FAR_GOALS)
    result = step(env, STAY, RIGHT, LEFT)
    np.testing.assert_array_equal(result.cost[0], [0.0, 1.0, 1.0])


def test_swapping_cells_is_a_collision():
    env = make()
    place(env, cells=[cell(0, 0), cell(5, 4), cell(5, 5)], goals=FAR_GOALS)
    result = step(env, STAY, RIGHT, LEFT)
    np.testing.assert_array_equal(result.cost[0], [0.0, 1.0, 1.0])


def test_collision_on_a_hazard_still_costs_one():
    env = make()
    place(env, cells=[cell(1, 0), cell(1, 2), cell(6, 6)], goals=FAR_GOALS, hazards=[cell(1, 1)])
    result = step(env, RIGHT, LEFT, STAY)
    np.testing.assert_array_equal(result.cost[0], [1.0, 1.0, 0.0])


def test_three_agents_in_one_cell_and_a_passer_by():
    env = make()
    place(env, cells=[cell(3, 2), cell(3, 4), cell(2, 3)], goals=FAR_GOALS)
    np.testing.assert_array_equal(step(env, RIGHT, LEFT, DOWN).cost[0], [1.0, 1.0, 1.0])
    # Agents next to each other moving in the same direction never collide.
    place(env, cells=[cell(3, 2), cell(3, 3), cell(3, 4)], goals=FAR_GOALS)
    np.testing.assert_array_equal(step(env, RIGHT, RIGHT, RIGHT).cost[0], [0.0, 0.0, 0.0])


def test_rewards_progress_goal_and_termination():
    env = make(progress_reward=0.1, goal_reward=1.0, step_penalty=0.01)
    place(
        env,
        cells=[cell(0, 2), cell(4, 4), cell(6, 6)],
        goals=[cell(0, 3), cell(4, 6), cell(6, 7)],
    )
    result = step(env, RIGHT, LEFT, STAY)
    np.testing.assert_allclose(result.reward[0], [1.09, -0.11, -0.01], atol=1e-6)
    assert not result.terminated.any()
    # Agent 0 sits on its goal: its action is ignored and it earns nothing more.
    result = step(env, LEFT, RIGHT, RIGHT)
    np.testing.assert_allclose(result.reward[0], [0.0, 0.09, 1.09], atol=1e-6)
    assert result.final_obs[0, 0, -1] == 1.0 and result.final_obs[0, 2, -1] == 1.0
    result = step(env, STAY, RIGHT, STAY)
    np.testing.assert_allclose(result.reward[0], [0.0, 0.09, 0.0], atol=1e-6)
    result = step(env, STAY, RIGHT, STAY)
    np.testing.assert_allclose(result.reward[0], [0.0, 1.09, 0.0], atol=1e-6)
    assert result.terminated.all() and not result.truncated.any()
    assert result.episode_step[0] == 4


def test_walls_keep_agents_on_the_grid():
    env = make()
    place(
        env, cells=[cell(0, 0), cell(7, 7), cell(0, 7)], goals=[cell(3, 3), cell(4, 4), cell(5, 5)]
    )
    result = step(env, UP, DOWN, RIGHT)
    np.testing.assert_array_equal(env.get_state()["cell"][0], [cell(0, 0), cell(7, 7), cell(0, 7)])
    np.testing.assert_array_equal(result.cost[0], [0.0, 0.0, 0.0])


def test_truncation_at_the_hidden_cap():
    env = make(max_steps=5)
    place(env, cells=[cell(0, 0), cell(7, 7), cell(0, 7)], goals=FAR_GOALS[::-1], steps=3)
    assert not step(env, STAY, STAY, STAY).truncated.any()
    result = step(env, STAY, STAY, STAY)
    assert result.truncated.all() and result.episode_step[0] == 5


def test_observation_layout():
    env = make()
    place(
        env,
        cells=[cell(1, 0), cell(3, 4), cell(7, 7)],
        goals=FAR_GOALS,
        hazards=[cell(0, 1), cell(2, 1)],
    )
    obs = env.observe()[0, 0]
    scale = 1 / 7
    np.testing.assert_allclose(obs[:4], [1 * scale, 0.0, -1 * scale, 7 * scale], rtol=1e-6)
    # 3x3 view row-major around (1, 0): off-grid cells read 0, hazards at (0, 1) and (2, 1).
    np.testing.assert_array_equal(obs[4:13], [0, 0, 1, 0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(obs[13:17], [2 * scale, 4 * scale, 6 * scale, 7 * scale], rtol=1e-6)
    assert obs[17] == 0.0 and obs.shape == (env.obs_dim,) == (18,)


def test_observations_do_not_reveal_the_step_count():
    env = make()
    state = env.get_state()
    before = env.observe()
    state["steps"][:] = 37
    env.set_state(state)
    np.testing.assert_array_equal(env.observe(), before)


def slip_trials(slip_prob: float, action: int, iterations: int = 20) -> tuple[np.ndarray, int]:
    """Displacements of agents put on interior cells and stepped with ``action``."""
    env = make(num_envs=128, slip_prob=slip_prob, n_hazards=0)
    starts = np.array([cell(3, 3), cell(3, 5), cell(5, 3)])
    moves = []
    for _ in range(iterations):
        place(env, cells=starts, goals=FAR_GOALS)
        env.step(np.full((env.num_envs, 3), action))
        moves.append(env.get_state()["cell"] - starts)
    displacement = np.concatenate(moves).ravel()
    return displacement, displacement.size


@pytest.mark.parametrize("slip_prob", [0.0, 0.1, 0.35, 1.0])
def test_slip_rate_inside_binomial_interval(slip_prob):
    displacement, n = slip_trials(slip_prob, STAY)
    slips = int(np.count_nonzero(displacement))
    low, high = clopper_pearson_interval(k=slips, n=n, confidence=0.999)
    assert low <= slip_prob <= high, (slips, n)
    # A slip replaces the chosen action by one of the other four, uniformly.
    if slips:
        for move in (-SIZE, SIZE, -1, 1):
            k = int(np.count_nonzero(displacement == move))
            low, high = clopper_pearson_interval(k=k, n=slips, confidence=0.999)
            assert low <= 0.25 <= high, (move, k, slips)


def test_slip_never_keeps_the_chosen_move():
    displacement, _ = slip_trials(1.0, RIGHT, iterations=4)
    assert not (displacement == 1).any()
    assert set(np.unique(displacement)) == {-SIZE, 0, SIZE, -1}


def hazard_free_path_exists(hazard: np.ndarray, start: int, goal: int, size: int) -> bool:
    seen, queue = {start}, deque([start])
    while queue:
        current = queue.popleft()
        if current == goal:
            return True
        row, col = divmod(current, size)
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            r, c = row + dr, col + dc
            nxt = r * size + c
            if 0 <= r < size and 0 <= c < size and not hazard[nxt] and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False


def check_layout(env: HazardGridVectorEnv) -> None:
    state = env.get_state()
    size, n_agents = env.size, env.n_agents
    rows, cols = np.divmod(np.arange(size * size), size)
    sites = (rows % 2 == 1) & (cols % 2 == 1)
    for e in range(env.num_envs):
        hazard = state["hazard"][e]
        assert hazard.sum() == env.config.n_hazards
        assert not (hazard & ~sites).any()
        start, goal = state["cell"][e], state["goal"][e]
        assert len({*start.tolist(), *goal.tolist()}) == 2 * n_agents
        assert not hazard[start].any() and not hazard[goal].any()
        for s, g in zip(start, goal, strict=True):
            assert hazard_free_path_exists(hazard, int(s), int(g), size)


def test_layouts_leave_a_hazard_free_path():
    env = make(num_envs=64, n_hazards=16)
    for seed in range(3):
        env.reset(seed)
        check_layout(env)


def test_walking_straight_to_the_goal_hits_hazards_often():
    """With the default layout, a greedy shortest-path walker is unsafe in most episodes."""
    env = HazardGridVectorEnv(HazardGridConfig(), num_envs=256, seed=1)
    obs = env.reset()
    violated = np.zeros(env.num_envs, dtype=bool)
    episode_cost = np.zeros(env.num_envs)
    finished = np.zeros(env.num_envs, dtype=bool)
    for _ in range(env.max_steps):
        goal_vec = obs[:, :, 2:4]
        vertical = np.where(goal_vec[..., 0] < 0, UP, DOWN)
        horizontal = np.where(goal_vec[..., 1] < 0, LEFT, RIGHT)
        actions = np.where(np.abs(goal_vec[..., 0]) > 0, vertical, horizontal)
        result = env.step(actions)
        live = ~finished
        episode_cost[live] += result.cost[live].sum(axis=1)
        violated |= live & (result.cost.sum(axis=1) > 0)
        finished |= result.terminated[:, 0] | result.truncated[:, 0]
        obs = result.obs
    assert finished.all()
    assert violated.mean() > 0.5


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(2, 12),
    n_agents=st.integers(1, 5),
    hazard_fraction=st.floats(0.0, 1.0),
    slip_prob=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32),
    dynamics=st.sampled_from([ORIGINAL, DEFAULT_DYNAMICS]),
)
def test_random_configs_keep_their_invariants(
    size, n_agents, hazard_fraction, slip_prob, seed, dynamics
):
    sites = (size // 2) ** 2
    n_hazards = min(int(hazard_fraction * sites), size * size - 2 * n_agents)
    if 2 * n_agents > size * size or n_hazards < 0:
        with pytest.raises(ValueError, match="too small"):
            HazardGridConfig(size=size, n_agents=n_agents, n_hazards=0)
        return
    config = HazardGridConfig(
        size=size,
        n_agents=n_agents,
        n_hazards=n_hazards,
        slip_prob=slip_prob,
        max_steps=6,
        **dynamics,
    )
    env = HazardGridVectorEnv(config, num_envs=3, seed=seed)
    obs = env.reset()
    check_layout(env)
    rng = np.random.default_rng(seed)
    for _ in range(8):
        result = env.step(rng.integers(0, 5, size=(3, n_agents)))
        assert np.isin(result.cost, (0.0, 1.0)).all()
        assert (np.abs(result.obs) <= 1.0).all() and (np.abs(result.final_obs) <= 1.0).all()
        assert (result.episode_step <= 6).all()
    assert (env.get_state()["hazard"].sum(axis=1) == n_hazards).all()
    assert obs.shape == (3, n_agents, env.obs_dim)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_agents": 0}, "n_agents"),
        ({"size": 2, "n_agents": 3, "n_hazards": 0}, "too small"),
        ({"size": 4, "n_agents": 7, "n_hazards": 3}, "too small"),
        ({"size": 1}, "size"),
        ({"n_hazards": 17}, "n_hazards"),
        ({"n_hazards": -1}, "n_hazards"),
        ({"slip_prob": -0.1}, "slip_prob"),
        ({"slip_prob": 1.5}, "slip_prob"),
        ({"slip_prob": float("nan")}, "slip_prob"),
        ({"max_steps": 0}, "max_steps"),
        ({"n_agents": 2.5}, "n_agents"),
        ({"n_agents": True}, "n_agents"),
        ({"goal_reward": "1"}, "goal_reward"),
    ],
)
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        HazardGridConfig(**params)


# ---------------------------------------------------------------------- default dynamics


def make_default(num_envs: int = 1, **params) -> HazardGridVectorEnv:
    return make(num_envs, **{**DEFAULT_DYNAMICS, **params})


@pytest.mark.parametrize("slip_prob", [0.1, 0.35, 1.0])
def test_a_stay_slip_keeps_the_agent_in_place(slip_prob):
    env = make_default(num_envs=128, slip_prob=slip_prob, n_hazards=0)
    starts = np.array([cell(3, 3), cell(3, 5), cell(5, 3)])
    moved = []
    for _ in range(20):
        place(env, cells=starts, goals=FAR_GOALS)
        env.step(np.full((env.num_envs, 3), RIGHT))
        moved.append(env.get_state()["cell"] - starts)
    displacement = np.concatenate(moved).ravel()
    # Every agent either made its move or stayed: a slip never moves anyone elsewhere.
    assert set(np.unique(displacement)) <= {0, 1}
    stays = int(np.count_nonzero(displacement == 0))
    low, high = clopper_pearson_interval(k=stays, n=displacement.size, confidence=0.999)
    assert low <= slip_prob <= high


def test_an_arriving_agent_gets_a_new_goal_and_the_episode_goes_on():
    env = make_default(num_envs=64, max_steps=5)
    hazards = [cell(1, 1), cell(3, 3)]
    goals = [cell(0, 3), cell(4, 6), cell(6, 7)]
    place(env, cells=[cell(0, 2), cell(4, 4), cell(6, 6)], goals=goals, hazards=hazards)
    result = step(env, RIGHT, STAY, RIGHT)
    np.testing.assert_allclose(result.reward[:, 0], 1.09, atol=1e-6)  # progress + arrival
    np.testing.assert_allclose(result.reward[:, 2], 1.09, atol=1e-6)
    assert not result.terminated.any() and not result.truncated.any()
    state = env.get_state()
    assert not state["at_goal"].any()
    new = state["goal"]
    # New goals: not a hazard, not a cell with an agent on it, not another agent's goal.
    for e in range(env.num_envs):
        assert not state["hazard"][e, new[e]].any()
        assert not set(new[e].tolist()) & set(state["cell"][e].tolist())
        assert len(set(new[e].tolist())) == 3
    assert (new[:, 1] == goals[1]).all()  # agent 1 did not arrive: same goal
    assert len(set(new[:, 0].tolist())) > 10  # drawn from each copy's own stream
    # The observation reached holds the new goal, and work ends only at the hidden cap.
    np.testing.assert_allclose(
        result.final_obs[:, 0, 2:4],
        np.stack(np.divmod(new[:, 0], SIZE), axis=1) / 7 - np.array([0, 3]) / 7,
        atol=1e-6,
    )
    for _ in range(3):
        assert not step(env, STAY, STAY, STAY).truncated.any()
    result = step(env, STAY, STAY, STAY)
    assert result.truncated.all() and not result.terminated.any()


def test_new_goals_follow_the_copys_stream():
    """A batch of copies draws exactly what separately seeded single copies draw."""
    batch = HazardGridVectorEnv(HazardGridConfig(**DEFAULT_DYNAMICS), num_envs=4, seed=[5, 6, 7, 8])
    batch.reset()
    singles = [
        HazardGridVectorEnv(HazardGridConfig(**DEFAULT_DYNAMICS), num_envs=1, seed=s)
        for s in (5, 6, 7, 8)
    ]
    for env in singles:
        env.reset()
    rng = np.random.default_rng(0)
    for _ in range(120):
        actions = rng.integers(0, 5, size=(4, 3))
        result = batch.step(actions)
        for e, env in enumerate(singles):
            single = env.step(actions[e : e + 1])
            np.testing.assert_array_equal(single.obs[0], result.obs[e])
            np.testing.assert_array_equal(single.cost[0], result.cost[e])
    assert not np.array_equal(batch.get_state()["goal"][0], batch.get_state()["goal"][1])


def test_others_last_moves_and_the_neighbour_window_are_observed():
    env = make_default()
    place(env, cells=[cell(3, 3), cell(3, 5), cell(7, 7)], goals=FAR_GOALS)
    result = step(env, STAY, LEFT, STAY)  # agent 1 moves next to agent 0
    obs = result.obs[0, 0]
    assert env.obs_dim == 6 + 9 + 4 * 2 + 25 + 1 == obs.shape[0]
    np.testing.assert_array_equal(obs[4:6], [0, 0])  # own last move
    np.testing.assert_allclose(obs[15:19], [0, 1 / 7, 0, -1], atol=1e-6)  # agent 1: pos, move
    window = obs[23:48].reshape(5, 5)
    expected = np.zeros((5, 5))
    expected[2, 3] = 1.0  # agent 1 one cell to the right; agent 2 is out of the window
    np.testing.assert_array_equal(window, expected)


def test_collisions_are_told_apart_from_hazards():
    env = make_default()
    place(env, cells=[cell(1, 0), cell(5, 4), cell(5, 6)], goals=FAR_GOALS, hazards=[cell(1, 1)])
    result = step(env, RIGHT, RIGHT, LEFT)
    np.testing.assert_array_equal(result.cost[0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(result.collision[0], [False, True, True])


def test_a_careful_team_never_violates_while_a_greedy_one_does():
    """Unavoidable risk is nil under stay-slips; carelessness violates (docs/design.md)."""
    from src.envs.witness import CarefulTeam, greedy_actions, rollout_team

    def factory(copies: int) -> HazardGridVectorEnv:
        return HazardGridVectorEnv(
            HazardGridConfig(n_agents=3, slip_prob=0.3, max_steps=60), num_envs=copies
        )

    seeds = range(40)
    careful = rollout_team(factory, CarefulTeam(), seeds, horizon=60)
    greedy = rollout_team(factory, greedy_actions, seeds, horizon=60)
    assert careful.p_violation(60) == 0.0
    assert greedy.p_violation(60) > 0.5
    assert careful.goal_rate >= 0.5 * greedy.goal_rate > 0
