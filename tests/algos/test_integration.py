"""train_run on the real registered envs (hazard_grid, spread) through the env registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.algos.policy import load_actor
from src.algos.train import train_run
from src.config.run import make_run_config
from src.core.io import load_from_file
from src.envs.registry import make_vector_env


def _hazard_config(algo: str, **extra) -> dict:
    return make_run_config(
        env_name="hazard_grid",
        algo=algo,
        num_envs=4,
        n_agents=2,
        rollouts=32,
        timesteps=4 * 32 * 3,
        learning_epochs=2,
        mini_batches=4,
        checkpoint_every=1,
        **extra,
    )


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ippo", "ippo_lag"])
def test_hazard_grid_run_is_deterministic_and_loadable(tmp_path, algo):
    config = _hazard_config(algo, lag_version="pid")
    for name in ("a", "b"):
        train_run(config, tmp_path / name, progress=False)
    a = load_from_file(tmp_path / "a", "policy.pt")["actor_critic"]
    b = load_from_file(tmp_path / "b", "policy.pt")["actor_critic"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    history = load_from_file(tmp_path / "a", "history.json")
    assert history == load_from_file(tmp_path / "b", "history.json")
    assert len(history) > 0

    actor = load_actor(tmp_path / "a")
    env = make_vector_env("hazard_grid", num_envs=2, seed=7, n_agents=2)
    obs = env.reset(seed=7)
    actor.reset(2, 7)
    actions = actor.act(obs, np.ones(2, dtype=np.int64))
    assert actions.shape == (2, 2) and actions.dtype == np.int64
    assert actions.min() >= 0 and actions.max() < env.n_actions


@pytest.mark.slow
def test_spread_run_trains(tmp_path):
    config = make_run_config(
        env_name="spread",
        algo="ippo_lag",
        num_envs=2,
        n_agents=3,
        rollouts=25,
        timesteps=2 * 25 * 2,
        learning_epochs=1,
        mini_batches=2,
        env_params={"max_steps": 25},
    )
    train_run(config, tmp_path, progress=False)
    history = load_from_file(tmp_path, "history.json")
    # two copies, 50 steps each, episodes capped at 25 steps -> 4 truncated episodes
    assert len(history) == 4 and all(ep["truncated_by_cap"] for ep in history)
    assert all(ep["length"] == 25 for ep in history)


@pytest.mark.slow
def test_shield_arms_and_filters_on_spread(tmp_path):
    # Continuous observations: the team world model and the critic learn them like the grids'.
    config = make_run_config(
        env_name="spread",
        algo="shield",
        num_envs=4,
        n_agents=3,
        rollouts=25,
        timesteps=4 * 25 * 3,
        learning_epochs=1,
        mini_batches=2,
        shield_patience=1,
        env_params={"max_steps": 25},
        algo_params={"critic_steps": 2, "model_epochs": 1.0},
    )
    train_run(config, tmp_path, progress=False)
    updates = load_from_file(tmp_path, "updates.json")
    assert [u["shield/armed"] for u in updates] == [0.0, 1.0, 1.0]
    assert all(u["shield/critic_loss"] is not None for u in updates)
    actor = load_actor(tmp_path, shielded=True)
    env = make_vector_env("spread", num_envs=3, seed=3, n_agents=3, max_steps=25)
    obs = env.reset(seed=3)
    actor.reset(3, 3)
    for step in range(1, 4):
        actions = actor.act(obs, np.full(3, step, dtype=np.int64))
        assert actions.shape == (3, 3) and actions.min() >= 0 and actions.max() < env.n_actions
        obs = env.step(actions).obs
    assert actor.action_filter.stats.decisions == 9
