"""Registry errors, the counter-based random streams and the NumPy renderer."""

from __future__ import annotations

import numpy as np
import pytest

from src.envs import ENVS, make_config, make_env, make_vector_env
from src.envs.grid_core import GridVectorEnv
from src.envs.rendering import agent_colours
from src.envs.rng import STRIDE, draw, index_terms, mix64, seed_keys, uniform_below

MASK = (1 << 64) - 1


def splitmix64_reference(state: int) -> int:
    """Steele, Lea and Flood's splitmix64 output for ``state`` in plain Python integers."""
    z = state & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_registry_lists_the_tasks_and_the_mpe2_reference():
    assert set(ENVS) == {"hazard_grid", "spread", "intersection", "mamujoco", "spread_mpe2"}
    for name, spec in ENVS.items():
        assert spec.name == name and spec.description


def test_unknown_env_lists_known_ones():
    for make in (make_env, lambda name: make_vector_env(name, num_envs=1)):
        with pytest.raises(ValueError, match="hazard_grid, intersection, mamujoco, spread"):
            make("nope")


def test_unknown_parameter_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown parameters \['slip'\].*slip_prob"):
        make_config("hazard_grid", slip=0.1)
    with pytest.raises(ValueError, match="unknown parameters"):
        make_env("spread", slip_prob=0.1)


@pytest.mark.parametrize("name", sorted(ENVS))
def test_bad_values_fail_through_the_registry(name):
    with pytest.raises(ValueError, match="n_agents"):
        make_env(name, n_agents=0)
    with pytest.raises(ValueError, match="num_envs"):
        make_vector_env(name, num_envs=0)
    with pytest.raises(ValueError, match="render_mode"):
        make_env(name, render_mode="human")


def test_params_reach_the_env():
    env = make_vector_env("hazard_grid", num_envs=3, seed=0, n_agents=2, size=6, max_steps=9)
    assert (env.num_envs, env.n_agents, env.max_steps, env.obs_dim) == (3, 2, 9, 45)
    assert env.agents == ["agent_0", "agent_1"]


def test_mix64_matches_reference_splitmix64():
    states = [0, 1, 12345, 2**63 + 17, MASK]
    got = mix64(np.array(states, dtype=np.uint64))
    assert got.tolist() == [splitmix64_reference(s) for s in states]
    # The first output of splitmix64 seeded with 0 (published test vector).
    assert seed_keys([0]).tolist() == [0xE220A8397B1DCDAF]


def test_draws_depend_only_on_key_counter_and_index():
    keys = seed_keys([3, 4, 3])
    counters = np.array([5, 5, 6], dtype=np.uint64)
    terms = index_terms(np.arange(4))
    batch = draw(keys, counters, terms)
    for row in range(3):
        single = draw(keys[row : row + 1], counters[row : row + 1], terms)
        np.testing.assert_array_equal(single[0], batch[row])
    assert len(np.unique(batch)) == batch.size
    # Index j of counter n is output n * STRIDE + j + 1 of splitmix64 from the key.
    golden = 0x9E3779B97F4A7C15
    expected = splitmix64_reference(int(keys[0]) + (5 * STRIDE + 2 + 1) * golden)
    assert int(batch[0, 2]) == expected
    with pytest.raises(ValueError, match="indices"):
        index_terms([STRIDE])


def test_uniform_below_is_exact_at_the_ends_and_unbiased_between():
    bits = draw(seed_keys([1]), np.zeros(1, dtype=np.uint64), index_terms(np.arange(20000)))
    assert not uniform_below(bits, 0.0).any()
    assert uniform_below(bits, 1.0).all()
    assert abs(uniform_below(bits, 0.3).mean() - 0.3) < 0.015


@pytest.mark.parametrize("name", ["hazard_grid", "intersection"])
def test_native_frames_show_hazards_goals_and_agents(name):
    env = make_vector_env(name, num_envs=2, seed=0)
    assert isinstance(env, GridVectorEnv)
    env.reset()
    state = env.get_state()
    frame = env.render(1)
    px = env.config.cell_pixels
    assert frame.shape == (env.size * px, env.size * px, 3) and frame.dtype == np.uint8

    def centre(cell: int) -> np.ndarray:
        row, col = divmod(int(cell), env.size)
        return frame[row * px + px // 2, col * px + px // 2]

    colours = agent_colours(env.n_agents)
    for i, cell in enumerate(state["cell"][1]):
        np.testing.assert_array_equal(centre(cell), colours[i])
    for i, cell in enumerate(state["goal"][1]):
        np.testing.assert_array_equal(centre(cell), (colours[i].astype(int) + 255) // 2)
    occupied = set(state["cell"][1].tolist()) | set(state["goal"][1].tolist())
    for cell in np.flatnonzero(state["hazard"][1]):
        if cell not in occupied:
            np.testing.assert_array_equal(centre(cell), env.hazard_colour)
