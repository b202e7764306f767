"""Lagrangian IPPO: IPPO with a cost critic and a Lagrange multiplier on the violation risk.

The constraint is P(violation in an episode) <= `max_risk` (docs/design.md). The cost
fed to the cost critic is the episode-violation indicator: 1 at the first step of an episode
at which any agent's cost is > 0, else 0, so the undiscounted episode cost is exactly the
indicator of "this episode violated" and its expectation is the violation probability.

The indicator is given to every agent of the copy, not only to the agent whose cost fired:
a violation is a team event (a collision involves two agents, and "any agent" defines it),
every agent's policy can prevent it, and the shared cost critic then learns one team risk.

Each update: the multiplier sees the violation rate of the episodes that finished during the
rollout, then the policy follows `(A_r - lambda * A_c) / (1 + lambda)` (reward advantages
standardised, cost advantages centred, as in OmniSafe's PPO-Lag), and the cost critic is
trained alongside the reward critic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.ippo import IPPO
from src.algos.lagrange import LAG_VERSIONS
from src.algos.maths import centre, compute_gae, value_loss
from src.checks import lookup
from src.config.run import RunConfig

__all__ = ["IPPOLag", "episode_violation_signal"]


def episode_violation_signal(first_violation: torch.Tensor, n_agents: int) -> torch.Tensor:
    """`[T, E]` first-violation flags -> `[T, E, A]` float cost signal, shared by every agent."""
    if first_violation.dim() != 2:
        raise ValueError(f"first_violation must be [T, E], got {tuple(first_violation.shape)}")
    signal = first_violation.to(torch.float32).unsqueeze(-1)
    return signal.expand(*first_violation.shape, n_agents)


class IPPOLag(IPPO):
    """IPPO under the constraint P(violation in an episode) <= `max_risk`."""

    uses_cost_critic: ClassVar[bool] = True

    def __init__(self, config: RunConfig | Mapping[str, Any], env: Any) -> None:
        """IPPO plus the multiplier chosen by `lag_version` against `max_risk`."""
        super().__init__(config, env)
        if self.config.lagrange is None:
            raise ValueError(f"algo {self.config.algo!r} has no lagrange section")
        self.lag = self.config.lagrange
        self.max_risk = self.lag.max_risk
        self.multiplier = lookup(LAG_VERSIONS, self.lag.lag_version, "lag_version")(self.lag)
        self._last_rate: float | None = None

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cost GAE, multiplier update, and the Lagrangian combination of the advantages."""
        buf, cfg = self.buffer, self.lag
        signal = episode_violation_signal(buf.first_violation, buf.n_agents)  # [T, E, A]
        with torch.no_grad():
            cost_values = self.net.cost_value(buf.inputs)
            next_cost_values = self.net.cost_value(buf.final_inputs)
        cost_advantages, cost_returns = compute_gae(
            rewards=signal,
            values=cost_values,
            next_values=next_cost_values,
            terminated=buf.terminated,
            truncated=buf.truncated,
            gamma=cfg.cost_gamma,
            gae_lambda=cfg.cost_gae_lambda,
        )
        episodes = self.recent_episodes
        # No finished episode means no new evidence about the risk: keep lambda as it is.
        self._last_rate = float(np.mean([ep.violated for ep in episodes])) if episodes else None
        if self._last_rate is not None:
            self.multiplier.update(self._last_rate)
        lam = self.multiplier.value
        batch["advantages"] = (batch["advantages"] - lam * centre(cost_advantages)) / (1.0 + lam)
        batch["cost_values"] = cost_values
        batch["cost_returns"] = cost_returns
        return batch

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The cost critic's value loss, weighted like the reward critic's."""
        loss = value_loss(
            values=self.net.cost_value(batch["inputs"]),
            returns=batch["cost_returns"],
            old_values=batch["cost_values"],
            clip_coef=self.cfg.clip_coef if self.cfg.clip_value_loss else None,
        )
        return {M.COST_VALUE_LOSS: self.cfg.vf_coef * loss}

    def algo_config(self) -> dict[str, Any]:
        """PPO's tunable hyperparameters and the multiplier's."""
        return {**self.cfg.tunables(), **self.lag.tunables()}

    def after_update(self, update: int) -> dict[str, float]:
        """The multiplier and the gap between the rollout's violation rate and `max_risk`."""
        out = {M.LAMBDA: float(self.multiplier.value)}
        if self._last_rate is not None:
            out[M.CONSTRAINT_GAP] = self._last_rate - self.max_risk
        return out

    def extra_state(self) -> dict[str, Any]:
        """The multiplier's state."""
        return {"multiplier": self.multiplier.state_dict(), "last_rate": self._last_rate}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the multiplier."""
        self.multiplier.load_state_dict(state["multiplier"])
        self._last_rate = state["last_rate"]

    def extra_policy_state(self) -> dict[str, Any]:
        """The final multiplier, for reference."""
        return {"lagrange_multiplier": float(self.multiplier.value)}
