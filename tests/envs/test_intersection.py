"""intersection: layout of the junction, costs that depend on the other agents, observations."""

from __future__ import annotations

import numpy as np
import pytest

from src.envs.intersection import IntersectionConfig, IntersectionVectorEnv

STAY, UP, DOWN, LEFT, RIGHT = range(5)
SIZE, LOW = 10, 4  # default grid; the road is rows and columns 4 and 5


def cell(row: int, col: int) -> int:
    return row * SIZE + col


# The original task; the tests of the default (continuing) dynamics pass DEFAULT_DYNAMICS.
ORIGINAL = {"slip_mode": "any", "continuing": False, "neighbour_view": 0}
DEFAULT_DYNAMICS = {"slip_mode": "stay", "continuing": True, "neighbour_view": 5}


def make(num_envs: int = 1, seed: int = 0, **params) -> IntersectionVectorEnv:
    env = IntersectionVectorEnv(
        IntersectionConfig(**{"slip_prob": 0.0, **ORIGINAL, **params}),
        num_envs=num_envs,
        seed=seed,
    )
    env.reset()
    return env


def place(env, *, cells, goals) -> None:
    state = env.get_state()
    state["cell"][:] = cells
    state["goal"][:] = goals
    state["at_goal"][:] = False
    state["vel"][:] = 0.0
    state["steps"][:] = 0
    env.set_state(state)


GOALS = [cell(9, 4), cell(4, 0), cell(0, 5), cell(5, 9)]  # of the north, east, south, west arms


def test_layout_arms_lanes_and_off_road_hazards():
    env = make(num_envs=200, seed=5)
    state = env.get_state()
    rows, cols = np.divmod(np.arange(SIZE * SIZE), SIZE)
    road = np.isin(rows, (LOW, LOW + 1)) | np.isin(cols, (LOW, LOW + 1))
    assert (state["hazard"] == ~road).all()
    # arm -> (possible starts with jitter 0..2, goal)
    arms = {
        0: ({cell(j, 4) for j in range(3)}, cell(9, 4)),
        1: ({cell(4, 9 - j) for j in range(3)}, cell(4, 0)),
        2: ({cell(9 - j, 5) for j in range(3)}, cell(0, 5)),
        3: ({cell(5, j) for j in range(3)}, cell(5, 9)),
    }
    seen_starts = set()
    for starts, goals in zip(state["cell"], state["goal"], strict=True):
        arm_of = [GOALS.index(g) for g in goals]
        assert sorted(arm_of) == [0, 1, 2, 3]  # four agents on four distinct arms
        for start, arm in zip(starts, arm_of, strict=True):
            assert start in arms[arm][0]
        seen_starts.update(starts.tolist())
    # Every start position of every arm occurs, and agent 0 is not always on the same arm.
    assert seen_starts == set().union(*(s for s, _ in arms.values()))
    assert len(set(state["goal"][:, 0].tolist())) == 4


def test_fewer_agents_take_distinct_arms():
    env = make(num_envs=50, n_agents=2)
    goals = env.get_state()["goal"]
    assert (goals[:, 0] != goals[:, 1]).all()
    assert set(goals.ravel().tolist()) == set(GOALS)


def test_meeting_in_the_junction_costs_both():
    env = make()
    # The southbound agent (north arm) and the eastbound agent (west arm) both enter (5, 4).
    place(env, cells=[cell(4, 4), cell(4, 9), cell(9, 5), cell(5, 3)], goals=GOALS)
    result = env.step(np.array([[DOWN, STAY, STAY, RIGHT]]))
    np.testing.assert_array_equal(result.cost[0], [1.0, 0.0, 0.0, 1.0])


def test_leaving_the_road_costs_one():
    env = make()
    place(env, cells=[cell(2, 4), cell(4, 9), cell(9, 5), cell(5, 0)], goals=GOALS)
    result = env.step(np.array([[LEFT, STAY, RIGHT, STAY]]))
    np.testing.assert_array_equal(result.cost[0], [1.0, 0.0, 1.0, 0.0])
    # Side-stepping into the other lane stays on the road.
    result = env.step(np.array([[RIGHT, DOWN, LEFT, UP]]))
    np.testing.assert_array_equal(result.cost[0], [0.0, 0.0, 0.0, 0.0])


