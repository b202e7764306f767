"""Load a trained policy from a run folder for evaluation and rendering.

>>> actor = load_actor("results/quick/runs/hazard_grid/ippo/run0")  # doctest: +SKIP
>>> actor.reset(num_envs=8, seed=1_000_000)                         # doctest: +SKIP
>>> actions = actor.act(obs, episode_step)                          # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.algos.networks import ActorCritic, add_agent_ids, sample_actions
from src.algos.registry import get_algorithm
from src.core.io import load_from_file

__all__ = ["Actor", "load_actor"]


class Actor:
    """A trained stochastic policy over `[E, A, D]` observations, optionally shielded."""

    def __init__(
        self,
        *,
        net: ActorCritic,
        config: dict[str, Any],
        shield_filter: Any | None = None,
    ) -> None:
        """`shield_filter` has `filter(obs, proposed, logits, episode_step)` (see the shield)."""
        self.net = net.eval()
        self.config = config
        self.algo: str = config["algo"]
        self.env_name: str = config["env_name"]
        self.shield_filter = shield_filter
        self.generator: torch.Generator | None = None
        self.num_envs = 0
        self.last_intervened: np.ndarray | None = None

    @property
    def shielded(self) -> bool:
        """Whether actions pass through the shield."""
        return self.shield_filter is not None

    def reset(self, num_envs: int, seed: int) -> None:
        """Start sampling for `num_envs` copies from a generator seeded with `seed`.

        A shield filter with a `reset(num_envs, seed)` method is reset too.
        """
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.num_envs = num_envs
        self.generator = torch.Generator().manual_seed(seed)
        reset = getattr(self.shield_filter, "reset", None)
        if callable(reset):
            reset(num_envs, seed)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        """Sample actions `[E, A]` int64 for observations `[E, A, D]`.

        `episode_step` `[E]`: 1-based index, within its episode, of the step these actions
        take. With a shield, the executed (filtered) actions are returned and the per-agent
        intervention flags are kept in `last_intervened`.
        """
        if self.generator is None:
            raise RuntimeError("call Actor.reset(num_envs, seed) before act")
        obs = np.asarray(obs, dtype=np.float32)
        expected = (self.num_envs, self.net.n_agents, self.net.obs_dim)
        if obs.shape != expected:
            raise ValueError(f"obs must have shape [E, A, D] = {expected}, got {obs.shape}")
        episode_step = np.asarray(episode_step, dtype=np.int64)
        if episode_step.shape != (self.num_envs,):
            raise ValueError(
                f"episode_step must have shape [E] = ({self.num_envs},), got {episode_step.shape}"
            )
        logits = self.net.logits(add_agent_ids(torch.from_numpy(obs)))  # [E, A, n_actions]
        proposed = sample_actions(logits, self.generator).numpy()  # [E, A]
        if self.shield_filter is None:
            return proposed
        executed, intervened = self.shield_filter.filter(obs, proposed, logits, episode_step)
        self.last_intervened = np.asarray(intervened, dtype=bool)
        return np.asarray(executed, dtype=np.int64)


def load_actor(run_dir: str | Path, *, shielded: bool = True) -> Actor:
    """Rebuild the final policy of a run from `run_dir/policy.pt`.

    For algorithms with a shield and `shielded=True`, the actions are filtered by the shield
    that `src.algos.shield.load_shield_filter(policy_state, config)` rebuilds.
    """
    state = load_from_file(Path(run_dir), "policy.pt")
    for key in ("actor_critic", "network", "config"):
        if key not in state:
            raise ValueError(f"{Path(run_dir) / 'policy.pt'} lacks the entry {key!r}")
    network = state["network"]
    net = ActorCritic(
        obs_dim=network["obs_dim"],
        n_agents=network["n_agents"],
        n_actions=network["n_actions"],
        hidden_sizes=network["hidden_sizes"],
        cost_critic=network["cost_critic"],
    )
    net.load_state_dict(state["actor_critic"])
    config = state["config"]
    shield_filter = None
    if shielded and get_algorithm(config["algo"]).shielded:
        # Imported here so that IPPO policies load without the shield package.
        from src.algos.shield import load_shield_filter

        shield_filter = load_shield_filter(state, config)
    return Actor(net=net, config=config, shield_filter=shield_filter)
