"""Lagrangian IPPO: IPPO with a cost critic and a Lagrange multiplier on the violation risk.

The constraint is P(violation in an episode) <= `max_risk` (docs/design.md), where an
episode violates when any agent's cost is > 0 at some step. The cost signal is an indicator
at the episode's first violation step, so an episode's undiscounted cost is the indicator of
"this episode violated" and its expectation is the violation probability.

Markov cost target. Episodes go on after their first violation, but the indicator never
fires again, so the cost-to-go of a state is 0 once the episode has violated and the chance
of a first violation before that. The observation does not say which of the two holds, so a
critic trained on every step regresses two different targets on the same input. Here the
first violation ends the cost process: it is a terminal step of the cost GAE (cost 1, no
bootstrap), and the steps after it, up to the end of the episode, are masked out of the cost
critic's loss and get a cost advantage of 0. On the remaining steps the cost-to-go is a
function of the state, and the masking is exact rather than an approximation: an action
taken after the first violation cannot change whether the episode violated, so its gradient
contribution to the constraint is 0. (Giving the critic a "has violated" input would also be
Markov, but it changes the network's input and still spends critic capacity on a known 0.)
Which copies had already violated when a rollout starts is read from the episode tracker
(`EpisodeTracker.violated`).

Cost attribution. By default (`team_cost: false`) the first violation is charged to the
agents whose own cost fired at that step: both agents of a collision, the agent that entered
a hazard. Every agent's cost process still ends there, whoever caused it. Charging every
agent (`team_cost: true`) follows the gradient of the team's violation probability exactly,
but hands each agent the other agents' slips as pure noise; the per-agent charge drops only
the indirect effect of one agent's actions on another agent's violation, and has a much
lower variance. The multiplier always sees the team's violation rate. The cost advantages
use a shorter GAE lambda than the reward's (`cost_gae_lambda`): the Monte Carlo cost-to-go
is a single Bernoulli outcome, so leaning more on the cost critic lowers their variance.

Each update:

1. the multiplier sees the violation rate of the episodes of the last rollout, or of the last
   `risk_window` finished episodes when the rollout finished fewer (OmniSafe and SafePO
   average over a window of episodes in the same way), and is updated by `lag_version`;
2. cost advantages are standardised over the unmasked steps like the reward advantages, so
   that lambda weighs two signals of the same scale; with `cost_advantage_scale:
   batch_if_cost` they are 0 in a batch without a violating step, whose cost advantages
   are only the cost critic's noise (standardised, a unit signal that lambda weighs like a
   real one);
3. the policy follows `(A_r - lambda * A_c) / (1 + lambda)`, as in OmniSafe's PPO-Lag and
   CPPO-PID, and the cost critic is trained alongside the reward critic.

With `violation_ends_reward`, a violating step also ends the reward's process: the reward GAE
does not bootstrap past it, so the actions that led to a violation lose the reward the
critic expected after it (the early-terminated MDP of Sun et al., 2021, "Safe Exploration by
Solving Early Terminated MDP", with the episode going on in the env: the step after a
violation starts a new reward process). That price is in the reward's own units and does not
depend on lambda, so it still acts where lambda has reached its cap; the reward critic then
learns the reward until the next violation, a function of the state.

The multiplier is capped at `lambda_max`. Where the policy cannot meet the constraint, a
multiplier that keeps rising silences the reward advantages: an untrained policy that
violates in every episode whatever it does then gets no direction from the cost (which
only counts whether, not when, it violates) and none left from the reward, and a trained
one trades its return away, e.g. stops walking to its goal, without meeting the constraint.
The cap keeps a share of `1 / (1 + lambda_max)` of the reward signal.

Where this follows OmniSafe (`common/lagrange.py`, `common/pid_lagrange.py`, PPOLag and
CPPOPID) and SafePO (`common/lagrange.py`, `multi_agent/mappolag.py`) and where not:

- cost advantages: OmniSafe and SafePO's single-agent PPO-Lag only centre them; SafePO's
  MAPPO-Lag standardises them. With an indicator cost the centred advantages are much
  smaller than the standardised reward advantages, which makes a given lambda weigh the cost
  far less than it says and forces lambda up to large values; here they are standardised.
  Centred only, they left the team unsafe on Safe Multi-Agent MuJoCo, lambda at its cap in
  every run (BENCHMARKS.md, "Safe Multi-Agent MuJoCo: a longer-sighted cost critic"), and
  that option was deleted.
- multiplier update: `pid` is OmniSafe's CPPO-PID controller (same EMA smoothing,
  positive-only derivative, integral clamped at 0). Its default gains (0.1, 0.01, 0.01) are
  tuned for episode costs of about 25; the error here is a probability (at most 1), so the
  gains are larger.
- initial value: OmniSafe and SafePO start at 0.001, SafePO's MAPPO-Lag at 0.78; here at 0
  (`lambda_init`), since a large multiplier before the policy has learned anything is the
  trap described above.
- clamping: both project lambda onto >= 0; OmniSafe caps CPPO-PID at `penalty_max` = 100
  (only without `sum_norm`) and PPO-Lag not at all; here both versions stop at `lambda_max`.
- multiplier learning rate (`v0`): OmniSafe and SafePO run Adam at 0.035 on lambda, which
  moves it by about 0.035 per update whatever the size of the violation; `v0` here is plain
  projected gradient ascent with step `lagrangian_lr` per unit of violation.
- the risk estimate: OmniSafe averages the last 100 episodes, SafePO the last 50; here at
  least the whole last rollout, so that no finished episode of it is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.ippo import IPPO
from src.algos.lagrange import LAG_VERSIONS
from src.algos.maths import compute_gae
from src.checks import lookup
from src.config.run import RunConfig

__all__ = [
    "IPPOLag",
    "cost_process_mask",
    "episode_violation_signal",
    "markov_cost_gae",
    "masked_normalise",
    "masked_value_loss",
]


def episode_violation_signal(first_violation: torch.Tensor, n_agents: int) -> torch.Tensor:
    """`[T, E]` first-violation flags -> `[T, E, A]` float cost signal, shared by every agent."""
    if first_violation.dim() != 2:
        raise ValueError(f"first_violation must be [T, E], got {tuple(first_violation.shape)}")
    signal = first_violation.to(torch.float32).unsqueeze(-1)
    return signal.expand(*first_violation.shape, n_agents)


def cost_process_mask(
    *, first_violation: torch.Tensor, done: torch.Tensor, violated_at_start: torch.Tensor
) -> torch.Tensor:
    """`[T, E]` bool: step t belongs to the cost process (its episode had not violated before).

    `first_violation` `[T, E]`: step t is its episode's first violation; `done` `[T, E]`: step
    t ended its episode; `violated_at_start` `[E]`: the episode running in copy e when the
    rollout began had already violated. The first-violation step itself is in the process
    (it carries the cost); the steps after it, up to the end of the episode, are not.
    """
    if first_violation.dim() != 2 or done.shape != first_violation.shape:
        raise ValueError(
            f"first_violation and done must both be [T, E], got {tuple(first_violation.shape)} "
            f"and {tuple(done.shape)}"
        )
    if violated_at_start.shape != first_violation.shape[1:]:
        raise ValueError(
            f"violated_at_start must be [E] = [{first_violation.shape[1]}], got "
            f"{tuple(violated_at_start.shape)}"
        )
    mask = torch.empty_like(first_violation, dtype=torch.bool)
    violated = violated_at_start.bool().clone()
    for t in range(first_violation.shape[0]):
        mask[t] = ~violated
        violated = (violated | first_violation[t].bool()) & ~done[t].bool()
    return mask


def markov_cost_gae(
    *,
    first_violation: torch.Tensor,
    signal: torch.Tensor | None = None,
    mask: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cost GAE of the indicator cost with the first violation as the cost process's end.

    `first_violation` and `mask` are `[T, E]` (see `cost_process_mask`); the other tensors
    `[T, E, A]` as in `compute_gae`. Returns `(advantages, returns)` `[T, E, A]`; both are 0
    on masked steps (no target there), and a first-violation step has return 1.
    """
    n_agents = values.shape[-1]
    if signal is None:
        signal = episode_violation_signal(first_violation, n_agents)
    ends = first_violation.bool().unsqueeze(-1).expand_as(terminated)
    advantages, returns = compute_gae(
        rewards=signal,
        values=values,
        next_values=next_values,
        terminated=terminated.bool() | ends,
        truncated=truncated.bool() & ~ends,
        gamma=gamma,
        gae_lambda=gae_lambda,
    )
    keep = mask.unsqueeze(-1).expand_as(values).to(values.dtype)
    return advantages * keep, returns * keep