def test_observations_carry_everyones_last_move():
    env = make()
    place(env, cells=[cell(1, 4), cell(4, 8), cell(8, 5), cell(5, 1)], goals=GOALS)
    obs = env.step(np.array([[DOWN, LEFT, STAY, UP]])).obs[0]
    np.testing.assert_array_equal(obs[0, 4:6], [1.0, 0.0])
    np.testing.assert_array_equal(obs[1, 4:6], [0.0, -1.0])
    np.testing.assert_array_equal(obs[3, 4:6], [-1.0, 0.0])
    # Agent 0 sees the others in order 1, 2, 3: (drow, dcol, vrow, vcol) each, after the view.
    others = obs[0, 15:27].reshape(3, 4)
    np.testing.assert_array_equal(others[:, 2:], [[0.0, -1.0], [0.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(others[0, :2], [(4 - 2) / 9, (7 - 4) / 9], rtol=1e-6)
    assert obs.shape == (4, env.obs_dim) == (4, 28)


def test_driving_straight_through_collides_often():
    """Agents that ignore each other crash in the junction in a large share of episodes."""
    env = make(num_envs=256, seed=2)
    obs = env.reset()
    violated = np.zeros(env.num_envs, dtype=bool)
    offroad = False
    finished = np.zeros(env.num_envs, dtype=bool)
    for _ in range(env.max_steps):
        goal_vec = obs[:, :, 2:4]
        vertical = np.where(goal_vec[..., 0] < 0, UP, DOWN)
        horizontal = np.where(goal_vec[..., 1] < 0, LEFT, RIGHT)
        actions = np.where(np.abs(goal_vec[..., 0]) > 0, vertical, horizontal)
        result = env.step(actions)
        live = ~finished
        violated |= live & (result.cost.sum(axis=1) > 0)
        offroad |= bool((result.final_obs[live][:, :, 10] > 0).any())  # centre of the view
        finished |= result.terminated[:, 0] | result.truncated[:, 0]
        obs = result.obs
    assert finished.all()
    assert not offroad  # without slips the lanes alone never leave the road
    assert violated.mean() > 0.3


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_agents": 0}, "n_agents"),
        ({"n_agents": 5}, "n_agents"),
        ({"size": 5}, "size"),
        ({"start_jitter": 4}, "start_jitter"),
        ({"start_jitter": -1}, "start_jitter"),
        ({"slip_prob": 2.0}, "slip_prob"),
        ({"max_steps": -3}, "max_steps"),
    ],
)
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        IntersectionConfig(**params)


# ---------------------------------------------------------------------- default dynamics


def test_a_car_that_arrives_reenters_from_a_free_arm():
    env = make(num_envs=64, **DEFAULT_DYNAMICS)
    # The north car is one step from its exit; the others drive on the east and south arms.
    place(env, cells=[cell(8, 4), cell(4, 8), cell(8, 5), cell(5, 1)], goals=GOALS)
    state = env.get_state()
    state["cell"][:, 3] = cell(5, 0)
    env.set_state(state)
    result = env.step(np.array([[DOWN, STAY, STAY, STAY]] * env.num_envs))
    np.testing.assert_allclose(result.reward[:, 0], 1.09, atol=1e-6)
    assert not result.terminated.any()
    state = env.get_state()
    # The only arm no other car is routed on is the north arm: the car re-enters there, at a
    # start cell (edge plus jitter), headed for the south exit, and its last move is reset.
    assert (state["goal"][:, 0] == GOALS[0]).all()
    assert set(state["cell"][:, 0].tolist()) <= {cell(0, 4), cell(1, 4), cell(2, 4)}
    assert len(set(state["cell"][:, 0].tolist())) > 1
    np.testing.assert_array_equal(state["vel"][:, 0], 0.0)
    assert not state["at_goal"].any()


def test_a_car_waits_at_its_exit_while_every_free_entry_is_blocked():
    env = IntersectionVectorEnv(
        IntersectionConfig(n_agents=3, slip_prob=0.0, start_jitter=0, **DEFAULT_DYNAMICS),
        num_envs=1,
        seed=0,
    )
    env.reset()
    state = env.get_state()
    # Car 0 is one step from its exit; cars 1 and 2 are routed on the east and south arms and
    # stand on the two entries left to car 0 (north and west).
    state["cell"][:] = [[cell(8, 4), cell(0, 4), cell(5, 0)]]
    state["goal"][:] = [GOALS[:3]]
    state["at_goal"][:] = False
    env.set_state(state)
    result = env.step(np.array([[DOWN, STAY, STAY]]))
    waiting = env.get_state()
    assert result.reward[0, 0] > 1.0 and waiting["at_goal"][0, 0]
    assert waiting["cell"][0, 0] == GOALS[0]
    # Car 2 leaves the west entry: car 0 re-enters there, on the west arm's route.
    env.step(np.array([[UP, STAY, RIGHT]]))
    after = env.get_state()
    assert after["cell"][0, 0] == cell(5, 0) and after["goal"][0, 0] == GOALS[3]
    assert not after["at_goal"].any()


def test_every_violation_of_careless_traffic_is_a_collision():
    from src.envs.witness import CarefulTeam, greedy_actions, rollout_team

    def factory(copies: int) -> IntersectionVectorEnv:
        return IntersectionVectorEnv(IntersectionConfig(n_agents=4, max_steps=80), num_envs=copies)

    seeds = range(40)
    careful = rollout_team(factory, CarefulTeam(), seeds, horizon=80)
    greedy = rollout_team(factory, greedy_actions, seeds, horizon=80)
    assert careful.p_violation(80) == 0.0
    assert greedy.p_violation(80) > 0.5
    assert careful.goal_rate >= 0.5 * greedy.goal_rate > 0
