"""Opponent models: each agent's action distribution given its own observation.

The decentralised shield (`coordination: decentralised`, `src.algos.shield.decentral`) predicts
the agents other than the one it judges by this model, mixed with the uniform distribution by
weight w (`shield_opponent_mode`):
`model` w = 0, `uniform` w = 1, `monotone_floor` w_t = min(w_{t-1}, f(validation error)), w_0 = 1,
so the shield trusts the model only as far as its held-out predictions have earned.

On Box actions (`continuous`) the model is a Gaussian: the MLP gives each agent's mean action
(of `n_actions` entries), a state-independent log-std parameter its spread, fitted by the
negative log-likelihood of the actions the env received; its validation error for
`monotone_floor` is the share of the actions' variance its means leave unexplained
(`valid_unexplained`), the analogue of the cross-entropy relative to the uniform guess.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from src import numerics
from src.algos.networks import gaussian_log_prob
from src.algos.shield.ensemble import fit_steps
from src.algos.shield.kernels import Workspace, softmax_last
from src.algos.shield.optimizer_state import OptimizerState
from src.algos.shield.replay import TransitionReplay
from src.checks import lookup
from src.numerics import adam

__all__ = [
    "OM_VERSIONS",
    "OpponentMLP",
    "OpponentModel",
    "floor_weight",
    "make_opponent_model",
    "opponent_weight",
]


@runtime_checkable
class OpponentModel(Protocol):
    """What the shield needs from an opponent model."""

    def joint_logits(self, joint_obs: torch.Tensor) -> torch.Tensor:
        """joint_obs [N, A*D] -> every agent's action log-probabilities (up to a constant per
        row) given its own observation (its slice of the joint obs), [N, A, n_actions]. The
        caller may modify the result in place and must not keep it past the next call."""
        ...


def floor_weight(previous: float, *, valid_loss: float, n_actions: int) -> float:
    """monotone_floor: w_t = min(w_{t-1}, f) with f = clip(CE_valid / ln(n_actions), 0, 1).

    f is the validation cross-entropy relative to the uniform guess (which scores ln n): a model
    no better than uniform gets f = 1 (all weight on uniform), a perfect one f = 0. NaN (no
    validation data yet) leaves w unchanged.

    >>> floor_weight(1.0, valid_loss=math.log(4) / 2, n_actions=4)
    0.5
    >>> floor_weight(0.2, valid_loss=math.log(4) / 2, n_actions=4)
    0.2
    """
    if not 0.0 <= previous <= 1.0:
        raise ValueError(f"previous weight must lie in [0, 1], got {previous}")
    if n_actions < 2:
        raise ValueError(f"n_actions must be >= 2, got {n_actions}")
    if math.isnan(valid_loss):
        return previous
    f = min(1.0, max(0.0, valid_loss / math.log(n_actions)))
    return min(previous, f)


def opponent_weight(
    mode: str,
    previous: float,
    *,
    valid_loss: float,
    n_actions: int,
    unexplained: float | None = None,
) -> float:
    """The uniform-mixing weight for `mode` after a fit with validation loss `valid_loss`; on
    Box actions, `monotone_floor` floors it by the validation's `unexplained` share of the
    actions' variance (clipped to [0, 1]; NaN leaves it unchanged)."""
    if mode == "model":
        return 0.0
    if mode == "uniform":
        return 1.0
    if mode == "monotone_floor" and unexplained is not None:
        return previous if math.isnan(unexplained) else min(previous, min(1.0, unexplained))
    if mode == "monotone_floor":
        return floor_weight(previous, valid_loss=valid_loss, n_actions=n_actions)
    raise ValueError(f"shield_opponent_mode must be model, uniform or monotone_floor, got {mode!r}")


