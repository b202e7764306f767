"""`mamujoco`: Gymnasium-Robotics' mamujoco_v1 with Safety-Gymnasium's velocity cost.

The contract of tests/envs/test_api.py with Box actions (PettingZoo API, vector layout,
auto-reset, seeds, snapshots, frames), the cost against the robot's velocity, the workflow's
action kind, and the one line a process without MuJoCo gets. Every test but the last ones needs
MuJoCo and Gymnasium-Robotics and is skipped, saying so, when they cannot be imported.
"""

from __future__ import annotations

import gc
import pickle
import sys
import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

from src.config.workflow import WorkflowConfigError, check_workflow_config
from src.envs import StepResult, make_env, make_vector_env
from src.envs.base import VectorEnv
from src.envs.mamujoco import (
    INSTALL,
    VELOCITY_THRESHOLDS,
    MaMuJoCoConfig,
    MuJoCoUnavailableError,
    load_mamujoco,
)
from tests.custom.conftest import tiny_config


def _missing() -> str | None:
    try:
        load_mamujoco()
    except MuJoCoUnavailableError as error:
        return str(error)
    return None


MISSING = _missing()
needs_mujoco = pytest.mark.skipif(MISSING is not None, reason=f"{MISSING}")
CAP = 8  # episodes of 8 steps: several auto-resets in a few dozen steps
PAIRS = sorted(VELOCITY_THRESHOLDS)


def box_actions(rng: np.random.Generator, env: VectorEnv) -> np.ndarray:
    shape = (env.num_envs, env.n_agents, *env.action_shape)
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def rollout(env: VectorEnv, seed: int | None, steps: int, action_seed: int = 0) -> list:
    rng = np.random.default_rng(action_seed)
    return [env.reset(seed), *(env.step(box_actions(rng, env)) for _ in range(steps))]


def assert_same_results(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
            continue
        for field in StepResult._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=field)


def robot(env: object) -> object:
    """The Gymnasium MuJoCo env inside a ParallelEnv made by `make_env("mamujoco")`."""
    return env.env.single_agent_env.unwrapped  # type: ignore[attr-defined]


@needs_mujoco
@pytest.mark.parametrize(("scenario", "agent_conf"), PAIRS)
def test_reset_and_step_shapes_with_auto_reset(scenario, agent_conf):
    config = MaMuJoCoConfig(scenario=scenario, agent_conf=agent_conf)
    env = make_vector_env(
        "mamujoco", num_envs=2, seed=0, scenario=scenario, agent_conf=agent_conf, max_steps=CAP
    )
    e, a, d = env.num_envs, env.n_agents, env.obs_dim
    assert a == config.agents and env.max_steps == CAP
    assert env.action_kind == "box" and env.continuous_actions
    assert env.n_actions == int(np.prod(env.action_shape)) >= 1
    obs = env.reset()
    assert obs.shape == (e, a, d) and obs.dtype == np.float32
    rng = np.random.default_rng(1)
    previous, ends = np.zeros(e, dtype=np.int64), 0
    for _ in range(2 * CAP + 1):
        result = env.step(box_actions(rng, env))
        assert result.obs.shape == result.final_obs.shape == (e, a, d)
        for field in ("reward", "cost", "terminated", "truncated"):
            assert getattr(result, field).shape == (e, a), field
        assert result.reward.dtype == result.cost.dtype == np.float32
        # One robot: every agent gets its reward and its cost.
        assert (result.reward == result.reward[:, :1]).all()
        assert (result.cost == result.cost[:, :1]).all() and set(np.unique(result.cost)) <= {0, 1}
        np.testing.assert_array_equal(result.episode_step, previous + 1)
        done = result.terminated[:, 0] | result.truncated[:, 0]
        assert not (result.terminated & result.truncated).any()
        np.testing.assert_array_equal(
            result.truncated[:, 0], ~result.terminated[:, 0] & (result.episode_step == CAP)
        )
        np.testing.assert_array_equal(result.obs[~done], result.final_obs[~done])
        previous = np.where(done, 0, result.episode_step)
        ends += int(done.sum())
    assert ends >= e
    env.close()


