"""The shared actor-critic, action sampling and the rollout buffer."""

from __future__ import annotations

import pytest
import torch

from src.algos.buffer import RolloutBuffer
from src.algos.networks import ActorCritic, add_agent_ids, sample_actions


def test_agent_ids_are_appended_per_agent():
    obs = torch.zeros(5, 3, 4)  # [E, A, D]
    x = add_agent_ids(obs)
    assert x.shape == (5, 3, 7)
    assert torch.equal(x[2, :, 4:], torch.eye(3))
    with pytest.raises(ValueError, match="obs must have shape"):
        add_agent_ids(torch.zeros(4))


def test_actor_critic_shapes_and_shared_weights():
    torch.manual_seed(0)
    net = ActorCritic(obs_dim=4, n_agents=3, n_actions=5, hidden_sizes=(16,), cost_critic=True)
    x = add_agent_ids(torch.randn(7, 2, 3, 4))  # [T, E, A, D]
    assert net.logits(x).shape == (7, 2, 3, 5)
    assert net.value(x).shape == net.cost_value(x).shape == (7, 2, 3)
    # the one-hot makes identical observations of different agents give different outputs
    same = add_agent_ids(torch.ones(1, 3, 4))
    logits = net.logits(same)[0]
    assert not torch.allclose(logits[0], logits[1])
    with pytest.raises(RuntimeError, match="cost critic"):
        ActorCritic(obs_dim=4, n_agents=3, n_actions=5, hidden_sizes=(16,)).cost_value(x)
    with pytest.raises(ValueError, match="hidden_sizes"):
        ActorCritic(obs_dim=4, n_agents=3, n_actions=5, hidden_sizes=(0,))


def test_sampling_follows_the_generator_and_the_probabilities():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).expand(4000, 3)
    a = sample_actions(logits, torch.Generator().manual_seed(1))
    b = sample_actions(logits, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    freq = torch.bincount(a, minlength=3).float() / 4000
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.03)


def test_minibatches_partition_the_flat_batch():
    buf = RolloutBuffer(steps=4, num_envs=3, n_agents=2, obs_dim=5)
    ids = torch.arange(buf.size).view(4, 3, 2)
    flat = buf.flat({"ids": ids, "inputs": buf.inputs})
    assert flat["inputs"].shape == (24, 7)
    seen = torch.cat(
        [mb["ids"] for mb in buf.minibatches(flat, mini_batches=4, generator=torch.Generator())]
    )
    assert sorted(seen.tolist()) == list(range(24))
    with pytest.raises(ValueError, match="do not split into 5"):
        next(buf.minibatches(flat, mini_batches=5, generator=torch.Generator()))
    with pytest.raises(ValueError, match="'bad'"):
        buf.flat({"bad": torch.zeros(4, 3)})
