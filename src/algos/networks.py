"""Parameter-shared actor-critic MLPs over per-agent observations plus an agent-id one-hot.

Every agent uses the same weights; appending the one-hot of the agent's index to its
observation lets the shared network still specialise per agent (Terry et al. 2020, "Revisiting
parameter sharing in multi-agent deep RL"). Actor, critic and the optional cost critic are
separate MLPs, so rollout collection only runs the actor and the critics are evaluated in one
batched pass at update time.

The actor gives the logits of a categorical policy over Discrete actions, or, for Box actions,
the mean of a Gaussian policy whose log standard deviation is a parameter of its own, one per
action entry and the same in every state (`sample_gaussian`, `gaussian_log_prob`,
`gaussian_entropy`; docs/design.md, section 6.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from src import numerics

__all__ = [
    "ActorCritic",
    "Linear",
    "add_agent_ids",
    "gaussian_entropy",
    "gaussian_log_prob",
    "mlp",
    "sample_actions",
    "sample_gaussian",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Linear(nn.Linear):
    """`nn.Linear` whose products run on the pinned OpenBLAS path (`src.numerics.linear`):
    the same state dict and initialisation, and the same bits on every CPU with AVX2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in] -> [..., out]."""
        return numerics.linear(x, self.weight, self.bias)


def mlp(
    *, in_dim: int, hidden_sizes: Sequence[int], out_dim: int, out_gain: float
) -> nn.Sequential:
    """Tanh MLP with orthogonal initialisation (the PPO implementation details of Huang et al.).

    Hidden layers use gain sqrt(2); the output layer uses `out_gain` (0.01 for policy logits,
    so the initial policy is near uniform; 1 for values). Biases start at zero.
    """
    if in_dim < 1 or out_dim < 1:
        raise ValueError(f"in_dim and out_dim must be >= 1, got {in_dim}, {out_dim}")
    if any(int(h) < 1 for h in hidden_sizes):
        raise ValueError(f"hidden_sizes must be positive, got {tuple(hidden_sizes)}")
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        linear = Linear(width, int(hidden))
        nn.init.orthogonal_(linear.weight, gain=float(np.sqrt(2.0)))
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.Tanh()]
        width = int(hidden)
    head = Linear(width, out_dim)
    nn.init.orthogonal_(head.weight, gain=out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


def add_agent_ids(obs: torch.Tensor) -> torch.Tensor:
    """`[..., A, D]` observations -> `[..., A, D + A]` with each agent's one-hot appended."""
    if obs.dim() < 2:
        raise ValueError(f"obs must have shape [..., A, D], got {tuple(obs.shape)}")
    n_agents = obs.shape[-2]
    ids = torch.eye(n_agents, dtype=obs.dtype, device=obs.device)
    ids = ids.expand(*obs.shape[:-2], n_agents, n_agents)
    return torch.cat([obs, ids], dim=-1)