@needs_mujoco
def test_parallel_api_and_seed():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports problems as warnings
        parallel_api_test(make_env("mamujoco", max_steps=CAP), num_cycles=40)
        parallel_seed_test(lambda: make_env("mamujoco", max_steps=CAP), num_cycles=40)


@needs_mujoco
def test_parallel_env_equals_copy_zero_of_the_vector_env():
    par = make_env("mamujoco", scenario="Ant", agent_conf="2x4", max_steps=CAP)
    vec = make_vector_env("mamujoco", num_envs=1, seed=11, scenario="Ant", agent_conf="2x4")
    obs, _ = par.reset(seed=11)
    first = np.stack([obs[agent] for agent in par.possible_agents]).astype(np.float32)
    np.testing.assert_array_equal(first, vec.reset()[0])
    rng = np.random.default_rng(5)
    while par.agents:
        joint = box_actions(rng, vec)
        obs, rewards, _, truncations, infos = par.step(
            {agent: joint[0, i] for i, agent in enumerate(par.possible_agents)}
        )
        result = vec.step(joint)
        for i, agent in enumerate(par.possible_agents):
            np.testing.assert_array_equal(obs[agent].astype(np.float32), result.final_obs[0, i])
            assert rewards[agent] == pytest.approx(float(result.reward[0, i]), rel=1e-6)
            assert infos[agent]["cost"] == result.cost[0, i]
    assert all(truncations.values()) and par.step({}) == ({}, {}, {}, {}, {})


@needs_mujoco
@pytest.mark.parametrize(
    ("scenario", "agent_conf", "qvel", "cost"),
    [
        ("HalfCheetah", "2x3", {0: 8.0}, 1.0),  # forward, past 3.227
        ("HalfCheetah", "2x3", {0: -8.0}, 1.0),  # Safety-Gymnasium compares |x_velocity| here
        ("HalfCheetah", "2x3", {0: 1.0}, 0.0),
        ("Ant", "2x4", {1: 6.0}, 1.0),  # sideways: the planar speed passes 2.522
        ("Ant", "2x4", {0: 1.0}, 0.0),
        ("Swimmer", "2x1", {0: 1.0}, 1.0),  # forward, past 0.04891
        ("Swimmer", "2x1", {0: -1.0}, 0.0),  # the signed x-velocity: backwards never costs
    ],
)
def test_cost_fires_when_the_velocity_exceeds_the_threshold(scenario, agent_conf, qvel, cost):
    env = make_env("mamujoco", scenario=scenario, agent_conf=agent_conf, max_steps=CAP)
    env.reset(seed=0)
    data = robot(env).data
    for index, value in qvel.items():
        data.qvel[index] = value
    zero = {agent: np.zeros(env.action_space(agent).shape, np.float32) for agent in env.agents}
    _, _, _, _, infos = env.step(zero)
    info = infos[env.possible_agents[0]]
    velocity = env.cost_function.velocity(info)
    threshold = VELOCITY_THRESHOLDS[(scenario, agent_conf)]
    assert (velocity > threshold) == (cost == 1.0), (velocity, threshold)
    assert [infos[agent]["cost"] for agent in env.possible_agents] == [cost] * len(infos)


@needs_mujoco
def test_cost_is_the_velocity_test_at_every_step():
    env = make_env("mamujoco", scenario="Ant", agent_conf="2x4", max_steps=40)
    env.reset(seed=3)
    seen = set()
    rng = np.random.default_rng(0)
    while env.agents:
        data = robot(env).data
        data.qvel[:2] += rng.normal(0.0, 1.5, size=2)  # push the torso around the threshold
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        _, _, _, _, infos = env.step(actions)
        info = infos["agent_0"]
        speed = np.sqrt(info["x_velocity"] ** 2 + info["y_velocity"] ** 2)
        assert info["cost"] == float(speed > VELOCITY_THRESHOLDS[("Ant", "2x4")])
        seen.add(info["cost"])
    assert seen == {0.0, 1.0}


