"""The v1 shield: model-predictive shielding of the joint action with an episode risk budget.

What it promises. For each episode, the shield keeps the team's probability of a violation
(some agent's cost > 0 at some step of the episode) at most `max_risk`, or at most V(s_0) when
even the safest continuation from the first observation is riskier than that (an infeasible
start). The probabilities are those of the shield's learned models, made pessimistic by taking
the worst world-model member and by the calibration factor of the world model's risk head on
held-out real transitions (`src.algos.shield.bounds.calibration_factor`).

How. Per env copy and step, with s the joint observation and a a joint action:

- Q(s, a) = r(s, a) + (1 - r(s, a)) (1 - d(s, a)) V(s'(s, a)) is the risk of taking a now and
  the safest continuation after it: r, d and s' come from a world-model member (`lookahead`
  imagined steps, each after the first following that member's own safest action), V is the
  member's learned least risk-to-go (`critic.RiskCritic`). U(s, a) = c * max_m Q_m(s, a) is the
  certified risk (c the calibration factor), and V(s) = min_a U(s, a) the safest action's.
- The *excess* of a is e(s, a) = U(s, a) - V(s) >= 0: the risk it adds over the safest
  continuation. The shield gives every episode an excess budget B = max_risk - V(s_0) and
  executes the team's proposal if its excess fits what is left; otherwise the certified joint
  action (excess within the budget) that the policy finds most likely; the safest action (excess
  0, always certified) is the fallback. Each executed step's excess is spent.
- Composition: for exact models, the risk of any way of acting is V(s_0) plus the expected sum
  of the excesses of the actions taken (the first-passage analogue of the performance-difference
  identity), so spending at most B = max_risk - V(s_0) of excess per episode keeps P(violation in
  the episode) <= max_risk, whatever the policy proposes. This holds for every horizon: the
  episode may run past the training cap (the evaluation lifts it) without changing the bound.

Cost. Every joint action of every copy is judged in one batched call per step (all members
together): V(s) = min_a U(s, a) is exact for the shield's models, so no proposal passes on an
estimate of it. Nothing is sampled: the shield is deterministic given its models.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from src.algos.shield.critic import RiskCritic, joint_actions
from src.algos.shield.world_model import TeamWorldModel
from src.config.shield import ShieldConfig

__all__ = ["BudgetShield", "BudgetStats", "Decision"]


@dataclass
class Decision:
    """What the shield decided at its latest call, per env copy [E] (for diagnostics)."""

    budget: np.ndarray
    """Excess budget left before the decision (negative: an infeasible start)."""
    bound: np.ndarray
    """Certified risk U(s, a) of the executed joint action."""
    excess: np.ndarray
    """Its excess over the safest joint action (the budget it spent)."""
    safest: np.ndarray
    """V(s) = min_a U(s, a)."""
    fallback: np.ndarray
    """The proposal did not fit and nothing but the safest action did."""
    remaining: np.ndarray
    """Steps of the shield's horizon left, this one included."""


@dataclass
class BudgetStats:
    """Counters accumulated over filter calls (reset by the trainer at each update)."""

    decisions: int = 0
    """(copy, step) decisions made (one per env copy and step)."""
    interventions: int = 0
    """Agent actions changed (the executed joint action differs from the proposal there)."""
    no_safe_action: int = 0
    """Decisions that fell back to the safest action because no other fitted the budget."""
    infeasible_starts: int = 0
    """Episodes whose first observation already had V(s_0) > max_risk."""
    bound_sum: float = 0.0
    """Sum of the certified risk U(s, a) of the executed joint actions."""
    budget_sum: float = 0.0
    """Sum over decisions of the excess budget left before the decision."""
    seconds: float = 0.0
    """Wall time spent in the filter."""

    @property
    def mean_bound(self) -> float:
        """Mean certified risk of the executed joint actions, NaN without decisions."""
        return self.bound_sum / self.decisions if self.decisions else math.nan

    @property
    def mean_budget(self) -> float:
        """Mean excess budget left before a decision, NaN without decisions."""
        return self.budget_sum / self.decisions if self.decisions else math.nan