def sample_actions(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Sample one action per row of `[..., n_actions]` logits with the given generator.

    Inverse-CDF sampling: one uniform per row, compared with the cumulative probabilities.
    It draws from the generator alone (so sampling is reproducible from the run's seed;
    `Categorical.sample` cannot take a generator) and costs a fraction of `torch.multinomial`
    on the small batches of rollout collection.
    """
    probs = torch.softmax(logits, dim=-1)
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((*probs.shape[:-1], 1), generator=generator, dtype=probs.dtype)
    # Rounding can leave cdf[-1] slightly below u; such a draw belongs to the last action.
    return (cdf < u).sum(dim=-1).clamp_(max=probs.shape[-1] - 1)


def sample_gaussian(
    mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """One draw of N(mean, exp(log_std)^2) per entry of `[..., k]` means (`log_std` `[k]`).

    The draw is the raw, unbounded action the policy learns from (its log-probability is
    `gaussian_log_prob`); clipping it to the Box is the env side's (`actions.BoxActions.to_env`).
    The noise comes from the generator alone, so sampling is reproducible from the run's seed.
    """
    noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
    return mean + log_std.exp() * noise


def gaussian_log_prob(
    mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor
) -> torch.Tensor:
    """log N(actions | mean, diag(exp(log_std)^2)): `[..., k]` -> `[...]`, summed over the k
    independent entries (what `torch.distributions.Normal(mean, log_std.exp()).log_prob(
    actions).sum(-1)` computes)."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of the diagonal Gaussian with log standard deviations `log_std` `[k]` (a scalar:
    the same in every state), sum over k of 1/2 + log(2 pi)/2 + log_std."""
    return (0.5 + _HALF_LOG_2PI + log_std).sum(-1)


class ActorCritic(nn.Module):
    """Shared actor (logits, or a Gaussian's mean and log-std), critic (V) and optional cost
    critic (V_c) for A agents.

    All methods take inputs that already carry the agent one-hot (`[..., D + A]`, see
    `add_agent_ids`), so the trainer can build them once into a preallocated tensor.
    """

    def __init__(
        self,
        *,
        obs_dim: int,
        n_agents: int,
        n_actions: int,
        hidden_sizes: Sequence[int],
        cost_critic: bool = False,
        continuous: bool = False,
    ) -> None:
        """Build the MLPs; `cost_critic` adds a separate value network for the cost signal.

        `continuous`: the actor is the mean of a Gaussian over Box actions of `n_actions`
        entries, with a log standard deviation per entry (`log_std`, zeros at first);
        otherwise it gives the logits of `n_actions` Discrete actions.
        """
        super().__init__()
        if n_agents < 1 or n_actions < 1 or obs_dim < 1:
            raise ValueError(
                f"obs_dim, n_agents and n_actions must be >= 1, got {obs_dim}, {n_agents}, "
                f"{n_actions}"
            )
        self.obs_dim, self.n_agents, self.n_actions = obs_dim, n_agents, n_actions
        self.continuous = bool(continuous)
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        in_dim = obs_dim + n_agents
        self.actor = mlp(in_dim=in_dim, hidden_sizes=hidden_sizes, out_dim=n_actions, out_gain=0.01)
        self.critic = mlp(in_dim=in_dim, hidden_sizes=hidden_sizes, out_dim=1, out_gain=1.0)
        self.cost_critic = (
            mlp(in_dim=in_dim, hidden_sizes=hidden_sizes, out_dim=1, out_gain=1.0)
            if cost_critic
            else None
        )
        # The Gaussian's state-independent log standard deviation (CleanRL's `actor_logstd`).
        self.log_std = nn.Parameter(torch.zeros(n_actions)) if self.continuous else None

    @property
    def in_dim(self) -> int:
        """Width of the network input: observation plus agent one-hot."""
        return self.obs_dim + self.n_agents

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., D + A]` -> `[..., n_actions]` unnormalised action log-probabilities."""
        return self.actor(x)

    def action_mean(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., D + A]` -> `[..., n_actions]` mean of the Gaussian over Box actions."""
        if not self.continuous:
            raise RuntimeError("this ActorCritic has Discrete actions: its actor gives logits")
        return self.actor(x)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., D + A]` -> `[...]` state value of the reward."""
        return self.critic(x).squeeze(-1)

    def cost_value(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., D + A]` -> `[...]` state value of the cost signal."""
        if self.cost_critic is None:
            raise RuntimeError("this ActorCritic was built without a cost critic")
        return self.cost_critic(x).squeeze(-1)

    @classmethod
    def from_policy_state(
        cls, state: Mapping[str, Any], *, where: str = "policy state"
    ) -> ActorCritic:
        """Rebuild the trained network from a policy.pt content (`network` and `actor_critic`).

        The result is in evaluation mode. `where` names the source in errors.
        """
        for key in ("network", "actor_critic"):
            if key not in state:
                raise ValueError(f"{where} lacks the entry {key!r} (entries: {sorted(state)})")
        shape = state["network"]
        try:
            net = cls(
                obs_dim=int(shape["obs_dim"]),
                n_agents=int(shape["n_agents"]),
                n_actions=int(shape["n_actions"]),
                hidden_sizes=tuple(int(h) for h in shape["hidden_sizes"]),
                cost_critic=bool(shape.get("cost_critic", False)),
                continuous=bool(shape.get("continuous", False)),
            )
            net.load_state_dict(state["actor_critic"])
        except (KeyError, TypeError, RuntimeError) as error:
            raise ValueError(f"{where}: the network does not match its weights: {error}") from None
        return net.eval()

    def describe(self) -> dict[str, int | bool | list[int]]:
        """Constructor arguments, stored in `policy.pt` so the actor can be rebuilt
        (`continuous` only for a Gaussian actor: a Discrete one's entry is as it always was)."""
        described: dict[str, int | bool | list[int]] = {
            "obs_dim": self.obs_dim,
            "n_agents": self.n_agents,
            "n_actions": self.n_actions,
            "hidden_sizes": list(self.hidden_sizes),
            "cost_critic": self.cost_critic is not None,
        }
        if self.continuous:
            described["continuous"] = True
        return described
