"""Tasks given by import path: third-party mpe2 envs and small envs of our own behind the
vector interface (padding, costs, Box actions, resuming), and the contract checks."""

from __future__ import annotations

import numpy as np
import pytest
from mpe2 import simple_adversary_v3, simple_tag_v3

from src.custom import ComponentError, register_env
from src.envs.costs import PROXIMITY, mpe2_adversary_proximity, mpe2_collisions
from src.envs.registry import make_env, make_vector_env
from src.envs.task import probe_task
from src.evaluation.overlay import annotate_frame, status_text

TASKS = "tests.custom.tasks"


@pytest.fixture(autouse=True)
def _tasks() -> None:
    register_env("t_tag", "mpe2.simple_tag_v3:parallel_env", "mpe2_collisions")
    register_env("t_tag_aec", "mpe2.simple_tag_v3:env", "mpe2_collisions")
    register_env("t_adversary", "mpe2.simple_adversary_v3:parallel_env", "mpe2_adversary_proximity")
    register_env("t_walk", f"{TASKS}:walk")
    register_env("t_stateful_walk", f"{TASKS}:stateful_walk")
    register_env("t_walk_vector", f"{TASKS}:walk", vector=f"{TASKS}:WalkVector")
    register_env("t_not_vector", f"{TASKS}:walk", vector=f"{TASKS}:not_vector")
    for name in (
        "without_cost",
        "agent_leaves",
        "partial_reset",
        "mixed_actions",
        "discrete_observations",
        "negative_cost",
        "unseeded",
    ):
        register_env(f"t_{name}", f"{TASKS}:{name}")


def test_observations_are_mpe2s_own_zero_padded_to_the_largest_agent():
    env = make_vector_env("t_tag", num_envs=2, seed=3, n_agents=4, max_cycles=10)
    bare = simple_tag_v3.parallel_env(max_cycles=10)
    assert env.obs_sizes == [16, 16, 16, 14] and env.obs_dim == 16
    obs = env.reset()
    expected, _ = bare.reset(seed=3)
    for i, agent in enumerate(env.agents):
        size = env.obs_sizes[i]
        np.testing.assert_array_equal(obs[0, i, :size], expected[agent])
        assert not obs[0, i, size:].any()
    rng = np.random.default_rng(0)
    for _ in range(10):
        actions = rng.integers(0, 5, size=(2, 4))
        result = env.step(actions)
        expected, rewards, *_ = bare.step({a: int(actions[0, i]) for i, a in enumerate(env.agents)})
        for i, agent in enumerate(env.agents):
            np.testing.assert_array_equal(
                result.final_obs[0, i, : env.obs_sizes[i]], expected[agent]
            )
            assert result.reward[0, i] == np.float32(rewards[agent])
    assert result.truncated.all()  # mpe2's own cap (max_cycles) ends the episode


def test_mpe2_collisions_match_mpe2s_own_collision_test():
    env = simple_tag_v3.parallel_env(max_cycles=25)
    rng = np.random.default_rng(1)
    hits = 0
    for episode in range(20):
        env.reset(seed=episode)
        world, scenario = env.unwrapped.world, env.unwrapped.scenario
        while env.agents:
            env.step({a: int(rng.integers(0, 5)) for a in env.agents})
            costs = mpe2_collisions(env, {})
            for agent in world.agents:
                expected = any(
                    o is not agent and scenario.is_collision(o, agent) for o in world.agents
                )
                assert costs[agent.name] == float(expected)
                hits += expected
    assert hits > 0  # the episodes covered collisions


def test_adversary_proximity_costs_both_sides_within_the_distance():
    env = simple_adversary_v3.parallel_env()
    env.reset(seed=0)
    adversary, good, other = env.unwrapped.world.agents
    adversary.state.p_pos = np.array([0.0, 0.0])
    good.state.p_pos = np.array([PROXIMITY * 0.9, 0.0])
    other.state.p_pos = np.array([PROXIMITY * 1.1, 0.0])
    costs = mpe2_adversary_proximity(env, {})
    assert costs == {"adversary_0": 1.0, "agent_0": 1.0, "agent_1": 0.0}


def test_box_actions_reach_the_env_clipped_to_its_space():
    env = make_vector_env(
        "t_tag", num_envs=2, seed=0, n_agents=4, max_cycles=5, continuous_actions=True
    )
    assert env.action_kind == "box" and env.action_shape == (5,) and env.n_actions == 5
    env.reset()
    result = env.step(np.full((2, 4, 5), 2.0))  # clipped to the Box's 1.0
    assert result.obs.shape == (2, 4, 16)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((2, 4), dtype=np.int64))
    probe_task(env)