@needs_mujoco
def test_same_seed_same_bits_and_batched_equals_single_copies():
    steps = 2 * CAP + 3
    first = rollout(make_vector_env("mamujoco", num_envs=2, max_steps=CAP), 42, steps)
    second = rollout(make_vector_env("mamujoco", num_envs=2, max_steps=CAP), 42, steps)
    assert_same_results(first, second)
    other = rollout(make_vector_env("mamujoco", num_envs=2, max_steps=CAP), 43, steps)
    assert not np.array_equal(first[0], other[0])
    # The constructor's seed serves the first unseeded reset.
    third = rollout(make_vector_env("mamujoco", num_envs=2, seed=42, max_steps=CAP), None, steps)
    assert_same_results(first, third)
    # Copy e of the batch is a single env seeded 42 + e given the same actions (auto-resets
    # continue each copy's own stream).
    rng = np.random.default_rng(0)
    actions = [box_actions(rng, make_vector_env("mamujoco", num_envs=2)) for _ in range(steps)]
    for e in range(2):
        single = make_vector_env("mamujoco", num_envs=1, max_steps=CAP)
        np.testing.assert_array_equal(single.reset(42 + e)[0], first[0][e])
        for t in range(steps):
            result = single.step(actions[t][e : e + 1])
            assert result.collision is None and result.arrived is None
            for field in ("obs", "final_obs", "reward", "cost", "terminated", "truncated"):
                np.testing.assert_array_equal(
                    getattr(result, field)[0], getattr(first[t + 1], field)[e], err_msg=field
                )


@needs_mujoco
@pytest.mark.parametrize(("scenario", "agent_conf"), PAIRS)
def test_restored_env_continues_bit_identically(scenario, agent_conf):
    params = {"scenario": scenario, "agent_conf": agent_conf, "max_steps": CAP}
    env = make_vector_env("mamujoco", num_envs=2, seed=4, **params)
    rng = np.random.default_rng(2)
    env.reset()
    for _ in range(CAP + 3):
        env.step(box_actions(rng, env))
    state = pickle.loads(pickle.dumps(env.get_state()))
    actions = [box_actions(rng, env) for _ in range(2 * CAP)]  # across auto-resets
    first = [env.step(a) for a in actions]
    env.set_state(state)
    assert_same_results(first, [env.step(a) for a in actions])
    # Into a fresh env of the same parameters, which had gone its own way.
    fresh = make_vector_env("mamujoco", num_envs=2, **params)
    rollout(fresh, 0, 5)
    fresh.set_state(state)
    assert_same_results(first, [fresh.step(a) for a in actions])


@needs_mujoco
def test_ant_restores_the_body_positions_its_step_reads():
    # Gymnasium's Ant measures its velocity from the torso position the last step left.
    env = make_vector_env("mamujoco", num_envs=1, seed=7, scenario="Ant", agent_conf="2x4")
    rng = np.random.default_rng(3)
    rollout(env, 7, 6)
    state = env.get_state()
    actions = [box_actions(rng, env) for _ in range(4)]
    first = [env.step(a) for a in actions]
    other = make_vector_env("mamujoco", num_envs=1, scenario="Ant", agent_conf="2x4")
    rollout(other, 1, 9)
    other.set_state(state)
    assert_same_results(first, [other.step(a) for a in actions])


@needs_mujoco
def test_foreign_or_broken_snapshots_are_refused():
    env = make_vector_env("mamujoco", num_envs=2, seed=0)
    env.reset()
    state = env.get_state()
    for other in (
        make_vector_env("mamujoco", num_envs=2, seed=0, max_steps=CAP),
        make_vector_env("mamujoco", num_envs=2, seed=0, scenario="Ant", agent_conf="2x4"),
    ):
        with pytest.raises(ValueError, match="state"):
            other.set_state(state)
    with pytest.raises(ValueError, match="dict"):
        env.set_state([1, 2])  # type: ignore[arg-type]
    broken = {**state, "copies": [{**state["copies"][0], "physics": np.zeros(3)}] * 2}
    with pytest.raises(ValueError, match="physics"):
        env.set_state(broken)
    with pytest.raises(RuntimeError, match="reset"):
        make_vector_env("mamujoco", num_envs=1).get_state()


