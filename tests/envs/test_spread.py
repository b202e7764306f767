"""spread: the native batched core equals mpe2's simple_spread_v3 seed for seed.

``spread_mpe2`` (a loop over mpe2 envs, itself checked against bare mpe2 below) is the
reference; the native ``spread`` must give the same observations, rewards, costs, truncations
and auto-resets for the same seeds and actions, with discrete and continuous actions.
"""

from __future__ import annotations

import io
import json
import logging
import sys

import numpy as np
import pytest
from mpe2 import simple_spread_v3

from src.envs import StepResult, make_env, make_vector_env
from src.envs.spread import SpreadVectorEnv
from src.envs.spread_core import (
    AGENT_COLOUR,
    COLLISION_COLOUR,
    COLLISION_DISTANCE,
    LANDMARK_COLOUR,
    NativeSpreadVectorEnv,
    SpreadConfig,
)
from src.envs.witness import SpreadTeam, rollout_team

ATOL = 1e-6


@pytest.fixture(autouse=True)
def _quiet_mpe2(monkeypatch):
    """mpe2 logs a warning for every float64 action (its action space is float32)."""
    monkeypatch.setattr(logging.getLogger("pettingzoo.utils.env_logger"), "disabled", True)


def policy_actions(
    rng: np.random.Generator, obs: np.ndarray, *, continuous: bool, dtype: type = np.float32
) -> np.ndarray:
    """Random actions, half of the time pushing every agent to the origin (many collisions)."""
    num_envs, n_agents = obs.shape[:2]
    pos = obs[:, :, 2:4]
    crowd = rng.random((num_envs, 1)) < 0.5
    if continuous:
        random = rng.uniform(-0.3, 1.3, size=(num_envs, n_agents, 5))  # clipped by both envs
        towards = np.zeros_like(random)
        towards[:, :, 1] = pos[:, :, 0] > 0
        towards[:, :, 2] = pos[:, :, 0] <= 0
        towards[:, :, 3] = pos[:, :, 1] > 0
        towards[:, :, 4] = pos[:, :, 1] <= 0
        return np.where(crowd[:, :, None], towards, random).astype(dtype)
    random = rng.integers(0, 5, size=(num_envs, n_agents))
    x_axis = np.abs(pos[:, :, 0]) > np.abs(pos[:, :, 1])
    towards = np.where(x_axis, np.where(pos[:, :, 0] > 0, 1, 2), np.where(pos[:, :, 1] > 0, 3, 4))
    return np.where(crowd, towards, random)


def assert_results_match(native: StepResult, reference: StepResult, context: str) -> None:
    for field in ("obs", "final_obs", "reward"):
        np.testing.assert_allclose(
            getattr(native, field),
            getattr(reference, field),
            rtol=0,
            atol=ATOL,
            err_msg=f"{field} {context}",
        )
    for field in ("cost", "terminated", "truncated", "episode_step"):
        np.testing.assert_array_equal(
            getattr(native, field), getattr(reference, field), err_msg=f"{field} {context}"
        )


def compare_with_mpe2(
    params: dict, *, num_envs: int, episodes: int, seed: int, dtype: type = np.float32
) -> dict[str, int]:
    """Run native spread and spread_mpe2 side by side; returns counts of what was covered."""
    native = make_vector_env("spread", num_envs=num_envs, seed=seed, **params)
    reference = make_vector_env("spread_mpe2", num_envs=num_envs, seed=seed, **params)
    obs = native.reset()
    np.testing.assert_allclose(obs, reference.reset(), rtol=0, atol=ATOL, err_msg="reset")
    rng = np.random.default_rng(seed)
    continuous = params.get("continuous_actions", False)
    counts = {"episodes": 0, "collisions": 0, "steps": 0}
    for t in range(episodes * native.max_steps):
        actions = policy_actions(rng, obs, continuous=continuous, dtype=dtype)
        result = native.step(actions)
        assert_results_match(result, reference.step(actions), f"at step {t}, {params}")
        obs = result.obs
        counts["episodes"] += int(result.truncated[:, 0].sum())
        counts["collisions"] += int(result.cost.sum())
        counts["steps"] += num_envs
    return counts