@pytest.mark.parametrize("name", ["t_walk", "t_stateful_walk"])
def test_snapshot_continues_exactly_in_a_fresh_env(name):
    # t_walk is replayed from its episode seeds and actions, t_stateful_walk snapshots itself.
    env = make_vector_env(name, num_envs=2, seed=4, n_agents=2, max_steps=10)
    rng = np.random.default_rng(0)
    env.reset()
    for _ in range(8):  # across an episode end: the next episode's seed is derived
        env.step(rng.integers(0, 2, size=(2, 2)))
    state = env.get_state()
    assert ("copies" in state) == (name == "t_stateful_walk")
    actions = [rng.integers(0, 2, size=(2, 2)) for _ in range(15)]  # across two more ends
    first = [env.step(a) for a in actions]
    fresh = make_vector_env(name, num_envs=2, n_agents=2, max_steps=10)
    fresh.set_state(state)
    for a, expected in zip(actions, first, strict=True):
        got = fresh.step(a)
        for field in ("obs", "cost", "reward", "terminated", "episode_step"):
            np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))


def test_replay_detects_an_env_that_is_not_reproducible_from_its_seed():
    np.random.seed(0)  # the env's draws from NumPy's global generator differ on every replay
    shaky = make_vector_env("t_unseeded", num_envs=1, seed=0, n_agents=2, max_steps=10)
    shaky.reset()
    for _ in range(3):
        shaky.step(np.ones((1, 2), dtype=np.int64))
    saved = shaky.get_state()
    with pytest.raises(ComponentError, match=r"^env t_unseeded: replaying copy 0 .* deterministic"):
        for _ in range(20):
            shaky.set_state(saved)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("t_tag_aec", r"returned a .*OrderEnforcingWrapper, not a pettingzoo ParallelEnv"),
        ("t_without_cost", r"infos of \['agent_0', 'agent_1'\] hold no 'cost' after step 1"),
        ("t_agent_leaves", r"at step 2 the agents \['agent_1'\] finished while \['agent_0'\]"),
        ("t_partial_reset", r"reset\(\) started the agents \['agent_0'\], not every possible"),
        ("t_mixed_actions", r"agents 'agent_0' and 'agent_1' act in different spaces"),
        ("t_discrete_observations", r"agent 'agent_0' observes a Discrete"),
        ("t_negative_cost", r"costs must be finite numbers >= 0"),
    ],
)
def test_a_task_breaking_the_contract_fails_in_one_line(name, message):
    with pytest.raises(ComponentError, match=message) as error:
        probe_task(make_vector_env(name, num_envs=1, n_agents=2, max_steps=10))
    assert "\n" not in str(error.value)


def test_the_parallel_view_carries_cost_and_cap():
    env = make_env("t_adversary", n_agents=3, max_steps=4)
    obs, _ = env.reset(seed=0)
    assert {agent: o.shape for agent, o in obs.items()} == {
        "adversary_0": (8,),
        "agent_0": (10,),
        "agent_1": (10,),
    }
    steps = 0
    while env.agents:
        _, _, _, truncations, infos = env.step({a: 0 for a in env.agents})
        steps += 1
        assert set(infos) == set(env.possible_agents)
        assert all(info["cost"] in (0.0, 1.0) for info in infos.values())
    assert steps == 4 and all(truncations.values())
    with pytest.raises(ValueError, match=r"n_agents=2: env t_adversary has 3 agents"):
        make_env("t_adversary", n_agents=2)


def test_a_task_s_own_vector_env_serves_training_and_evaluation():
    # WalkVector is Walk vectorised by hand: the registry hands it out instead of the list.
    own = make_vector_env("t_walk_vector", num_envs=3, seed=7, n_agents=2, max_steps=5)
    listed = make_vector_env("t_walk", num_envs=3, seed=7, n_agents=2, max_steps=5)
    assert type(own).__name__ == "WalkVector" and own.max_steps == 5
    np.testing.assert_array_equal(own.reset(), listed.reset())
    rng = np.random.default_rng(0)
    for _ in range(14):  # auto-resets by termination (6 steps) and by the cap (5 steps)
        actions = rng.integers(0, 2, size=(3, 2))
        a, b = own.step(actions), listed.step(actions)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    probe_task(own)
    with pytest.raises(ComponentError, match=r"tasks:not_vector returned a .*Walk, not a src.envs"):
        make_vector_env("t_not_vector", num_envs=1, n_agents=2, max_steps=5)
    with pytest.raises(ComponentError, match=r"returned a VectorEnv with n_agents=2, not 3"):
        make_vector_env("t_walk_vector", num_envs=1, n_agents=3, max_steps=5)


def test_a_narrow_frame_keeps_its_status_strip_as_the_counts_grow():
    # The example task draws frames 192 pixels wide: the status line wraps differently as its
    # numbers grow, unless the strip is laid out for the largest counts of the episode.
    frame, costs = np.zeros((48, 192, 3), dtype=np.uint8), np.zeros(2)
    counts = [(1, 0, 0), (40, 40, 80)]
    widest = status_text(step=40, violations=40, interventions=80)

    def height(step: int, violations: int, interventions: int, **layout: object) -> int:
        marked = annotate_frame(
            frame,
            step=step,
            violations=violations,
            costs=costs,
            intervened=None,
            interventions=interventions,
            **layout,
        )
        return marked.shape[0]

    assert len({height(*c, widest=widest) for c in counts}) == 1
    assert len({height(*c) for c in counts}) == 2  # what such videos had to avoid