@needs_mujoco
def test_bad_actions_and_parameters_are_refused():
    env = make_vector_env("mamujoco", num_envs=2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="finite floats"):
        env.step(np.zeros((2, 2, 3), dtype=np.int64))
    # Out-of-box actions are clipped to [-1, 1], as the Box says.
    clipped = make_vector_env("mamujoco", num_envs=2, seed=0)
    clipped.reset()
    big = np.full((2, 2, 3), 5.0, dtype=np.float32)
    np.testing.assert_array_equal(env.step(big).obs, clipped.step(np.ones_like(big)).obs)
    for params, match in (
        ({"scenario": "Humanoid", "agent_conf": "9|8"}, "no published velocity threshold"),
        ({"scenario": "Ant", "agent_conf": "2x3"}, "Ant 2x4, Ant 4x2"),
        ({"agent_conf": "6x1", "n_agents": 2}, "splits HalfCheetah among 6 agents"),
        ({"max_steps": 0}, "max_steps"),
        ({"agent_obsk": -1}, "agent_obsk"),
    ):
        with pytest.raises(ValueError, match=match):
            make_env("mamujoco", **params)


@needs_mujoco
# Gymnasium's viewer that failed to start raises in its __del__ (it has no GL context to free).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_frames_from_the_offscreen_renderer(monkeypatch):
    env = make_vector_env("mamujoco", num_envs=2, seed=0, max_steps=CAP)
    env.reset()
    env.step(np.zeros((2, 2, 3), dtype=np.float32))
    frame = env.render(1)
    assert frame.shape == (480, 480, 3) and frame.dtype == np.uint8 and frame.std() > 0
    with pytest.raises(ValueError, match="index"):
        env.render(2)
    par = make_env("mamujoco", render_mode="rgb_array", max_steps=CAP)
    assert par.metadata["render_fps"] == 20  # HalfCheetah's dt is 0.05 s
    # A renderer that cannot start says in one line what it needs.
    monkeypatch.setenv("MUJOCO_GL", "no_such_gl")
    broken = make_env("mamujoco", render_mode="rgb_array", max_steps=CAP)
    broken.reset(seed=0)
    with pytest.raises(RuntimeError, match="headless frames need EGL") as error:
        broken.render()
    assert "\n" not in str(error.value)
    del error
    gc.collect()


@needs_mujoco
def test_the_workflow_sees_box_actions():
    """An algorithm that takes Discrete actions only is refused on mamujoco, naming its Box."""
    config = tiny_config(["mamujoco"], ["reinforce"])
    config["custom_algos"] = {"reinforce": "examples.reinforce:Reinforce"}
    config["env_params"]["mamujoco"] = {"n_agents": 2, "max_steps": CAP}
    with pytest.raises(WorkflowConfigError, match="env mamujoco has box actions"):
        check_workflow_config(config)


def test_without_mujoco_one_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # `import mujoco` raises ImportError
    for build in (
        lambda: make_env("mamujoco"),
        lambda: make_vector_env("mamujoco", num_envs=2),
    ):
        with pytest.raises(MuJoCoUnavailableError) as error:
            build()
        message = str(error.value)
        assert "\n" not in message and INSTALL in message and "mujoco" in message
        assert isinstance(error.value, ImportError)
    config = tiny_config(["mamujoco"], ["ippo"])
    with pytest.raises(WorkflowConfigError, match=r"^config key 'env_params\.mamujoco'") as error:
        check_workflow_config(config)
    assert "\n" not in str(error.value) and INSTALL in str(error.value)


def test_parameters_are_checked_without_mujoco():
    assert MaMuJoCoConfig().velocity_threshold == 3.227
    assert MaMuJoCoConfig(scenario="Ant", agent_conf="4x2", n_agents=4).agents == 4
    with pytest.raises(ValueError, match="n_agents"):
        MaMuJoCoConfig(n_agents=0)


@needs_mujoco
def test_benchmark_tiny_run_fills_its_section(tmp_path):
    from benchmarks import mamujoco as bench

    path = tmp_path / "BENCHMARKS.md"
    results = bench.main(min_seconds=0.0, repeats=1, copies=(1,), path=path)
    text = path.read_text()
    assert bench.SECTION_HEADING in text and "<!-- mamujoco:start -->" in text
    assert [(row.scenario, row.copies) for row in results["rows"]] == [
        (scenario, 1) for scenario, _ in bench.SCENARIOS
    ]
    assert all(min(*row.ours, *row.bare) > 0 for row in results["rows"])
    assert results["render_seconds"] > 0 and results["snapshot_seconds"] > 0