@pytest.mark.parametrize(
    ("params", "num_envs", "episodes", "seed"),
    [
        ({}, 6, 3, 0),
        ({"n_agents": 5, "local_ratio": 0.2, "max_steps": 15}, 4, 2, 100),
        ({"n_agents": 1, "local_ratio": 0.0, "max_steps": 10}, 2, 2, 7),
        ({"n_agents": 2, "local_ratio": 1.0, "max_steps": 8}, 2, 2, 2**64 - 2),
    ],
)
def test_discrete_actions_match_mpe2(params, num_envs, episodes, seed):
    counts = compare_with_mpe2(params, num_envs=num_envs, episodes=episodes, seed=seed)
    assert counts["episodes"] == num_envs * episodes  # every copy went through auto-resets
    if params.get("n_agents", 3) > 1:
        assert counts["collisions"] > 0  # the comparison covered contact forces and costs


@pytest.mark.parametrize(
    ("params", "dtype", "seed"),
    [
        ({"continuous_actions": True}, np.float32, 11),
        ({"continuous_actions": True, "n_agents": 4, "local_ratio": 0.9}, np.float64, 12),
    ],
)
def test_continuous_actions_match_mpe2(params, dtype, seed):
    counts = compare_with_mpe2(params, num_envs=4, episodes=2, seed=seed, dtype=dtype)
    assert counts["episodes"] == 8 and counts["collisions"] > 0


def test_continuous_actions_match_mpe2_over_30_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copy e of a batch seeded s plays reset seed s + e: 30 copies are 30 seeds, equal to
    mpe2's bit for bit (no tolerance)."""
    monkeypatch.setattr(sys.modules[__name__], "ATOL", 0.0)
    params = {"continuous_actions": True, "max_steps": 25}
    counts = compare_with_mpe2(params, num_envs=30, episodes=1, seed=300)
    assert counts["episodes"] == 30 and counts["collisions"] > 0


def test_unseeded_resets_continue_each_copy_stream_like_mpe2():
    native = make_vector_env("spread", num_envs=3, seed=5)
    reference = make_vector_env("spread_mpe2", num_envs=3, seed=5)
    for _ in range(3):  # the constructor's seed, then two continued streams
        np.testing.assert_array_equal(native.reset(), reference.reset())
    np.testing.assert_array_equal(native.reset([9, 4, 9]), reference.reset([9, 4, 9]))


@pytest.mark.parametrize("continuous", [False, True])
def test_parallel_view_matches_bare_mpe2(continuous):
    """The ParallelEnv view returns exactly what mpe2's parallel env returns."""
    bare = simple_spread_v3.parallel_env(
        N=3, max_cycles=7, continuous_actions=continuous, benchmark_data=True
    )
    view = make_env("spread", max_steps=7, continuous_actions=continuous)
    assert vars(view)["max_cycles"] == 7 and view.metadata["name"] == "spread"
    for agent in bare.possible_agents:
        assert view.observation_space(agent) == bare.observation_space(agent)
        assert view.action_space(agent) == bare.action_space(agent)
    assert view.state_space == bare.state_space
    rng = np.random.default_rng(3)
    collisions = 0
    for episode in range(4):
        seed = 40 + episode if episode < 2 else None  # then continue the stream
        bare_obs, _ = bare.reset(seed=seed)
        obs, infos = view.reset(seed=seed)
        assert infos == {agent: {} for agent in bare.possible_agents}
        for agent in bare.possible_agents:
            np.testing.assert_array_equal(obs[agent], bare_obs[agent])
        while bare.agents:
            joint = policy_actions(
                rng, np.array([obs[a] for a in view.agents])[None], continuous=continuous
            )[0]
            if continuous:
                joint = np.clip(joint, 0.0, 1.0)  # mpe2 warns about actions it clips
            actions = {agent: joint[i] for i, agent in enumerate(bare.possible_agents)}
            expected = bare.step(actions)
            got = view.step(actions)
            obs = got[0]
            for agent in bare.possible_agents:
                np.testing.assert_allclose(obs[agent], expected[0][agent], rtol=0, atol=ATOL)
                assert got[1][agent] == pytest.approx(expected[1][agent], abs=ATOL)
                assert got[2][agent] == expected[2][agent]
                assert got[3][agent] == expected[3][agent]
                np.testing.assert_allclose(
                    got[4][agent]["benchmark_data"],
                    expected[4][agent]["benchmark_data"],
                    rtol=0,
                    atol=ATOL,
                )
                cost = float(expected[4][agent]["benchmark_data"][1] > 0)
                assert got[4][agent]["cost"] == cost
                collisions += int(cost)
            np.testing.assert_allclose(view.state(), bare.state(), rtol=0, atol=ATOL)
            assert view.agents == bare.agents
    assert collisions > 0