def masked_normalise(x: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """Standardise `x` over the entries where `mask` holds; other entries become 0."""
    if mask.shape != x.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and x {tuple(x.shape)} differ")
    keep = mask.bool()
    out = torch.zeros_like(x)
    if not keep.any():
        return out
    selected = x[keep]
    centred = selected - selected.mean()
    if selected.numel() > 1:
        centred = centred / (selected.std(unbiased=False) + eps)
    out[keep] = centred
    return out


def masked_value_loss(
    *,
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip_coef: float | None = None,
) -> torch.Tensor:
    """`maths.value_loss` averaged over the entries where `mask` holds (0 if there are none)."""
    if not values.shape == returns.shape == mask.shape:
        raise ValueError(
            f"values, returns and mask must share a shape, got {tuple(values.shape)}, "
            f"{tuple(returns.shape)}, {tuple(mask.shape)}"
        )
    weight = mask.to(values.dtype)
    squared = (values - returns) ** 2
    if clip_coef is not None:
        if old_values is None:
            raise ValueError("a clipped value loss needs old_values")
        clipped = old_values + (values - old_values).clamp(-clip_coef, clip_coef)
        squared = torch.maximum(squared, (clipped - returns) ** 2)
    return 0.5 * (squared * weight).sum() / weight.sum().clamp(min=1.0)


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
        self._recent_violations: deque[bool] = deque()
        self._last_rate: float | None = None
        self._violated_at_start = np.zeros(self.num_envs, dtype=bool)

    def collect_rollout(self) -> None:
        """IPPO's rollout, remembering which copies' episodes had violated before it began."""
        self._violated_at_start = self.tracker.violated.copy()
        super().collect_rollout()

    def risk_estimate(self) -> float | None:
        """Violation rate of the episodes in the risk window (None before any finished)."""
        if not self._recent_violations:
            return None
        return float(np.mean(self._recent_violations))

    def _record_episodes(self) -> None:
        """Add the rollout's finished episodes to the risk window and trim it."""
        episodes = self.recent_episodes
        self._recent_violations.extend(ep.violated for ep in episodes)
        keep = max(self.lag.risk_window, len(episodes))
        while len(self._recent_violations) > keep:
            self._recent_violations.popleft()

    def reward_ends(self) -> torch.Tensor | None:
        """With `violation_ends_reward`, every step at which some agent's cost fired ends every
        agent's reward process (the team shares the reward); None without it."""
        if not self.lag.violation_ends_reward:
            return None
        violating = (self.buffer.costs > 0).any(dim=-1, keepdim=True)
        return violating.expand_as(self.buffer.costs)

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cost GAE, multiplier update, and the Lagrangian combination of the advantages."""
        buf, cfg = self.buffer, self.lag
        with torch.no_grad():
            cost_values = self.net.cost_value(buf.inputs)
            next_cost_values = self.net.cost_value(buf.final_inputs)
        if cfg.cost_signal == "every":
            cost_advantages, cost_returns, mask = self._violation_count_gae(
                cost_values, next_cost_values
            )
        else:
            cost_advantages, cost_returns, mask = self._first_violation_gae(
                cost_values, next_cost_values
            )
        agent_mask = mask.unsqueeze(-1).expand_as(cost_values)
        cost_advantages = self._scaled_cost_advantages(cost_advantages, agent_mask)
        self._record_episodes()
        # No finished episode yet means no evidence about the risk: keep lambda as it is.
        self._last_rate = self.risk_estimate()
        if self._last_rate is not None:
            self.multiplier.update(self._last_rate)
        lam = self.multiplier.value
        batch["advantages"] = (batch["advantages"] - lam * cost_advantages) / (1.0 + lam)
        batch["cost_values"] = cost_values
        batch["cost_returns"] = cost_returns
        batch["cost_mask"] = agent_mask
        return batch

    def _scaled_cost_advantages(self, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The cost advantages standardised over the unmasked steps, or 0 with
        `cost_advantage_scale: batch_if_cost` when none of those steps violated."""
        quiet = not ((self.buffer.costs > 0) & mask).any()
        if self.lag.cost_advantage_scale == "batch_if_cost" and quiet:
            return torch.zeros_like(advantages)
        return masked_normalise(advantages, mask)

    def _first_violation_gae(
        self, cost_values: torch.Tensor, next_cost_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cost advantages and returns of the indicator cost, and the cost process mask."""
        buf, cfg = self.buffer, self.lag
        done = (buf.terminated | buf.truncated).any(dim=-1)  # [T, E]
        mask = cost_process_mask(
            first_violation=buf.first_violation,
            done=done,
            violated_at_start=torch.from_numpy(self._violated_at_start),
        )
        signal = None
        if not cfg.team_cost:
            signal = (buf.first_violation.unsqueeze(-1) & (buf.costs > 0)).to(torch.float32)
        advantages, returns = markov_cost_gae(
            first_violation=buf.first_violation,
            signal=signal,
            mask=mask,
            values=cost_values,
            next_values=next_cost_values,
            terminated=buf.terminated,
            truncated=buf.truncated,
            gamma=cfg.cost_gamma,
            gae_lambda=cfg.cost_gae_lambda,
        )
        return advantages, returns, mask

    def _violation_count_gae(
        self, cost_values: torch.Tensor, next_cost_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cost advantages and returns of the count of violating steps (every step counts)."""
        buf, cfg = self.buffer, self.lag
        violating = buf.costs > 0  # [T, E, A]
        if cfg.team_cost:
            violating = violating.any(dim=-1, keepdim=True).expand_as(violating)
        advantages, returns = compute_gae(
            rewards=violating.to(torch.float32),
            values=cost_values,
            next_values=next_cost_values,
            terminated=buf.terminated,
            truncated=buf.truncated,
            gamma=cfg.cost_gamma,
            gae_lambda=cfg.cost_gae_lambda,
        )
        return advantages, returns, torch.ones(violating.shape[:2], dtype=torch.bool)

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The cost critic's value loss over the cost process's steps, weighted like V's."""
        loss = masked_value_loss(
            values=self.net.cost_value(batch["inputs"]),
            returns=batch["cost_returns"],
            mask=batch["cost_mask"],
            old_values=batch["cost_values"],
            clip_coef=self.cfg.clip_coef if self.cfg.clip_value_loss else None,
        )
        return {M.COST_VALUE_LOSS: self.cfg.vf_coef * loss}

    def algo_config(self) -> dict[str, Any]:
        """PPO's tunable hyperparameters and the multiplier's."""
        return {**self.cfg.tunables(), **self.lag.tunables()}

    def after_update(self, update: int) -> dict[str, float]:
        """The multiplier and the gap between the risk estimate it saw and `max_risk`."""
        out = {M.LAMBDA: float(self.multiplier.value)}
        if self._last_rate is not None:
            out[M.CONSTRAINT_GAP] = self._last_rate - self.max_risk
        return out

    def extra_state(self) -> dict[str, Any]:
        """The multiplier's state and the episodes of the risk window."""
        return {
            "multiplier": self.multiplier.state_dict(),
            "last_rate": self._last_rate,
            "recent_violations": list(self._recent_violations),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the multiplier and the risk window."""
        self.multiplier.load_state_dict(state["multiplier"])
        self._last_rate = state["last_rate"]
        self._recent_violations.clear()
        self._recent_violations.extend(bool(v) for v in state["recent_violations"])

    def extra_policy_state(self) -> dict[str, Any]:
        """The final multiplier, for reference."""
        return {"lagrange_multiplier": float(self.multiplier.value)}
