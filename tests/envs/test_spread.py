"""spread: the vector interface reproduces bare mpe2, and collisions are the cost."""

from __future__ import annotations

import numpy as np
import pytest
from mpe2 import simple_spread_v3

from src.envs import make_env
from src.envs.spread import SpreadConfig, SpreadVectorEnv


def test_vector_env_reproduces_bare_mpe2_and_costs_its_collisions():
    bare = simple_spread_v3.parallel_env(
        N=3, max_cycles=10, continuous_actions=False, benchmark_data=True
    )
    env = SpreadVectorEnv(SpreadConfig(max_steps=10), num_envs=1, seed=2)
    bare_obs, _ = bare.reset(seed=2)
    obs = env.reset()
    agents = bare.possible_agents
    np.testing.assert_array_equal(obs[0], [bare_obs[a] for a in agents])
    rng = np.random.default_rng(0)
    collisions = 0
    for _ in range(40):
        actions = rng.integers(0, 5, size=(1, 3))
        bare_obs, rewards, _, truncations, infos = bare.step(
            {a: int(actions[0, i]) for i, a in enumerate(agents)}
        )
        result = env.step(actions)
        np.testing.assert_array_equal(result.final_obs[0], [bare_obs[a] for a in agents])
        np.testing.assert_allclose(result.reward[0], [rewards[a] for a in agents], rtol=1e-6)
        expected_cost = [float(infos[a]["benchmark_data"][1] > 0) for a in agents]
        np.testing.assert_array_equal(result.cost[0], expected_cost)
        np.testing.assert_array_equal(result.truncated[0], [truncations[a] for a in agents])
        collisions += int(sum(expected_cost))
        if not bare.agents:
            bare_obs, _ = bare.reset()
            np.testing.assert_array_equal(result.obs[0], [bare_obs[a] for a in agents])
    assert collisions > 0  # the comparison covered collision steps


def test_forced_collision_costs_the_two_agents_only():
    env = SpreadVectorEnv(SpreadConfig(), num_envs=2, seed=0)
    env.reset()
    state = env.get_state()
    for copy in state["copies"]:
        copy["p_pos"][0] = np.array([0.0, 0.0])
        copy["p_pos"][1] = np.array([0.1, 0.0])
        copy["p_pos"][2] = np.array([0.9, 0.9])
        for vel in copy["p_vel"]:
            vel[:] = 0.0
    env.set_state(state)
    result = env.step(np.zeros((2, 3), dtype=np.int64))
    np.testing.assert_array_equal(result.cost, [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])


def test_parallel_env_reports_cost_and_keeps_cap_visible():
    env = make_env("spread", max_steps=4, n_agents=2)
    assert vars(env)["max_cycles"] == 4 and env.metadata["name"] == "spread"
    env.reset(seed=1)
    steps = 0
    while env.agents:
        _, _, _, truncations, infos = env.step(dict.fromkeys(env.agents, 0))
        steps += 1
        for info in infos.values():
            assert info["cost"] == float(info["benchmark_data"][1] > 0)
    assert steps == 4 and all(truncations.values())


def test_render_rgb_array_without_display():
    env = make_env("spread", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (700, 700, 3) and frame.dtype == np.uint8
    assert frame.min() < 255  # something was drawn


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_agents": 0}, "n_agents"),
        ({"max_steps": 0}, "max_steps"),
        ({"local_ratio": 1.5}, "local_ratio"),
        ({"local_ratio": -0.5}, "local_ratio"),
    ],
)
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        SpreadConfig(**params)