class BudgetShield:
    """v1 shield (see the module docstring); an `ActionFilter`."""

    def __init__(
        self,
        *,
        config: ShieldConfig,
        world_model: TeamWorldModel,
        critic: RiskCritic,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
    ) -> None:
        """Assemble the parts; the excess budgets are sized by the first call."""
        if getattr(world_model, "cost_dim", None) != 1:
            raise ValueError("the v1 shield needs a world model of the team's risk (wm_version v1)")
        self.config = config
        self.world_model = world_model
        self.critic = critic
        self.n_agents, self.obs_dim, self.n_actions = n_agents, obs_dim, n_actions
        self.joint = joint_actions(n_agents, n_actions)  # [J, A]
        self.calibration = 1.0
        self.budget = np.zeros(0, dtype=np.float64)  # [E] excess budget left
        self.stats = BudgetStats()
        self.last: Decision | None = None

    # ------------------------------------------------------------------ risks

    def member_q(
        self, joint_obs: torch.Tensor, actions: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        """Q_m(s, a) of every member over the `remaining` [N] steps starting with this one:
        joint_obs [N, J], actions [N, A] -> [M, N].

        `lookahead` imagined steps: after the first, the member follows its own safest joint
        action; its critic values the last successor over the steps then left.
        """
        m = self.world_model.ensemble_size
        obs = joint_obs.unsqueeze(0).expand(m, *joint_obs.shape)
        act = actions.unsqueeze(0).expand(m, *actions.shape)
        left = remaining.unsqueeze(0).expand(m, -1)
        return self._member_q(obs, act, left, self.config.lookahead)

    def _member_q(
        self, obs: torch.Tensor, act: torch.Tensor, remaining: torch.Tensor, depth: int
    ) -> torch.Tensor:
        """[M, N, J], [M, N, A], [M, N] -> [M, N]; each member in its own row."""
        next_obs, risk, done = self.world_model.predict(obs, act)
        # The world model may hand back a view of a reused buffer: copy before the next call.
        next_obs = next_obs.clone()
        risk, done = risk.squeeze(-1).clone(), done.clone()
        left = remaining - 1
        if depth <= 1:
            tail = self.critic.values(next_obs, left)
        else:
            m, n, j = next_obs.shape
            k = self.joint.shape[0]
            expanded = next_obs.unsqueeze(2).expand(m, n, k, j).reshape(m, n * k, j)
            options = self.joint.unsqueeze(0).expand(n, k, -1).reshape(1, n * k, -1)
            deeper = left.unsqueeze(2).expand(m, n, k).reshape(m, n * k)
            q = self._member_q(expanded, options.expand(m, -1, -1), deeper, depth - 1)
            tail = torch.where(left > 0, q.view(m, n, k).amin(dim=2), torch.zeros_like(risk))
        return risk + (1.0 - risk) * (1.0 - done) * tail

    def certified(
        self, joint_obs: torch.Tensor, actions: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        """U(s, a) = calibration * max_m Q_m(s, a), capped at 1: [N]."""
        q = self.member_q(joint_obs, actions, remaining).amax(dim=0)
        return (q * self.calibration).clamp_(max=1.0)

    # ------------------------------------------------------------------ the filter

    def reset(self, num_envs: int, seed: int) -> None:
        """A new sequence of episodes over `num_envs` copies (the shield samples nothing)."""
        self.budget = np.zeros(num_envs, dtype=np.float64)
        self.stats = BudgetStats()

    def filter(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """obs [E, A, D], proposed [E, A] int, logits [E, A, n_actions] (the policy's),
        episode_step [E] (1-based step of these actions in their episode; 1 starts a new
        budget) -> executed [E, A] int64, intervened [E, A] bool."""
        start = time.perf_counter()
        obs_t, proposed_np, logits_t, step = self._check(obs, proposed, logits, episode_step)
        e, a = proposed_np.shape
        if self.budget.shape != (e,):
            self.budget = np.zeros(e, dtype=np.float64)
        with torch.inference_mode():
            joint = obs_t.reshape(e, a * self.obs_dim)
            k = self.joint.shape[0]
            # Steps of the guarantee left, this one included.
            remaining = torch.from_numpy(self.config.horizon - step + 1).float()
            risks = self.certified(
                joint.repeat_interleave(k, dim=0),
                self.joint.repeat(e, 1),
                remaining.repeat_interleave(k),
            )
            risks = risks.double().view(e, k)  # [E, K] U(s, a) of every joint action
            safest = risks.min(dim=1)
            over = (risks - safest.values[:, None]).clamp_(min=0.0)  # [E, K] excess
            new = step == 1
            if new.any():
                self.budget[new] = self.config.max_risk - safest.values.numpy()[new]
                self.stats.infeasible_starts += int((self.budget[new] < 0).sum())
            budget = np.maximum(self.budget, 0.0)
            executed, bound, excess, fallback = self._choose(
                proposed_np, logits_t, risks, over, safest.indices, budget
            )
        self.last = Decision(
            budget=self.budget.copy(),
            bound=bound,
            excess=excess,
            safest=safest.values.numpy(),
            fallback=fallback,
            remaining=remaining.numpy(),
        )
        self.stats.budget_sum += float(budget.sum())
        self.budget -= excess
        intervened = executed != proposed_np
        s = self.stats
        s.decisions += e
        s.interventions += int(intervened.sum())
        s.no_safe_action += int(fallback.sum())
        s.bound_sum += float(bound.sum())
        s.seconds += time.perf_counter() - start
        return executed, intervened

    def _choose(
        self,
        proposed: np.ndarray,
        logits: torch.Tensor,
        risks: torch.Tensor,
        over: torch.Tensor,
        safest: torch.Tensor,
        budget: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per copy: the proposal if its excess fits, else the most likely joint action whose
        excess fits, else the safest (the fallback).

        Returns executed [E, A], the executed actions' certified risks and excesses [E], and
        [E] whether the copy fell back to the safest action for want of any other.
        """
        e = proposed.shape[0]
        rows = torch.arange(e)
        index = self._index(proposed)
        allowed = over <= torch.from_numpy(budget)[:, None]  # [E, K]
        # Joint log-probability of every option under the policy: sum over agents.
        log_p = torch.log_softmax(logits, dim=-1)  # [E, A, n]
        agent = torch.arange(self.n_agents)
        score = log_p[:, agent, self.joint].sum(dim=-1).double()  # [E, K]
        score = torch.where(allowed, score, torch.full_like(score, -math.inf))
        best = torch.where(allowed.any(dim=1), score.argmax(dim=1), safest)
        pick = torch.where(allowed[rows, index], index, best)
        fallback = ((allowed.sum(dim=1) <= 1) & ~allowed[rows, index]).numpy()
        executed = self.joint[pick].numpy()
        return executed, risks[rows, pick].numpy(), over[rows, pick].numpy(), fallback

    def _index(self, actions: np.ndarray) -> torch.Tensor:
        """Row of each joint action [E, A] in `self.joint` (agent 0 slowest-varying)."""
        weights = self.n_actions ** np.arange(self.n_agents - 1, -1, -1)
        return torch.from_numpy(np.asarray(actions, dtype=np.int64) @ weights)

    def _check(
        self, obs: np.ndarray, proposed: np.ndarray, logits: torch.Tensor, episode_step: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray, torch.Tensor, np.ndarray]:
        a, d, n = self.n_agents, self.obs_dim, self.n_actions
        obs = np.asarray(obs, dtype=np.float32)
        if obs.ndim != 3 or obs.shape[1:] != (a, d):
            raise ValueError(f"obs must have shape [E, {a}, {d}], got {obs.shape}")
        e = obs.shape[0]
        proposed = np.asarray(proposed)
        if proposed.shape != (e, a) or not np.issubdtype(proposed.dtype, np.integer):
            raise ValueError(f"proposed must be an int array [{e}, {a}], got {proposed.shape}")
        if proposed.min() < 0 or proposed.max() >= n:
            raise ValueError(f"proposed actions must lie in [0, {n}), got {proposed}")
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (e, a, n):
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
            raise ValueError(f"logits must be a tensor [{e}, {a}, {n}], got {shape}")
        step = np.asarray(episode_step)
        if step.shape != (e,) or not np.issubdtype(step.dtype, np.integer) or step.min() < 1:
            raise ValueError(f"episode_step must be ints >= 1 of shape [{e}], got {episode_step}")
        return (
            torch.from_numpy(obs),
            proposed.astype(np.int64),
            logits.detach().float(),
            step.astype(np.int64),
        )
