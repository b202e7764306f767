"""Load a trained policy from a run folder for evaluation and rendering.

>>> actor = load_actor("results/quick/runs/hazard_grid/ippo/run0")  # doctest: +SKIP
>>> actor.reset(num_envs=8, seed=1_000_000)                         # doctest: +SKIP
>>> actions = actor.act(obs, episode_step)                          # doctest: +SKIP

The deployed policy acts as it was trained: it samples its actions from a generator seeded by
`reset` (the evaluation seeds it per batch of episodes), categorical over Discrete actions,
Gaussian over a Box, whose samples are clipped to the Box on their way to the env, as in
training (docs/design.md, section 6.1); a shield filters the raw samples before the clip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.algos.actions import POLICY_KEY, BoxActions
from src.algos.filters import ActionFilter
from src.algos.networks import ActorCritic, add_agent_ids, sample_actions, sample_gaussian
from src.algos.registry import SHIELD_LOADER, algorithm_class, get_algorithm
from src.checks import check_int
from src.config.run import RunConfig
from src.core.io import load_from_file
from src.custom import load_entry
from src.runfiles import RunFiles

__all__ = ["Actor", "actor_from_state", "load_actor"]


class Actor:
    """A trained stochastic policy over `[E, A, D]` observations, optionally filtered."""

    def __init__(
        self,
        *,
        net: ActorCritic,
        config: RunConfig,
        action_filter: ActionFilter | None = None,
        box: BoxActions | None = None,
    ) -> None:
        """`action_filter` (e.g. the trained shield) filters every proposal when given; `box`:
        the Box of a Gaussian policy's actions (`net` continuous), None for Discrete ones."""
        if (box is not None) != net.continuous:
            raise ValueError(
                "a Gaussian actor needs the Box of its actions, a categorical one none; got "
                f"{'a' if net.continuous else 'no'} Gaussian actor and "
                f"{'a' if box is not None else 'no'} Box"
            )
        self.net = net.eval()
        self.box = box
        self.config = config
        self.algo = config.algo
        self.env_name = config.env_name
        self.action_filter = action_filter
        self.generator: torch.Generator | None = None
        self.num_envs = 0
        self.last_intervened: np.ndarray | None = None

    @property
    def shielded(self) -> bool:
        """Whether actions pass through a filter (the shield)."""
        return self.action_filter is not None

    def reset(self, num_envs: int, seed: int) -> None:
        """Start sampling for `num_envs` copies from a generator seeded with `seed`; the
        action filter is reset the same way."""
        self.num_envs = check_int("num_envs", num_envs, low=1)
        seed = check_int("seed", seed, low=0)
        self.generator = torch.Generator().manual_seed(seed)
        if self.action_filter is not None:
            self.action_filter.reset(num_envs, seed)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        """Sample actions `[E, A]` int64 (Box: `[E, A, ...]` in the Box's dtype, clipped to it)
        for observations `[E, A, D]`.

        `episode_step` `[E]`: 1-based index, within its episode, of the step these actions
        take. With a filter, the executed (filtered) actions are returned and the per-agent
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
        x = add_agent_ids(torch.from_numpy(obs))  # [E, A, D + A]
        if self.box is not None:
            mean = self.net.action_mean(x)
            raw = sample_gaussian(mean, self.net.log_std, self.generator)
            if self.action_filter is not None:
                executed, intervened = self.action_filter.filter(
                    obs, raw.numpy(), (mean, self.net.log_std), episode_step
                )
                self.last_intervened = np.asarray(intervened, dtype=bool)
                raw = torch.from_numpy(np.asarray(executed, dtype=np.float32))
            return self.box.to_env(raw)
        logits = self.net.logits(x)  # [E, A, n_actions]
        proposed = sample_actions(logits, self.generator).numpy()  # [E, A]
        if self.action_filter is None:
            return proposed
        executed, intervened = self.action_filter.filter(obs, proposed, logits, episode_step)
        self.last_intervened = np.asarray(intervened, dtype=bool)
        return np.asarray(executed, dtype=np.int64)


def actor_from_state(
    state: dict[str, Any], config: RunConfig, *, shielded: bool = True, where: str = "policy.pt"
) -> Actor:
    """The final policy in a policy.pt content of an IPPO-based trainer (`IPPO.load_actor`).

    For algorithms with a shield and `shielded=True`, the actions are filtered by the shield
    that `src.algos.shield.assemble.load_shield` rebuilds from the same content. A Gaussian
    policy over Box actions is rebuilt with its Box (`actions.POLICY_KEY`), its shield (if any)
    the candidate filter of Box actions.
    """
    net = ActorCritic.from_policy_state(state, where=where)
    if net.continuous or POLICY_KEY in state:
        if not net.continuous or POLICY_KEY not in state:
            raise ValueError(
                f"{where}: a Box policy needs both a continuous network and the entry "
                f"{POLICY_KEY!r} (network continuous: {net.continuous}; entries: {sorted(state)})"
            )
        kinds = get_algorithm(config.algo).action_kinds
        if "box" not in kinds:
            raise ValueError(
                f"{where}: algo {config.algo} takes {' or '.join(kinds)} actions, but the policy "
                "has Box actions"
            )
        box = BoxActions.from_description(state[POLICY_KEY], where=where)
        if box.dim != net.n_actions:
            raise ValueError(
                f"{where}: entry {POLICY_KEY!r} has {box.dim} action entries, the network "
                f"{net.n_actions}"
            )
    else:
        box = None
    action_filter = None
    spec = get_algorithm(config.algo)
    if shielded and spec.shielded:
        # Imported by its import path: an unshielded policy loads without the shield package.
        # A shielded algorithm of the user's that builds its actor here has the built-in shield.
        load_shield = load_entry(spec.shield_loader or SHIELD_LOADER)
        action_filter = load_shield(state, config, net=net, box=box)
    return Actor(net=net, config=config, action_filter=action_filter, box=box)


def load_actor(run_dir: str | Path, *, shielded: bool = True) -> Any:
    """Rebuild the final policy of a run from its policy.pt.

    Built-in algorithms give an `Actor` (`actor_from_state`); an algorithm given by import path
    gives what its class's `load_actor(policy_state, config, shielded=...)` returns (an object
    with `reset`, `act`, `shielded` and `last_intervened`, like `Actor`).
    """
    path = RunFiles(run_dir).policy
    state = load_from_file(path.parent, path.name)
    if "config" not in state:
        raise ValueError(f"{path} lacks the entry 'config' (entries: {sorted(state)})")
    config = RunConfig.from_dict(state["config"])
    if get_algorithm(config.algo).entry is not None:
        return algorithm_class(config.algo).load_actor(state, config, shielded=shielded)
    return actor_from_state(state, config, shielded=shielded, where=str(path))
