"""The shield: model-predictive shielding of the joint action, with an allowance on the
models' risk over a receding horizon.

Risks. Per env copy and step, with s the joint observation and a a joint action:

- Q_m(s, a) = r + (1 - r)(1 - d) V_m(s'(s, a)) is world-model member m's probability that
  some agent's cost is > 0 within the next H steps (H = `horizon`) if the team takes a now
  and the safest continuation after it: r, d and s' come from the member's one imagined step,
  V_m is its learned least risk-to-go (`critic.RiskCritic`). q(s, a) = max_m Q_m is the
  models' risk (the worst member): the shield decides on it.
- U(s, a) = g(q(s, a)) is the risk that each decision reports, a *calibrated estimate* (not
  a certified risk of the decision; the certificate is about the deployed policy): g is the
  calibration of q on the real outcomes of the decisions the shield took
  (`src.algos.shield.calibration`), or, until there are enough of them, c * q with c the
  factor of the world model's one-step risk on held-out real transitions
  (`src.algos.shield.bounds.calibration_factor`). g is increasing, so deciding on q or on U
  with the corresponding allowance is the same decision.
- Every joint action is judged with the other agents' actual proposals: the team's proposal
  is one joint action among n_actions ** n_agents (`coordination: central`). With
  `coordination: decentralised` each agent's shield sees only its own proposal and judges its
  own action b by rho_i(s, b), the expectation of q(s, (b, a_-i)) over the others' actions
  predicted by the opponent model (`src.algos.shield.decentral`); no coordinator, work linear
  in the team.

Decisions, with the allowance a (`BudgetShield.allowance`: adapted to the realized violation
rate in training, chosen by the certificate for deployment):

- `coordination: central`: the proposal is executed if q(s, a) <= a; otherwise the most
  likely joint action with q <= a that changes one agent's proposed action (the policy's
  probability of that agent's new action); otherwise one agent's action changed at a time
  from the safest of those, each time the change of least q, until q <= a (that joint action
  is executed) or no change lowers q (the least q found is executed: the fallback). This is
  Bastani et al.'s model-predictive shielding with the backup found by the models; what it
  promises about the real env is the certificate's statement, not the models'.
- `coordination: decentralised`: agent i's action b is allowed when the risk it adds over its
  safest action, rho_i(s, b) - min_b' rho_i(s, b'), is within a (the others' share of the
  risk is not its to offset); it keeps its proposal when allowed, else takes its most likely
  allowed action. The decision's q is the largest rho_i of the executed actions; the
  calibration and the certificate treat it like the central one's.

Cost. The proposals of all copies are judged first (one batched model call), then the
A (n_actions - 1) one-agent changes of the proposals that failed, then, for the copies where
none passed, A * (n_actions - 1) joint actions at the first change and (A - 1) * (n_actions - 1)
at each later one (the agent that just moved is not judged again), at most
`search_sweeps` * A changes (`search.best_change_descent`, which stops a copy once its q is
within the allowance or no single agent's change lowers it). With
`coordination: decentralised`, n_agents proposals and, for the agents whose proposal is over
the allowance, n_actions - 1 other actions, each against at most `opponent_samples`
completions of the others' actions. Nothing is sampled but those completions when there are
more than `opponent_samples` (Latin hypercube, seeded by `reset`): the central shield is
deterministic given its models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from src.algos.filters import RiskFilter
from src.algos.seeding import derived_seeds
from src.algos.shield.calibration import CalibrationMap
from src.algos.shield.critic import RiskCritic
from src.algos.shield.decentral import (
    mixed_probs,
    opponent_completions,
    own_action_risk,
    tile_span,
)
from src.algos.shield.ensemble import every_member
from src.algos.shield.opponent_model import OpponentModel
from src.algos.shield.search import best_change_descent
from src.algos.shield.world_model import TeamWorldModel
from src.config.shield import ShieldConfig

__all__ = ["BudgetShield", "BudgetStats", "Decision"]


@dataclass
class Decision:
    """What the shield decided at its latest call, per env copy [E] (for diagnostics)."""

    bound: np.ndarray
    """Calibrated risk estimate U(s, a) = g(q(s, a)) of the executed joint action."""
    safest: np.ndarray
    """The least q(s, b) found over joint actions b (NaN where the proposal or a one-agent
    change passed without a search)."""
    allowance: np.ndarray
    """The most q the executed action was allowed: the allowance (the least q found where
    that exceeds it)."""
    fallback: np.ndarray
    """The proposal did not fit and nothing but the least-risk action found did."""
    remaining: np.ndarray
    """Steps the risk covers, this one included (`horizon`)."""
    raw: np.ndarray
    """q(s, a) = max_m Q_m(s, a) of the executed joint action (the models' own risk)."""


@dataclass
class BudgetStats:
    """Counters accumulated over filter calls (reset by the trainer at each update)."""

    decisions: int = 0
    """(copy, step) decisions made (one per env copy and step)."""
    interventions: int = 0
    """Agent actions changed (the executed joint action differs from the proposal there)."""
    no_safe_action: int = 0
    """Decisions that fell back to the least-risk action found because none was within the
    allowance."""
    bound_sum: float = 0.0
    """Sum of the calibrated risk estimate U(s, a) of the executed joint actions."""
    seconds: float = 0.0
    """Wall time spent in the filter."""

    @property
    def mean_bound(self) -> float:
        """Mean calibrated risk estimate U of the executed joint actions, NaN without
        decisions."""
        return self.bound_sum / self.decisions if self.decisions else math.nan


class BudgetShield(RiskFilter):
    """The shield (`shield_version` v0; see the module docstring); an `ActionFilter`."""

    def __init__(
        self,
        *,
        config: ShieldConfig,
        world_model: TeamWorldModel,
        critic: RiskCritic,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        opponent_model: OpponentModel | None = None,
        seed: int = 0,
    ) -> None:
        """Assemble the parts. `coordination: decentralised` needs the `opponent_model`;
        `seed` seeds its sampled completions of the others' actions until `reset`."""
        if getattr(world_model, "cost_dim", None) != 1:
            raise ValueError("the shield needs a world model of the team's risk (wm_version v0)")
        if config.coordination == "decentralised" and opponent_model is None:
            raise ValueError("coordination 'decentralised' needs an opponent model")
        self.config = config
        self.world_model = world_model
        self.critic = critic
        self.opponent_model = opponent_model
        # Uniform-mixing weight of the opponent model; the trainer updates it after each fit.
        self.opponent_weight = 0.0 if config.shield_opponent_mode == "model" else 1.0
        self.generator = torch.Generator().manual_seed(seed)
        self.n_agents, self.obs_dim, self.n_actions = n_agents, obs_dim, n_actions
        # A factor of the models' risk until the shield has labelled decisions, then g(q).
        self.calibration: float | CalibrationMap = 1.0
        # What the calibrated risk U of an executed action may be: adapted in training,
        # certified for deployment (calibration.py).
        self.allowance = config.max_risk
        self.stats = BudgetStats()
        self.last: Decision | None = None

    # ------------------------------------------------------------------ risks

    def member_q(
        self, joint_obs: torch.Tensor, actions: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        """Q_m(s, a) of every member over the `remaining` [N] steps starting with this one:
        joint_obs [N, J], actions [N, A] -> [M, N]."""
        return self.member_q_options(joint_obs, actions.unsqueeze(1), remaining).squeeze(2)

    def member_q_options(
        self,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        remaining: torch.Tensor,
        *,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q_m(s, a) of each state [N, J] under each of its K joint actions [N, K, A], over the
        `remaining` [N] steps -> [M, N, K]: the member's one imagined step, its critic valuing
        the successor over the steps then left.

        With `state_index` [P] int64, row p of `options` [P, K, A] and `remaining` [P] is of
        state `state_index[p]` of `joint_obs` -> [M, P, K] (`RiskCritic.option_q`).
        """
        m = self.world_model.ensemble_size
        obs, act, left = (every_member(t, m) for t in (joint_obs, options, remaining))
        return self.critic.option_q(self.world_model, obs, act, left - 1, state_index=state_index)

    def raw_risk(
        self, joint_obs: torch.Tensor, actions: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        """q(s, a) = max_m Q_m(s, a), the worst member's risk before calibration: [N]."""
        return self.raw_risk_options(joint_obs, actions.unsqueeze(1), remaining).squeeze(1)

    def raw_risk_options(
        self,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        remaining: torch.Tensor,
        *,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q of each state [N, J] under each of its K joint actions [N, K, A]: [N, K]; with
        `state_index`, rows of options of the states it names, as `member_q_options`. Every
        risk the filter judges goes through here."""
        q = self.member_q_options(joint_obs, options, remaining, state_index=state_index)
        return q.amax(dim=0)

    def calibrate(self, raw: torch.Tensor) -> torch.Tensor:
        """U = g(q) with the calibration map, or c * q capped at 1 with a factor."""
        if isinstance(self.calibration, CalibrationMap):
            return self.calibration(raw)
        return (raw * self.calibration).clamp(max=1.0)

    def certified(
        self, joint_obs: torch.Tensor, actions: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        """U(s, a), the calibrated risk of the worst member: [N]."""
        return self.calibrate(self.raw_risk(joint_obs, actions, remaining))

    # ------------------------------------------------------------------ the filter

    def reset(self, num_envs: int, seed: int) -> None:
        """A new sequence of episodes over `num_envs` copies; reseeds the sampled completions of
        the decentralised shield (the central one samples nothing)."""
        self.generator.manual_seed(derived_seeds(seed, 3)[2])
        self.stats = BudgetStats()

    def _decide(
        self, obs: torch.Tensor, proposed: np.ndarray, logits: torch.Tensor, step: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """obs [E, A, D], proposed [E, A] int64, logits [E, A, n_actions] (the policy's),
        step [E] (1-based step of these actions in their episode; the receding allowance
        judges every step alike) -> executed [E, A] int64, their calibrated risks U [E] and
        the number of copies that fell back to the least-risk action found
        (`RiskFilter.filter` checks the arguments and counts)."""
        if self.config.coordination == "decentralised":
            return self._decide_alone(obs, proposed, logits)
        e, a = proposed.shape
        remaining = torch.full((e,), float(self.config.horizon))
        safest = np.full(e, math.nan)  # least q found (NaN where no search ran)
        allowance = np.full(e, self.allowance)
        fallback = np.zeros(e, dtype=bool)
        executed = proposed.copy()
        with torch.inference_mode():
            joint = obs.reshape(e, a * self.obs_dim)
            # A proposal within the allowance is executed as it is; for the others, the most
            # likely change of one agent's action within it. Only the copies left need a
            # search.
            raw = self.raw_risk(joint, torch.from_numpy(proposed), remaining).double().numpy()
            judge = np.flatnonzero(raw > self.allowance)
            if len(judge):
                found, actions, raws, start, start_raw = self._one_change(
                    joint[judge], proposed[judge], logits[judge], remaining[judge]
                )
                executed[judge[found]] = actions[found]
                raw[judge[found]] = raws[found]
                judge, start, start_raw = judge[~found], start[~found], start_raw[~found]
            if len(judge):
                # One agent's action changed at a time from the safest option so far, until a
                # joint action is within the allowance (executed); the least risk found where
                # none is, the fallback.
                actions, q = self._descend(joint[judge], start, start_raw, remaining[judge])
                executed[judge] = actions
                raw[judge] = safest[judge] = q.double().numpy()
                allowance[judge] = np.maximum(self.allowance, safest[judge])
                fallback[judge] = safest[judge] > self.allowance
            bound = self.calibrate(torch.from_numpy(raw)).double().numpy()
        self.last = Decision(
            bound=bound,
            safest=safest,
            allowance=allowance,
            fallback=fallback,
            remaining=remaining.numpy(),
            raw=raw,
        )
        return executed, bound, int(fallback.sum())

    def _decide_alone(
        self, obs: torch.Tensor, proposed: np.ndarray, logits: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """`coordination: decentralised`: each agent's shield on its own (`decentral`).

        A proposal whose rho_i(s, proposal) is within the allowance is kept. Otherwise, with
        `common_plan`, the agent executes its part of the common plan: the joint action the
        opponent model predicts where that is within the allowance, else the descent on q from
        it. Without the plan, agent i's action b is allowed when the risk it adds over agent
        i's safest action, rho_i(s, b) - min_b' rho_i(s, b'), is within the allowance (the
        others' share of the risk is not agent i's to offset); the proposal is kept when
        allowed, otherwise the agent takes its most likely allowed action (its policy's
        probability), which its safest action always is. The decision's risk q is the largest
        rho_i of the executed actions over the agents.
        """
        e, a = proposed.shape
        n = self.n_actions
        remaining = torch.full((e,), float(self.config.horizon))
        executed = proposed.copy()
        with torch.inference_mode():
            joint = obs.reshape(e, a * self.obs_dim)
            predicted = self.opponent_model.joint_logits(joint)  # type: ignore[union-attr]
            model = torch.softmax(predicted, dim=-1)
            completions, weights = opponent_completions(
                mixed_probs(model, self.opponent_weight),
                samples=self.config.opponent_samples,
                generator=self.generator,
            )

            def risk(c: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
                # A block's copies are consecutive (`own_action_risk`): the models' parts of
                # the states are computed for those copies' states only (`tile_span`: with
                # the bits they have computed for all the states).
                low, high = tile_span(int(c.min()), int(c.max()) + 1, e)
                q = self.raw_risk_options(
                    joint[low:high], options.unsqueeze(1), remaining[c], state_index=c - low
                )
                return q[:, 0]

            def rho(copies: np.ndarray, agents: np.ndarray, own: np.ndarray) -> np.ndarray:
                c, i = torch.from_numpy(copies), torch.from_numpy(agents)
                own_t = torch.from_numpy(np.ascontiguousarray(own, dtype=np.int64))
                return own_action_risk(risk, completions, weights, c, i, own_t).numpy()

            chosen = np.zeros(e * a)  # rho of each agent's executed action [E * A]
            least = np.full(e * a, math.nan)  # the agent's least rho, where it was needed
            fallback = np.zeros(e * a, dtype=bool)
            alone = np.arange(e)  # the copies whose agents decide alone
            if self.config.common_plan:
                # The joint action every agent predicts from the joint observation; where it is
                # beyond the allowance, the team executes the descent from it (each agent
                # computes the same plan and executes its own part).
                start = predicted.argmax(dim=-1).numpy()  # [E, A]
                start_raw = self.raw_risk(joint, torch.from_numpy(start), remaining)
                start_raw = start_raw.double().numpy()
                plan = np.flatnonzero(start_raw > self.allowance)
                if len(plan):
                    actions, q = self._descend(
                        joint[plan], start[plan], start_raw[plan], remaining[plan]
                    )
                    executed[plan] = actions
                    q = q.double().numpy()
                    rows = (plan[:, None] * a + np.arange(a)).reshape(-1)
                    chosen[rows] = least[rows] = np.repeat(q, a)
                    fallback[rows] = np.repeat(q > self.allowance, a)
                    alone = np.setdiff1d(alone, plan)
            copies, agents = np.repeat(alone, a), np.tile(np.arange(a), len(alone))
            judged = copies * a + agents  # increasing: the order of the agents of every copy
            if len(judged):
                chosen[judged] = rho(copies, agents, proposed[alone].reshape(-1, 1))[:, 0]
            refused = judged[chosen[judged] > self.allowance]
            if len(refused) and self.config.common_plan:
                # The predicted joint action is within the allowance here: a refused agent
                # executes its part of it, the common plan where the plan is that action.
                c, i = refused // a, refused % a
                executed[c, i] = start[c, i]
                chosen[refused] = rho(c, i, start[c, i].reshape(-1, 1))[:, 0]
                fallback[refused] = chosen[refused] > self.allowance
            elif len(refused):
                c, i = refused // a, refused % a
                rows = np.arange(len(refused))
                own = (proposed[c, i][:, None] + np.arange(1, n)) % n  # [R, n - 1]
                every = np.zeros((len(refused), n))  # rho of each own action, the proposal's too
                every[rows[:, None], own] = rho(c, i, own)
                every[rows, proposed[c, i]] = chosen[refused]
                least[refused] = every.min(axis=1)
                allowed = every - least[refused][:, None] <= self.allowance
                log_p = torch.log_softmax(logits, dim=-1).double().numpy()[c, i]  # [R, n]
                pick = np.where(allowed, log_p, -np.inf).argmax(axis=1)
                pick = np.where(allowed[rows, proposed[c, i]], proposed[c, i], pick)
                executed[c, i] = pick
                chosen[refused] = every[rows, pick]
                fallback[refused] = ~allowed[rows, proposed[c, i]] & (allowed.sum(axis=1) == 1)
            bound, fell = self._record_alone(chosen, least, fallback, remaining, (e, a))
        return executed, bound, fell

    def _record_alone(
        self,
        chosen: np.ndarray,
        least: np.ndarray,
        fallback: np.ndarray,
        remaining: torch.Tensor,
        shape: tuple[int, int],
    ) -> tuple[np.ndarray, int]:
        """The decentralised shields' record of a decision (`self.last`) from each agent's
        rho of its executed action `chosen` [E * A], its least rho `least` (NaN where it was
        not needed) and whether it fell back; returns the calibrated risks U [E] of the copies
        (their largest rho) and the number of copies where some agent fell back."""
        e, a = shape
        raw = chosen.reshape(e, a).max(axis=1)
        with torch.inference_mode():
            bound = self.calibrate(torch.from_numpy(raw)).double().numpy()
        safest = np.fmax.reduce(least.reshape(e, a), axis=1)  # NaN where no agent searched
        fell = fallback.reshape(e, a).any(axis=1)
        self.last = Decision(
            bound=bound,
            safest=safest,
            allowance=self.allowance + np.nan_to_num(safest),
            fallback=fell,
            remaining=remaining.numpy(),
            raw=raw,
        )
        return bound, int(fell.sum())

    def _one_change(
        self,
        joint: torch.Tensor,
        proposed: np.ndarray,
        logits: torch.Tensor,
        remaining: torch.Tensor,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per copy [N]: whether some joint action that changes one agent's proposed action has
        q within the allowance, the most likely such action [N, A] (the policy's
        log-probability of the changed agent's new action over its proposed one), its q [N],
        and the joint action of least q among these options [N, A] with its q [N]."""
        n_copies, a = proposed.shape
        n = self.n_actions
        # Every (agent, other action) pair: A * (n - 1) options per copy.
        agent = np.repeat(np.arange(a), n - 1)
        shift = np.tile(np.arange(1, n), a)
        options = np.repeat(proposed[:, None, :], a * (n - 1), axis=1)  # [N, O, A]
        rows = np.arange(n_copies)[:, None]
        new_action = (proposed[:, agent] + shift) % n  # [N, O]
        options[rows, np.arange(a * (n - 1)), agent] = new_action
        raws = self.raw_risk_options(joint, torch.from_numpy(options), remaining)
        raws = raws.double().numpy()
        log_p = torch.log_softmax(logits, dim=-1).double().numpy()  # [N, A, n]
        score = log_p[rows, agent, new_action]  # [N, O]
        score = np.where(raws <= self.allowance, score, -np.inf)
        best = score.argmax(axis=1)
        every = np.arange(n_copies)
        found = np.isfinite(score[every, best])
        least = raws.argmin(axis=1)
        return (
            found,
            options[every, best],
            raws[every, best],
            options[every, least],
            raws[every, least],
        )

    def _descend(
        self, joint: torch.Tensor, start: np.ndarray, start_raw: np.ndarray, remaining: torch.Tensor
    ) -> tuple[np.ndarray, torch.Tensor]:
        """`search.best_change_descent` on the raw risk from `start` [N, A] (of raw risk
        `start_raw` [N]), at most `search_sweeps` * n_agents changes, each copy until its raw
        risk is within the allowance or it reaches a one-agent local minimum. Returns the
        joint actions [N, A] and their raw risks [N]."""

        def risk(rows: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
            return self.raw_risk_options(joint[rows], options, remaining[rows])

        actions, q = best_change_descent(
            risk,
            torch.from_numpy(np.asarray(start, dtype=np.int64)),
            torch.from_numpy(np.asarray(start_raw, dtype=np.float64)),
            n_actions=self.n_actions,
            moves=self.config.search_sweeps * self.n_agents,
            target=self.allowance,
        )
        return actions.numpy(), q
