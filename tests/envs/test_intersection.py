"""intersection: layout of the junction, costs that depend on the other agents, observations."""

from __future__ import annotations

import numpy as np
import pytest

from src.envs.intersection import IntersectionConfig, IntersectionVectorEnv

STAY, UP, DOWN, LEFT, RIGHT = range(5)
SIZE, LOW = 10, 4  # default grid; the road is rows and columns 4 and 5


def cell(row: int, col: int) -> int:
    return row * SIZE + col


def make(num_envs: int = 1, seed: int = 0, **params) -> IntersectionVectorEnv:
    env = IntersectionVectorEnv(
        IntersectionConfig(**{"slip_prob": 0.0, **params}), num_envs=num_envs, seed=seed
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