def test_mpe2_reference_reproduces_bare_mpe2_and_costs_its_collisions():
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
        actions = policy_actions(rng, obs, continuous=False)
        bare_obs, rewards, _, truncations, infos = bare.step(
            {a: int(actions[0, i]) for i, a in enumerate(agents)}
        )
        result = env.step(actions)
        obs = result.obs
        np.testing.assert_array_equal(result.final_obs[0], [bare_obs[a] for a in agents])
        np.testing.assert_allclose(result.reward[0], [rewards[a] for a in agents], rtol=1e-6)
        expected_cost = [float(infos[a]["benchmark_data"][1] > 0) for a in agents]
        np.testing.assert_array_equal(result.cost[0], expected_cost)
        np.testing.assert_array_equal(result.truncated[0], [truncations[a] for a in agents])
        collisions += int(sum(expected_cost))
        if not bare.agents:
            bare_obs, _ = bare.reset()
            np.testing.assert_array_equal(result.obs[0], [bare_obs[a] for a in agents])
    assert collisions > 0


def force_positions(env: NativeSpreadVectorEnv, agents: list[list[float]]) -> None:
    state = env.get_state()
    state["pos"][:] = np.array(agents, dtype=np.float64)
    state["vel"][:] = 0.0
    env.set_state(state)


