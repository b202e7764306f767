"""load_actor: rebuilds the trained actor and samples reproducibly from its own seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.algos.policy import Actor, load_actor
from src.algos.train import train_run
from src.core.io import load_from_file
from tests.algos.conftest import toy_config
from tests.algos.toy_env import RiskyContextEnv, make_toy_env


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    train_run(toy_config(algo="ippo_lag"), out, make_env=make_toy_env, progress=False)
    return out


def _rollout(actor: Actor, seed: int, steps: int = 20) -> np.ndarray:
    env = RiskyContextEnv(num_envs=3, n_agents=2)
    obs = env.reset(seed=seed)
    actor.reset(3, seed)
    episode_step = np.ones(3, dtype=np.int64)
    actions = []
    for _ in range(steps):
        a = actor.act(obs, episode_step)
        result = env.step(a)
        obs = result.obs
        episode_step = np.where(
            result.terminated[:, 0] | result.truncated[:, 0], 1, result.episode_step + 1
        )
        actions.append(a)
    return np.stack(actions)


def test_load_actor_matches_the_trained_network(run_dir):
    actor = load_actor(run_dir)
    assert (actor.algo, actor.env_name, actor.shielded) == ("ippo_lag", "risky_context", False)
    saved = load_from_file(run_dir, "policy.pt")["actor_critic"]
    for key, value in actor.net.state_dict().items():
        assert torch.equal(value, saved[key])


def test_actor_is_reproducible_from_its_seed(run_dir):
    actor = load_actor(run_dir)
    a, b, c = _rollout(actor, 5), _rollout(actor, 5), _rollout(actor, 6)
    assert a.dtype == np.int64 and a.shape == (20, 3, 2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_actor_rejects_bad_input(run_dir, tmp_path):
    actor = load_actor(run_dir)
    with pytest.raises(RuntimeError, match="reset"):
        actor.act(np.zeros((3, 2, 3), np.float32), np.ones(3, np.int64))
    actor.reset(3, 0)
    with pytest.raises(ValueError, match="obs must have shape"):
        actor.act(np.zeros((3, 2, 4), np.float32), np.ones(3, np.int64))
    with pytest.raises(ValueError, match="episode_step"):
        actor.act(np.zeros((3, 2, 3), np.float32), np.ones(2, np.int64))
    with pytest.raises(ValueError, match="num_envs"):
        actor.reset(0, 1)
    with pytest.raises(FileNotFoundError, match=r"policy\.pt"):
        load_actor(tmp_path)
