"""Lagrangian IPPO: IPPO with a cost critic and a Lagrange multiplier on the violation risk.

The constraint is P(violation in an episode) <= `max_risk` (DESIGN.md section 6). The cost
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

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.ippo import IPPO, IPPOConfig
from src.algos.maths import centre, compute_gae, value_loss
from src.algos.registry import LAG_VERSIONS, lookup

__all__ = ["IPPOLag", "IPPOLagConfig", "episode_violation_signal"]


@dataclass(frozen=True, kw_only=True)
class IPPOLagConfig(IPPOConfig):
    """IPPO's hyperparameters plus the cost critic's and the multiplier's."""

    cost_gamma: float = 1.0
    """Discount of the cost signal; 1 makes the cost return the episode-violation indicator."""
    cost_gae_lambda: float = 0.95
    """GAE lambda of the cost advantages."""
    lambda_init: float = 0.0
    """Initial multiplier of `lag_version: v0`."""
    lagrangian_lr: float = 0.5
    """Ascent step of `v0` per unit of (violation rate - max_risk)."""
    pid_kp: float = 1.0
    """Proportional gain of `lag_version: pid`."""
    pid_ki: float = 0.5
    """Integral gain of `pid`."""
    pid_kd: float = 1.0
    """Derivative gain of `pid` (acts only on rising violation rates)."""
    pid_d_delay: int = 10
    """Updates between the two smoothed rates whose difference is the derivative term."""
    pid_ema_p: float = 0.5
    """EMA weight smoothing the proportional term (0 = none)."""
    pid_ema_d: float = 0.5
    """EMA weight smoothing the rate used by the derivative term (0 = none)."""
    pid_max_lambda: float = 100.0
    """Upper limit of the pid multiplier."""

    def __post_init__(self) -> None:
        """IPPO's checks plus the multiplier's ranges."""
        super().__post_init__()
        for name in ("cost_gamma", "cost_gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}")
        for name in ("pid_ema_p", "pid_ema_d"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        if self.lagrangian_lr <= 0.0:
            raise ValueError(f"lagrangian_lr must be > 0, got {self.lagrangian_lr!r}")
        d = self.pid_d_delay
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"pid_d_delay must be an int >= 1, got {d!r}")


def episode_violation_signal(first_violation: torch.Tensor, n_agents: int) -> torch.Tensor:
    """`[T, E]` first-violation flags -> `[T, E, A]` float cost signal, shared by every agent."""
    if first_violation.dim() != 2:
        raise ValueError(f"first_violation must be [T, E], got {tuple(first_violation.shape)}")
    signal = first_violation.to(torch.float32).unsqueeze(-1)
    return signal.expand(*first_violation.shape, n_agents)


class IPPOLag(IPPO):
    """IPPO under the constraint P(violation in an episode) <= `max_risk`."""

    config_cls: ClassVar[type[IPPOConfig]] = IPPOLagConfig
    uses_cost_critic: ClassVar[bool] = True

    def __init__(
        self,
        run_config: Mapping[str, Any],
        env: Any,
        *,
        extra_algo_params: Collection[str] = (),
    ) -> None:
        """IPPO plus the multiplier chosen by `lag_version` against `max_risk`."""
        for key in ("max_risk", "lag_version"):
            if key not in run_config:
                raise ValueError(f"run config lacks the key {key!r} needed by ippo_lag")
        super().__init__(run_config, env, extra_algo_params=extra_algo_params)
        max_risk = float(run_config["max_risk"])
        if not 0.0 <= max_risk <= 1.0:
            raise ValueError(f"run config max_risk={max_risk!r}: must lie in [0, 1]")
        self.max_risk = max_risk
        make_multiplier = lookup(LAG_VERSIONS, run_config["lag_version"], "lag_version")
        self.multiplier = make_multiplier(self.cfg, limit=max_risk)
        self._last_rate: float | None = None

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cost GAE, multiplier update, and the Lagrangian combination of the advantages."""
        buf, cfg = self.buffer, self.cfg
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