def test_forced_collision_costs_the_two_agents_only_in_both_envs():
    native = NativeSpreadVectorEnv(SpreadConfig(), num_envs=2, seed=0)
    native.reset()
    force_positions(native, [[0.0, 0.0], [0.1, 0.0], [0.9, 0.9]])
    result = native.step(np.zeros((2, 3), dtype=np.int64))
    np.testing.assert_array_equal(result.cost, [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    # The contact force pushed the two apart along x; the lone agent did not move.
    vel = native.get_state()["vel"]
    assert vel[0, 0, 0] < 0 < vel[0, 1, 0] and not vel[0, 2].any()
    # The mpe2 reference agrees.
    reference = SpreadVectorEnv(SpreadConfig(), num_envs=2, seed=0)
    reference.reset()
    state = reference.get_state()
    for copy in state["copies"]:
        for agent, pos in enumerate([[0.0, 0.0], [0.1, 0.0], [0.9, 0.9]]):
            copy["p_pos"][agent] = np.array(pos)
        for vel in copy["p_vel"]:
            vel[:] = 0.0
    reference.set_state(state)
    expected = reference.step(np.zeros((2, 3), dtype=np.int64))
    assert_results_match(result, expected, "forced collision")


def round_trip_json(state: dict) -> dict:
    """The state through JSON text: arrays become lists, ints stay ints."""

    def encode(value: object) -> object:
        return value.tolist() if isinstance(value, np.ndarray) else value

    return json.loads(json.dumps({key: encode(value) for key, value in state.items()}))


def round_trip_npz(state: dict) -> dict:
    """The state's arrays through an npz file without pickle, the rest through JSON."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    plain = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as loaded:
        restored = {key: loaded[key] for key in loaded.files}
    return restored | json.loads(json.dumps(plain))


@pytest.mark.parametrize("round_trip", [round_trip_json, round_trip_npz])
@pytest.mark.parametrize("continuous", [False, True])
def test_state_round_trips_without_pickle_and_continues_exactly(round_trip, continuous):
    env = make_vector_env("spread", num_envs=3, seed=1, max_steps=6, continuous_actions=continuous)
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(8):
        obs = env.step(policy_actions(rng, obs, continuous=continuous)).obs
    state = env.get_state()
    assert all(isinstance(value, np.ndarray | str | dict) for value in state.values()), {
        key: type(value) for key, value in state.items()
    }
    assert state["rng"].dtype == np.uint64
    actions = [policy_actions(rng, obs, continuous=continuous) for _ in range(14)]
    first = [env.step(a) for a in actions]  # crosses auto-resets: the streams must continue
    fresh = make_vector_env("spread", num_envs=3, max_steps=6, continuous_actions=continuous)
    fresh.reset(99)
    fresh.set_state(round_trip(state))
    for x, y in zip(first, [fresh.step(a) for a in actions], strict=True):
        for field in StepResult._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=field)
    np.testing.assert_array_equal(env.render(2), fresh.render(2))


def test_set_state_rejects_bad_entries():
    env = NativeSpreadVectorEnv(SpreadConfig(), num_envs=2, seed=0)
    env.reset()
    state = env.get_state()
    with pytest.raises(ValueError, match="lacks"):
        env.set_state({k: v for k, v in state.items() if k != "rng"})
    with pytest.raises(ValueError, match="shape"):
        env.set_state(state | {"pos": np.zeros((2, 2, 2))})
    with pytest.raises(ValueError, match="64-bit"):
        env.set_state(state | {"rng": np.full((2, 6), -1)})


BAD_PARAMS = [
    ({"n_agents": 0}, "n_agents"),
    ({"n_agents": 2.5}, "n_agents"),
    ({"max_steps": 0}, "max_steps"),
    ({"local_ratio": 1.5}, "local_ratio"),
    ({"local_ratio": -0.5}, "local_ratio"),
    ({"local_ratio": None}, "local_ratio"),
    ({"continuous_actions": "yes"}, "continuous_actions"),
    ({"continuous_actions": 1}, "continuous_actions"),
    ({"dynamic_rescaling": False}, "dynamic_rescaling"),
    ({"spawn": "apart"}, "spawn"),
    ({"spawn": None}, "spawn"),
]


@pytest.mark.parametrize(("params", "match"), BAD_PARAMS)
def test_bad_parameters_fail_alike_in_both_envs(params, match):
    messages = set()
    for name in ("spread", "spread_mpe2"):
        for make in (
            lambda name=name: make_env(name, **params),
            lambda name=name: make_vector_env(name, num_envs=2, **params),
        ):
            with pytest.raises(ValueError, match=match) as error:
                make()
            messages.add(str(error.value).replace("spread_mpe2", "spread"))
    assert len(messages) == 1 and "\n" not in messages.pop()


def test_bad_actions_are_rejected():
    discrete = NativeSpreadVectorEnv(SpreadConfig(), num_envs=2, seed=0)
    continuous = NativeSpreadVectorEnv(SpreadConfig(continuous_actions=True), num_envs=2, seed=0)
    discrete.reset()
    continuous.reset()
    assert discrete.action_shape == () and continuous.action_shape == (5,)
    with pytest.raises(ValueError, match="integers"):
        discrete.step(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        continuous.step(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="float32 or float64"):
        continuous.step(np.zeros((2, 3, 5), dtype=np.int64))
    bad = np.zeros((2, 3, 5), dtype=np.float32)
    bad[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        continuous.step(bad)


def test_parallel_view_stops_after_the_cap_and_rejects_missing_agents():
    env = make_env("spread", max_steps=4, n_agents=2)
    env.reset(seed=1)
    with pytest.raises(ValueError, match="agent_1"):
        env.step({"agent_0": 0})
    steps = 0
    while env.agents:
        _, _, terminations, truncations, infos = env.step(dict.fromkeys(env.agents, 0))
        steps += 1
        for info in infos.values():
            assert info["cost"] == float(info["benchmark_data"][1] > 0)
    assert steps == 4 and all(truncations.values()) and not any(terminations.values())
    assert env.step({"agent_0": 0, "agent_1": 0}) == ({}, {}, {}, {}, {})


def test_render_draws_entities_where_mpe2_does():
    """Agents and landmarks as discs in mpe2's colours; the shapes overlap mpe2's frame."""
    for seed in range(3):
        bare = simple_spread_v3.parallel_env(N=3, render_mode="rgb_array")
        bare.reset(seed=seed)
        view = make_env("spread", render_mode="rgb_array")
        view.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(5):
            actions = {agent: int(rng.integers(5)) for agent in bare.possible_agents}
            bare.step(actions)
            view.step(actions)
        expected, frame = bare.render(), view.render()
        assert frame.shape == expected.shape == (700, 700, 3) and frame.dtype == np.uint8
        drawn, drawn_expected = (frame != 255).any(axis=2), (expected != 255).any(axis=2)
        overlap = (drawn & drawn_expected).sum() / (drawn | drawn_expected).sum()
        assert overlap > 0.9, overlap
        agent_pixels = (frame == AGENT_COLOUR).all(axis=2)
        landmark_pixels = (frame == LANDMARK_COLOUR).all(axis=2)
        assert agent_pixels.sum() > 1000 and landmark_pixels.sum() > 100
        bare.close()


def test_render_rings_colliding_agents_in_red():
    env = NativeSpreadVectorEnv(SpreadConfig(), num_envs=1, seed=0)
    env.reset()

    def frame_with(agents: list[list[float]]) -> np.ndarray:
        # Camera range 0.5 at the start and now: x = 0 is column 350, x = 0.1 column 413,
        # x = 0.5 column 665; agent radius 0.15 * 350 * 0.9 = 47 pixels.
        state = env.get_state()
        state["pos"][0] = agents
        state["landmarks"][0] = [[-0.2, 0.2], [0.2, 0.2], [0.0, 0.4]]
        state["cam_range"][0] = 0.5
        env.set_state(state)
        return env.render()

    frame = frame_with([[-0.5, -0.5], [0.5, 0.5], [0.5, -0.5]])
    assert not (frame == COLLISION_COLOUR).all(axis=2).any()
    np.testing.assert_array_equal(frame[350, 350], [255, 255, 255])  # background
    frame = frame_with([[0.0, 0.0], [0.1, 0.0], [0.5, -0.5]])
    red = (frame == COLLISION_COLOUR).all(axis=2)
    columns = np.flatnonzero(red.any(axis=0))
    # Rings around the two touching agents only, none around the third.
    assert red.sum() > 500 and columns.min() >= 350 - 56 and columns.max() <= 413 + 56
    np.testing.assert_array_equal(frame[350 + 315, 665], AGENT_COLOUR)  # third agent's centre


# ---------------------------------------------------------------------- spawn: separated


def _pair_distances(pos: np.ndarray) -> np.ndarray:
    """``[E, A * (A - 1) / 2]`` centre distances of every pair of agents."""
    i, j = np.triu_indices(pos.shape[1], k=1)
    rel = pos[:, i] - pos[:, j]
    return np.sqrt(rel[..., 0] * rel[..., 0] + rel[..., 1] * rel[..., 1])


@pytest.mark.parametrize("n_agents", [2, 3, 4])
def test_separated_spawn_never_places_two_agents_within_the_collision_distance(n_agents):
    copies = 10_000
    env = NativeSpreadVectorEnv(
        SpreadConfig(n_agents=n_agents, spawn="separated"), num_envs=copies, seed=range(copies)
    )
    env.reset()
    first = env.get_state()
    assert _pair_distances(first["pos"]).min() >= COLLISION_DISTANCE
    env.reset()  # an unseeded reset continues every copy's stream: new, still separated
    second = env.get_state()
    assert _pair_distances(second["pos"]).min() >= COLLISION_DISTANCE
    assert not np.array_equal(first["pos"], second["pos"])
    # mpe2's spawning puts agents within the collision distance on the same seeds.
    mpe2 = NativeSpreadVectorEnv(SpreadConfig(n_agents=n_agents), num_envs=copies, seed=0)
    mpe2.reset(seed=range(copies))
    assert (_pair_distances(mpe2.get_state()["pos"]).min(axis=1) < COLLISION_DISTANCE).any()
    # Landmarks and agents still cover the square uniformly.
    for entity in ("pos", "landmarks"):
        assert np.abs(first[entity]).max() <= 1 and abs(first[entity].mean()) < 0.02


def test_separated_spawn_keeps_the_layouts_mpe2_spawns_apart():
    copies = 2_000
    layouts = {}
    for spawn in ("mpe2", "separated"):
        env = NativeSpreadVectorEnv(SpreadConfig(n_agents=3, spawn=spawn), num_envs=copies)
        env.reset(seed=range(copies))
        layouts[spawn] = env.get_state()
    apart = _pair_distances(layouts["mpe2"]["pos"]).min(axis=1) >= COLLISION_DISTANCE
    assert 0.7 * copies < apart.sum() < copies
    for key in ("pos", "landmarks"):
        same = (layouts["mpe2"][key] == layouts["separated"][key]).all(axis=(1, 2))
        np.testing.assert_array_equal(same, apart)  # the overlapping ones are drawn again


def test_separated_spawn_is_a_function_of_the_seed_alone():
    config = SpreadConfig(n_agents=4, spawn="separated")
    batch = NativeSpreadVectorEnv(config, num_envs=6, seed=[7, 8, 9, 10, 11, 12])
    again = NativeSpreadVectorEnv(config, num_envs=6, seed=[7, 8, 9, 10, 11, 12])
    for env in (batch, again):
        env.reset()
    np.testing.assert_array_equal(batch.get_state()["pos"], again.get_state()["pos"])
    np.testing.assert_array_equal(batch.get_state()["landmarks"], again.get_state()["landmarks"])
    # Copy e of a batch equals a single env with its seed, whatever the other copies reject.
    for e, seed in enumerate([7, 8, 9, 10, 11, 12]):
        single = NativeSpreadVectorEnv(config, num_envs=1, seed=seed)
        single.reset()
        for key in ("pos", "landmarks", "rng"):
            np.testing.assert_array_equal(single.get_state()[key][0], batch.get_state()[key][e])
    # Auto-resets draw from the same stream: two envs stepped alike stay alike.
    rng = np.random.default_rng(0)
    short = SpreadConfig(n_agents=4, max_steps=3, spawn="separated")
    left = NativeSpreadVectorEnv(short, num_envs=6, seed=1)
    right = NativeSpreadVectorEnv(short, num_envs=6, seed=1)
    left.reset(), right.reset()
    for _ in range(10):
        actions = rng.integers(0, 5, size=(6, 4))
        np.testing.assert_array_equal(left.step(actions).obs, right.step(actions).obs)
    assert _pair_distances(left.get_state()["pos"]).min() > 0


def test_mpe2_spawn_is_the_default_and_spread_mpe2_has_no_other():
    assert SpreadConfig().spawn == "mpe2"
    default = make_vector_env("spread", num_envs=4, seed=3)
    explicit = make_vector_env("spread", num_envs=4, seed=3, spawn="mpe2")
    reference = make_vector_env("spread_mpe2", num_envs=4, seed=3, spawn="mpe2")
    np.testing.assert_array_equal(default.reset(), explicit.reset())
    np.testing.assert_allclose(default.observe(), reference.reset(), rtol=0, atol=ATOL)
    for make in (
        lambda: make_vector_env("spread_mpe2", num_envs=2, spawn="separated"),
        lambda: make_env("spread_mpe2", spawn="separated"),
    ):
        with pytest.raises(ValueError, match="spawn='separated' is native spread's alone"):
            make()


@pytest.mark.parametrize("n_agents", [3, 4])
def test_no_first_step_violation_under_separated_spawn(n_agents):
    """Step 1 moves agents by their velocity at reset (zero): no action can collide them."""
    copies = 10_000
    seeds = [1_000_000 + i for i in range(copies)]
    rng = np.random.default_rng(n_agents)
    for spawn, still in (("separated", 0), ("mpe2", None)):
        env = make_vector_env("spread", num_envs=copies, n_agents=n_agents, spawn=spawn)
        for actions in (
            np.zeros((copies, n_agents), dtype=np.int64),  # every agent keeps still
            rng.integers(0, 5, size=(copies, n_agents)),
        ):
            env.reset(seed=seeds)
            violations = int((env.step(actions).cost > 0).any(axis=1).sum())
            if still is None:
                assert violations > 0.1 * copies  # mpe2's overlapping spawns
            else:
                assert violations == still


def test_separated_state_round_trips_and_continues_exactly():
    config = SpreadConfig(n_agents=4, max_steps=4, spawn="separated")
    env = NativeSpreadVectorEnv(config, num_envs=5, seed=2)
    env.reset()
    rng = np.random.default_rng(1)
    env.step(rng.integers(0, 5, size=(5, 4)))
    copy = NativeSpreadVectorEnv(config, num_envs=5)
    copy.set_state(env.get_state())
    for _ in range(9):  # through two auto-resets, which draw by rejection
        actions = rng.integers(0, 5, size=(5, 4))
        a, b = env.step(actions), copy.step(actions)
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.reward, b.reward)


def test_the_parallel_view_spawns_separated_agents():
    env = make_env("spread", n_agents=4, spawn="separated")
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        pos = np.stack([obs[agent][2:4] for agent in env.possible_agents]).astype(np.float64)
        assert _pair_distances(pos[None]).min() >= COLLISION_DISTANCE - 1e-6  # float32 obs


# ---------------------------------------------------------------------- the witness team


def _spread_factory(n_agents: int, spawn: str, max_steps: int):
    def make(copies: int) -> NativeSpreadVectorEnv:
        config = SpreadConfig(n_agents=n_agents, max_steps=max_steps, spawn=spawn)
        return NativeSpreadVectorEnv(config, num_envs=copies)

    return make


@pytest.mark.parametrize("n_agents", [3, 4])
def test_the_careful_spread_team_never_collides_while_the_careless_one_does(n_agents):
    make = _spread_factory(n_agents, "separated", 100)
    seeds = range(1_000_000, 1_000_300)
    careful = rollout_team(make, SpreadTeam(), seeds, horizon=100)
    careless = rollout_team(make, SpreadTeam(careful=False), seeds, horizon=100)
    assert careful.p_violation(100) == 0.0
    assert careless.p_violation(100) > 0.1
    # It still covers landmarks: most of what the careless team covers, and earns as much.
    assert careful.goals.mean() >= 0.9 * careless.goals.mean() > 0.5 * n_agents * 100
    assert careful.returns is not None and careless.returns is not None
    assert careful.returns.mean() >= 1.05 * careless.returns.mean()  # < 0: at most 5% lower


def test_under_mpe2_spawn_the_careful_team_violates_only_at_step_one():
    make = _spread_factory(3, "mpe2", 60)
    seeds = range(1_000_000, 1_000_300)
    careful = rollout_team(make, SpreadTeam(), seeds, horizon=60)
    env = make(len(seeds))
    env.reset(seed=list(seeds))
    overlapping = (_pair_distances(env.get_state()["pos"]) < COLLISION_DISTANCE).any(axis=1)
    np.testing.assert_array_equal(careful.first_violation > 0, overlapping)
    assert (careful.first_violation[overlapping] == 1).all()


def test_the_spread_team_checks_its_settings():
    with pytest.raises(ValueError, match="clearance"):
        SpreadTeam(clearance=0.2)
    with pytest.raises(ValueError, match="sidestep"):
        SpreadTeam(sidestep=1.5)
    env = NativeSpreadVectorEnv(SpreadConfig(continuous_actions=True), num_envs=1, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="discrete"):
        SpreadTeam()(env, np.random.default_rng(0), 0)
