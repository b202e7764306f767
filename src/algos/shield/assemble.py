"""Assembling a shield from its parts, for training and for the deployed (evaluated) policy.

`build_shield` is the one place the world model, opponent model, replay and shield are built
from a ShieldConfig, with seeds derived from the run seed; `load_shield_filter` rebuilds the
trained shield from policy.pt (`ShieldedIPPO.extra_policy_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from src.algos.networks import ActorCritic
from src.algos.registry import lookup
from src.algos.shield.config import ShieldConfig
from src.algos.shield.kernels import Workspace
from src.algos.shield.opponent_model import OpponentMLP, make_opponent_model
from src.algos.shield.shield import SHIELD_VERSIONS, PolicyLogits, Shield, ShieldStats
from src.algos.shield.world_model import EnsembleWorldModel, make_world_model

__all__ = [
    "POLICY_STATE_KEY",
    "ShieldFilter",
    "ShieldParts",
    "actor_policy_logits",
    "build_shield",
    "derived_seeds",
    "load_shield_filter",
]

# Key of the shield's entry in policy.pt.
POLICY_STATE_KEY = "shield"


def derived_seeds(seed: int, count: int) -> list[int]:
    """`count` independent 63-bit seeds for the shield's generators, derived from the run seed."""
    state = np.random.SeedSequence([int(seed), 0x5E1D]).generate_state(count, dtype=np.uint64)
    return [int(s >> np.uint64(1)) for s in state]


def actor_policy_logits(net: ActorCritic) -> PolicyLogits:
    """The policy inside the imagination: obs [N, D], agent [N] -> the actor's logits [N, n].

    Reads the actor's current weights at every call (the trainer updates them in place). In
    inference mode the layers write into a reused workspace: Linear as `addmm(out=)`, Tanh in
    place; any other layer type runs as a module.
    """
    workspace = Workspace()
    layers = list(net.actor)

    def policy_logits(obs: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        n = obs.shape[0]
        fast = torch.is_inference_mode_enabled()
        width = net.obs_dim + net.n_agents
        x = workspace.get("input", (n, width)) if fast else torch.empty(n, width)
        x[:, : net.obs_dim].copy_(obs)
        x[:, net.obs_dim :].zero_()
        x[:, net.obs_dim :].scatter_(1, agent.unsqueeze(1), 1.0)
        for i, layer in enumerate(layers):
            if fast and isinstance(layer, nn.Linear):
                out = workspace.get(f"layer{i}", (n, layer.out_features))
                x = torch.addmm(layer.bias, x, layer.weight.t(), out=out)
            elif fast and isinstance(layer, nn.Tanh):
                x = x.tanh_()
            else:
                x = layer(x)
        return x

    return policy_logits


@dataclass
class ShieldParts:
    """A shield with the models it owns."""

    shield: Shield
    world_model: EnsembleWorldModel
    opponent_model: OpponentMLP


def build_shield(
    config: ShieldConfig,
    *,
    n_agents: int,
    obs_dim: int,
    n_actions: int,
    max_steps: int,
    policy_logits: PolicyLogits,
    seed: int,
) -> ShieldParts:
    """World model, opponent model and shield of the configured versions, seeded from `seed`."""
    wm_seed, om_seed, shield_seed = derived_seeds(seed, 3)
    dims = {"n_agents": n_agents, "obs_dim": obs_dim, "n_actions": n_actions}
    world_model = make_world_model(config.wm_version, **dims, config=config, seed=wm_seed)
    opponent_model = make_opponent_model(config.om_version, **dims, config=config, seed=om_seed)
    shield = lookup(SHIELD_VERSIONS, config.shield_version, "shield_version")(
        config=config,
        world_model=world_model,
        opponent_model=opponent_model,
        policy_logits=policy_logits,
        max_steps=max_steps,
        seed=shield_seed,
        **dims,
    )
    return ShieldParts(shield=shield, world_model=world_model, opponent_model=opponent_model)


class ShieldFilter:
    """The deployed shield: `filter(obs, proposed, logits, episode_step)` as in training."""

    def __init__(self, shield: Shield) -> None:
        """Wrap a shield whose models hold trained weights."""
        self.shield = shield

    def reset(self, num_envs: int, seed: int) -> None:
        """Reseed the shield's sampling generator, as `Actor.reset(num_envs, seed)` does."""
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        self.shield.generator.manual_seed(derived_seeds(seed, 3)[2])
        self.shield.stats = ShieldStats()

    def filter(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """obs [E, A, D], proposed [E, A], logits [E, A, n], episode_step [E] (1-based step of
        the actions in their episode) -> executed [E, A] int64, intervened [E, A] bool."""
        return self.shield.filter(obs, proposed, logits, episode_step)


def load_shield_filter(policy_state: Mapping[str, Any], config: Mapping[str, Any]) -> ShieldFilter:
    """Rebuild the trained shield of a `shield` run from its policy.pt content and run config.

    `policy_state` is the dict loaded from policy.pt (actor weights under `actor_critic`, the
    network shape under `network`, the shield under `shield`); `config` the resolved run config
    (its `seed` seeds the shield's sampling until `reset`).
    """
    if POLICY_STATE_KEY not in policy_state:
        raise ValueError(
            f"policy state has no {POLICY_STATE_KEY!r} entry: not a shield run "
            f"(keys: {sorted(policy_state)})"
        )
    for key in ("actor_critic", "network"):
        if key not in policy_state:
            raise ValueError(f"policy state lacks {key!r} (keys: {sorted(policy_state)})")
    if "seed" not in config:
        raise ValueError("run config lacks 'seed'")
    saved = policy_state[POLICY_STATE_KEY]
    shield_config = ShieldConfig(**saved["config"])
    network = dict(policy_state["network"])
    net = ActorCritic(
        obs_dim=int(network["obs_dim"]),
        n_agents=int(network["n_agents"]),
        n_actions=int(network["n_actions"]),
        hidden_sizes=tuple(network["hidden_sizes"]),
        cost_critic=bool(network.get("cost_critic", False)),
    )
    net.load_state_dict(policy_state["actor_critic"])
    net.eval()
    parts = build_shield(
        shield_config,
        n_agents=net.n_agents,
        obs_dim=net.obs_dim,
        n_actions=net.n_actions,
        max_steps=int(saved["max_steps"]),
        policy_logits=actor_policy_logits(net),
        seed=int(config["seed"]),
    )
    parts.world_model.load_state_dict(saved["world_model"])
    parts.opponent_model.load_state_dict(saved["opponent_model"])
    parts.shield.opponent_weight = float(saved["opponent_weight"])
    return ShieldFilter(parts.shield)
