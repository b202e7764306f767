"""Contract tests run over every registered env: PettingZoo API, vector interface, seeding.

Tasks given by import path run through the same tests: two third-party mpe2 envs (agents of
different observation sizes, costs from named cost functions) and the README's example task.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

from src.custom import register_env
from src.envs import ENVS, StepResult, joint_observation, make_env, make_vector_env
from src.envs.base import VectorEnv

CUSTOM = {
    "mpe2_tag": ("mpe2.simple_tag_v3:parallel_env", "mpe2_collisions"),
    "mpe2_adversary": ("mpe2.simple_adversary_v3:parallel_env", "mpe2_adversary_proximity"),
    "corridor": ("examples.corridor:Corridor", None),
}
# mamujoco's actions are Box arrays, not the integers these tests draw: its own module
# (tests/envs/test_mamujoco.py) runs the same contract with Box actions.
NAMES = sorted(name for name in ENVS if name != "mamujoco") + sorted(CUSTOM)
# Small episode caps keep the runs short while still crossing several auto-resets.
CAP = {"hazard_grid": 12, "intersection": 12, "spread": 6, "spread_mpe2": 6}
CAP.update(dict.fromkeys(CUSTOM, 6))
# The example task has neither a global state() nor AEC metadata.
WITH_STATE = [name for name in NAMES if name != "corridor"]


@pytest.fixture(autouse=True)
def _custom_tasks() -> None:
    for name, (factory, cost) in CUSTOM.items():
        register_env(name, factory, cost)


def random_actions(rng: np.random.Generator, env: VectorEnv) -> np.ndarray:
    return rng.integers(0, env.n_actions, size=(env.num_envs, env.n_agents))


def rollout(env: VectorEnv, seed: int | list[int], steps: int, action_seed: int = 0) -> list:
    rng = np.random.default_rng(action_seed)
    results = [env.reset(seed)]
    for _ in range(steps):
        results.append(env.step(random_actions(rng, env)))
    return results


def assert_same_rollout(a: list, b: list) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for x, y in zip(a[1:], b[1:], strict=True):
        for field in StepResult._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=field)


@pytest.mark.parametrize("name", NAMES)
def test_parallel_api_and_seed(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports problems as warnings
        parallel_api_test(make_env(name, max_steps=CAP[name]), num_cycles=200)
        parallel_seed_test(lambda: make_env(name, max_steps=CAP[name]), num_cycles=200)


@pytest.mark.parametrize("name", WITH_STATE)
def test_parallel_env_costs_state_render(name):
    env = make_env(name, render_mode="rgb_array", max_steps=CAP[name])
    obs, infos = env.reset(seed=3)
    assert set(obs) == set(env.possible_agents)
    assert env.state().shape == env.state_space.shape
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert env.metadata["render_fps"] > 0 and env.metadata["is_parallelizable"]
    steps = 0
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        obs, rewards, _, _, infos = env.step(actions)
        steps += 1
        for agent in env.possible_agents:
            assert infos[agent]["cost"] in (0.0, 1.0)
            assert isinstance(rewards[agent], float)
            assert env.observation_space(agent).contains(obs[agent])
        assert env.state().shape == env.state_space.shape
        assert env.render().shape == frame.shape
    assert steps <= CAP[name]
    assert env.step({}) == ({}, {}, {}, {}, {})


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cap_found_by_infer_episode_cap(name):
    wrappers = pytest.importorskip("src.core.wrappers")
    env = make_env(name, max_steps=7)
    assert wrappers.infer_episode_cap(env) == 7
    # An instance attribute, so the search never relies on __getattr__ forwarding.
    assert 7 in (vars(env).get("max_steps"), vars(env).get("max_cycles"))


@pytest.mark.parametrize("name", NAMES)
def test_parallel_view_equals_vector_copy(name):
    par = make_env(name, max_steps=CAP[name])
    vec = make_vector_env(name, num_envs=1, seed=11, max_steps=CAP[name])
    obs, _ = par.reset(seed=11)
    vec_obs = vec.reset()
    rng = np.random.default_rng(5)
    for agent_index, agent in enumerate(par.possible_agents):
        # Agents observing fewer entries than the largest are zero-padded in the vector env.
        np.testing.assert_array_equal(obs[agent], vec_obs[0, agent_index, : obs[agent].size])
    while par.agents:
        joint = random_actions(rng, vec)
        obs, rewards, terminations, truncations, infos = par.step(
            {agent: int(joint[0, i]) for i, agent in enumerate(par.possible_agents)}
        )
        result = vec.step(joint)
        for i, agent in enumerate(par.possible_agents):
            np.testing.assert_array_equal(obs[agent], result.final_obs[0, i, : obs[agent].size])
            assert rewards[agent] == pytest.approx(float(result.reward[0, i]), abs=1e-6)
            assert infos[agent]["cost"] == result.cost[0, i]
            assert terminations[agent] == result.terminated[0, i]
            assert truncations[agent] == result.truncated[0, i]


@pytest.mark.parametrize("name", NAMES)
def test_vector_step_result_layout_and_autoreset(name):
    env = make_vector_env(name, num_envs=3, seed=0, max_steps=CAP[name])
    e, a, d = env.num_envs, env.n_agents, env.obs_dim
    assert len(env.agents) == a and env.max_steps == CAP[name]
    obs = env.reset()
    assert obs.shape == (e, a, d) and obs.dtype == np.float32
    assert joint_observation(obs).shape == (e, a * d)
    rng = np.random.default_rng(1)
    previous_step = np.zeros(e, dtype=np.int64)
    ends = 0
    for _ in range(3 * CAP[name]):
        result = env.step(random_actions(rng, env))
        assert isinstance(result, StepResult)
        assert result.obs.shape == result.final_obs.shape == (e, a, d)
        assert result.obs.dtype == result.final_obs.dtype == np.float32
        for field in ("reward", "cost", "terminated", "truncated"):
            assert getattr(result, field).shape == (e, a), field
        assert result.reward.dtype == result.cost.dtype == np.float32
        assert result.terminated.dtype == result.truncated.dtype == np.bool_
        assert result.episode_step.shape == (e,) and result.episode_step.dtype == np.int64
        np.testing.assert_array_equal(result.episode_step, previous_step + 1)
        done = result.terminated[:, 0] | result.truncated[:, 0]
        # Episodes end for all agents of a copy at once; never both flags.
        assert (result.terminated == result.terminated[:, :1]).all()
        assert (result.truncated == result.truncated[:, :1]).all()
        assert not (result.terminated & result.truncated).any()
        assert (result.episode_step <= env.max_steps).all()
        np.testing.assert_array_equal(
            result.truncated[:, 0],
            ~result.terminated[:, 0] & (result.episode_step == env.max_steps),
        )
        unfinished = ~done
        np.testing.assert_array_equal(result.obs[unfinished], result.final_obs[unfinished])
        assert result.obs is not result.final_obs
        previous_step = np.where(done, 0, result.episode_step)
        ends += int(done.sum())
    assert ends >= e  # every copy went through at least one auto-reset


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_trajectories(name):
    steps = 2 * CAP[name] + 3
    first = rollout(make_vector_env(name, num_envs=2, max_steps=CAP[name]), 42, steps)
    second = rollout(make_vector_env(name, num_envs=2, max_steps=CAP[name]), 42, steps)
    assert_same_rollout(first, second)
    other = rollout(make_vector_env(name, num_envs=2, max_steps=CAP[name]), 43, steps)
    assert not np.array_equal(first[0], other[0])
    # The constructor's seed is used by the first unseeded reset.
    third = rollout(make_vector_env(name, num_envs=2, seed=42, max_steps=CAP[name]), None, steps)
    assert_same_rollout(first, third)


@pytest.mark.parametrize("name", NAMES)
def test_batched_equals_single_copies(name):
    num_envs, seed, steps = 4, 20, 3 * CAP[name]
    batch_env = make_vector_env(name, num_envs=num_envs, max_steps=CAP[name])
    rng = np.random.default_rng(9)
    actions = rng.integers(0, batch_env.n_actions, size=(steps, num_envs, batch_env.n_agents))
    batch_obs = batch_env.reset(seed)
    batch = [batch_env.step(actions[t]) for t in range(steps)]
    for e in range(num_envs):
        single_env = make_vector_env(name, num_envs=1, max_steps=CAP[name])
        np.testing.assert_array_equal(single_env.reset(seed + e)[0], batch_obs[e])
        for t in range(steps):
            single = single_env.step(actions[t, e : e + 1])
            for field in StepResult._fields:
                if getattr(single, field) is None:  # a field the task does not report
                    assert getattr(batch[t], field) is None, field
                    continue
                np.testing.assert_array_equal(
                    getattr(single, field)[0], getattr(batch[t], field)[e], err_msg=field
                )


@pytest.mark.parametrize("name", NAMES)
def test_get_set_state_continues_exactly(name):
    env = make_vector_env(name, num_envs=2, seed=4, max_steps=CAP[name])
    rng = np.random.default_rng(2)
    env.reset()
    for _ in range(CAP[name] + 2):
        env.step(random_actions(rng, env))
    state = pickle.loads(pickle.dumps(env.get_state()))
    actions = [random_actions(rng, env) for _ in range(2 * CAP[name])]
    first = [env.step(a) for a in actions]
    env.set_state(state)
    second = [env.step(a) for a in actions]
    for x, y in zip(first, second, strict=True):
        for field in StepResult._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=field)
    # Restoring into a fresh env of the same parameters works too.
    fresh = make_vector_env(name, num_envs=2, max_steps=CAP[name])
    fresh.reset(0)
    fresh.set_state(state)
    np.testing.assert_array_equal(fresh.step(actions[0]).obs, first[0].obs)


@pytest.mark.parametrize("name", NAMES)
def test_set_state_rejects_foreign_state(name):
    env = make_vector_env(name, num_envs=2, seed=0)
    env.reset()
    state = env.get_state()
    other = make_vector_env(name, num_envs=2, seed=0, max_steps=CAP[name])
    other.reset()
    with pytest.raises(ValueError, match="state"):
        other.set_state(state)
    with pytest.raises(ValueError, match="dict"):
        env.set_state([1, 2])


@pytest.mark.parametrize("name", NAMES)
def test_vector_render(name):
    env = make_vector_env(name, num_envs=2, seed=0)
    env.reset()
    frame = env.render(1)
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    with pytest.raises(ValueError, match="index"):
        env.render(2)
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_bad_actions_and_seeds_are_rejected(name):
    env = make_vector_env(name, num_envs=2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, env.n_agents), dtype=np.int64))
    env.reset()
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((3, env.n_agents), dtype=np.int64))
    with pytest.raises(ValueError, match="integers"):
        env.step(np.zeros((2, env.n_agents), dtype=np.float32))
    with pytest.raises(ValueError, match="lie in"):
        env.step(np.full((2, env.n_agents), env.n_actions))
    with pytest.raises(ValueError, match="seed"):
        env.reset([1, 2, 3])
    with pytest.raises(ValueError, match="seed"):
        env.reset(-1)
    with pytest.raises(ValueError, match="seed"):
        env.reset(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_the_cap_is_hidden_from_observations(name):
    """Envs that differ only in max_steps show identical observations until the cap."""
    short = make_vector_env(name, num_envs=2, seed=8, max_steps=5)
    long = make_vector_env(name, num_envs=2, seed=8, max_steps=50)
    np.testing.assert_array_equal(short.reset(), long.reset())
    rng = np.random.default_rng(4)
    for _ in range(4):
        actions = random_actions(rng, short)
        np.testing.assert_array_equal(short.step(actions).obs, long.step(actions).obs)
    actions = random_actions(rng, short)
    a, b = short.step(actions), long.step(actions)
    np.testing.assert_array_equal(a.final_obs, b.final_obs)
    assert a.truncated[~a.terminated].all() and not b.truncated.any()