class OpponentMLP(OptimizerState, nn.Module):
    """`om_version` v0: one parameter-shared MLP over [obs, agent one-hot] -> action logits,
    cross-entropy."""

    def __init__(
        self,
        *,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        hidden: tuple[int, ...],
        learning_rate: float,
        seed: int,
        continuous: bool = False,
    ) -> None:
        """Build the MLP with parameters drawn from a generator seeded with `seed`;
        `continuous`: a Gaussian over Box actions of `n_actions` entries (module docstring)."""
        super().__init__()
        self.n_agents = n_agents
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.continuous = continuous
        generator = torch.Generator().manual_seed(seed)
        sizes = (obs_dim + n_agents, *hidden, n_actions)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(
                nn.Parameter((torch.rand(fan_in, fan_out, generator=generator) * 2 - 1) * bound)
            )
            self.biases.append(
                nn.Parameter((torch.rand(fan_out, generator=generator) * 2 - 1) * bound)
            )
        if continuous:
            self.log_std = nn.Parameter(torch.zeros(n_actions))
        self.optimizer = adam(self.parameters(), lr=learning_rate)
        self._workspace = Workspace()

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        """(fan_in, fan_out) of each layer, for FLOP counts."""
        return [tuple(w.shape) for w in self.weights]

    def logits(self, obs: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        """obs [N, D], agent [N] -> logits [N, n_actions] (training and validation)."""
        n = obs.shape[0]
        x = torch.zeros(n, self.obs_dim + self.n_agents)
        x[:, : self.obs_dim] = obs
        x[:, self.obs_dim :].scatter_(1, agent.unsqueeze(1), 1.0)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = numerics.linear(x, w.T, b)
            if i < last:
                x = torch.relu(x)
        return x

    def joint_logits(self, joint_obs: torch.Tensor) -> torch.Tensor:
        """joint_obs [N, A*D] -> logits [N, A, n_actions] of every agent (a view of an
        [A, N, n_actions] buffer).

        The agent one-hot enters as a per-agent bias (its row of the first weight), and each
        agent's observation is read in place as a strided slice of the joint obs, so no input
        is copied. No gradients are tracked. In inference mode every layer writes into a reused
        workspace buffer (the shield's hot path) and the result is valid until the next call.
        """
        n, a, d = joint_obs.shape[0], self.n_agents, self.obs_dim
        fast = torch.is_inference_mode_enabled()

        def buffer(name: str, shape: tuple[int, ...]) -> torch.Tensor:
            return self._workspace.get(name, shape) if fast else torch.empty(shape)

        with torch.no_grad():
            w0, b0 = self.weights[0], self.biases[0]
            x = buffer("layer0", (a, n, w0.shape[1]))
            for agent in range(a):
                obs = joint_obs[:, agent * d : (agent + 1) * d]
                numerics.linear(obs, w0[:d].T, b0 + w0[d + agent], out=x[agent])
            x = x.view(a * n, -1)
            layers = zip(self.weights[1:], self.biases[1:], strict=True)
            for i, (w, b) in enumerate(layers, start=1):
                out = buffer(f"layer{i}", (a * n, w.shape[1]))
                x = numerics.linear(x.relu_(), w.T, b, out=out)
        return x.view(a, n, self.n_actions).permute(1, 0, 2)

    def probs(self, joint_obs: torch.Tensor) -> torch.Tensor:
        """joint_obs [N, A*D] -> action distributions [N, A, n_actions] (a fresh tensor)."""
        return softmax_last(self.joint_logits(joint_obs))

    def _per_agent(self, rows: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Joint rows [B, A*D], [B, A] -> per-agent obs [B*A, D], agent [B*A], action [B*A]."""
        b = rows["obs"].shape[0]
        obs = rows["obs"].reshape(b * self.n_agents, self.obs_dim)
        agent = torch.arange(self.n_agents).repeat(b)
        if self.continuous:
            return obs, agent, rows["action"].reshape(b * self.n_agents, self.n_actions)
        return obs, agent, rows["action"].reshape(-1)

    def _loss(self, out: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the logits, or the Gaussian's negative log-likelihood."""
        if self.continuous:
            return -gaussian_log_prob(out, self.log_std, action).mean()
        return F.cross_entropy(out, action)

    def fit(
        self,
        replay: TransitionReplay,
        *,
        n_samples: int,
        batch_size: int,
        max_valid: int,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """Train on about `n_samples` replay rows; return train_loss, valid_loss, valid_accuracy."""
        metrics = {"train_loss": math.nan, "valid_loss": math.nan, "valid_accuracy": math.nan}
        if replay.train.size == 0:
            return metrics
        steps = fit_steps(n_samples, batch_size)
        total = 0.0
        for _ in range(steps):
            obs, agent, action = self._per_agent(replay.sample_train((batch_size,), generator))
            loss = self._loss(self.logits(obs, agent), action)
            self.optimizer_step(loss)
            total += float(loss.detach())
        metrics["train_loss"] = total / steps
        if replay.valid.size > 0:
            with torch.no_grad():
                obs, agent, action = self._per_agent(replay.valid.latest(max_valid))
                logits = self.logits(obs, agent)
                metrics["valid_loss"] = float(self._loss(logits, action))
                if self.continuous:
                    spread = (action - action.mean(dim=0)).square().sum()
                    error = (logits - action).square().sum()
                    metrics["valid_unexplained"] = float(error / spread) if spread > 0 else 1.0
                else:
                    metrics["valid_accuracy"] = float((logits.argmax(-1) == action).float().mean())
        return metrics


def make_opponent_model(
    version: str,
    *,
    n_agents: int,
    obs_dim: int,
    n_actions: int,
    config: Any,
    seed: int,
    continuous: bool = False,
) -> OpponentMLP:
    """Build the opponent model `version` (a key of OM_VERSIONS) from a ShieldConfig
    (`continuous`: a Gaussian over Box actions of `n_actions` entries)."""
    return lookup(OM_VERSIONS, version, "om_version")(
        n_agents=n_agents,
        obs_dim=obs_dim,
        n_actions=n_actions,
        config=config,
        seed=seed,
        continuous=continuous,
    )


def _v0(
    *, n_agents: int, obs_dim: int, n_actions: int, config: Any, seed: int, continuous: bool
) -> OpponentMLP:
    return OpponentMLP(
        continuous=continuous,
        n_agents=n_agents,
        obs_dim=obs_dim,
        n_actions=n_actions,
        hidden=tuple(config.om_hidden),
        learning_rate=config.om_learning_rate,
        seed=seed,
    )


OM_VERSIONS: dict[str, Callable[..., OpponentMLP]] = {"v0": _v0}
