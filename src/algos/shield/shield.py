"""The v0 shield: a batched filter of proposed actions, one agent at a time (docs/design.md).

For every agent a of every env copy e, at the 1-based episode step t:

1. The proposed action is judged first: K_t imagined rollouts of L steps (first step: agent a
   takes the candidate; later steps: agent a follows its policy; the other agents sample from
   the opponent model mixed with uniform) count k violations of agent a, and the bound
   u(k, K_t, delta_t) decides. u <= max_risk: the proposal is executed.
2. Only for the (e, a) whose proposal is refused, every other action is rolled out, in one batch.
   The candidates are ranked by the policy's probability; the first with u <= max_risk is taken,
   otherwise the lowest u over all candidates ("no safe action").

Batching: the rollouts of every (copy, agent, candidate) block of a phase are stacked into one
tensor laid out member-major, [M, blocks * K / M, ...] (K = the largest K_t of the phase), so each
lookahead step is one world-model call (one `baddbmm` per layer over all ensemble members), one
opponent-model call and one policy call. Each phase runs in two such stages (`_judge`): a
screening share of the K rollouts for every block, then the rest only for the blocks that can
still pass, so a hopeless candidate costs a quarter (by default) of K.

Ensemble: rollout j of a block runs on member j mod M, so every member sees the same number of
rollouts (a stratified draw of the member) and the members' disagreement enters k and widens the
bound, in every reward mode. A rollout counts a violation if agent a's sampled cost is 1 at some
imagined step before a sampled done; it stops counting after the done.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from src.algos.filters import RiskFilter
from src.algos.seeding import derived_seeds
from src.algos.shield.bounds import credible_delta, risk_bound, rollouts_for_step
from src.algos.shield.opponent_model import OpponentModel
from src.algos.shield.world_model import WorldModel
from src.config.shield import ShieldConfig

__all__ = ["PolicyLogits", "Shield", "ShieldStats"]

PolicyLogits = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""obs [N, D] of agent `agent` [N] (int64) -> the policy's action log-probabilities up to a
constant per row, [N, n_actions] (read before the next call)."""


@dataclass
class ShieldStats:
    """Counters accumulated over filter calls (reset by the trainer at each update)."""

    decisions: int = 0
    """(copy, agent) decisions judged."""
    interventions: int = 0
    """Decisions where the executed action differs from the proposal."""
    no_safe_action: int = 0
    """Decisions where no candidate had u <= max_risk."""
    bound_sum: float = 0.0
    """Sum of the bound of the executed action over the decisions."""
    seconds: float = 0.0
    """Wall time spent in the filter."""
    wm_rows: int = 0
    """World-model rows evaluated (summed over lookahead steps), for FLOP counts."""
    policy_rows: int = 0
    """Policy rows evaluated inside the imagination."""
    om_rows: int = 0
    """Opponent-model rows evaluated inside the imagination."""

    @property
    def mean_bound(self) -> float:
        """Mean bound of the executed actions, NaN without decisions."""
        return self.bound_sum / self.decisions if self.decisions else float("nan")


class Shield(RiskFilter):
    """v0 shield (see the module docstring); an `ActionFilter`."""

    def __init__(
        self,
        *,
        config: ShieldConfig,
        world_model: WorldModel,
        opponent_model: OpponentModel,
        policy_logits: PolicyLogits,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        max_steps: int,
        seed: int,
    ) -> None:
        """Assemble the parts; `seed` seeds the shield's own sampling generator."""
        if n_actions < 2:
            raise ValueError(f"n_actions must be >= 2 for a shield to choose, got {n_actions}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        self.config = config
        self.world_model = world_model
        self.opponent_model = opponent_model
        self.policy_logits = policy_logits
        self.n_agents = n_agents
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.max_steps = max_steps
        self.generator = torch.Generator().manual_seed(seed)
        # Uniform-mixing weight of the opponents; the trainer updates it after each model fit.
        self.opponent_weight = 0.0 if config.shield_opponent_mode == "model" else 1.0
        self.stats = ShieldStats()

    def reset(self, num_envs: int, seed: int) -> None:
        """Reseed the shield's sampling for a new sequence of episodes (the deployed policy's
        `Actor.reset(num_envs, seed)`), and start its counters afresh."""
        self.generator.manual_seed(derived_seeds(seed, 3)[2])
        self.stats = ShieldStats()

    def rollouts_for(self, step: np.ndarray) -> np.ndarray:
        """K_t for 1-based steps `step`, rounded up to a multiple of the ensemble size."""
        c = self.config
        return rollouts_for_step(
            step,
            base=c.rollout_count,
            growth=c.rollout_growth,
            max_risk=c.max_risk,
            delta=c.shield_credible_delta,
            schedule=c.shield_credible_schedule,
            mode=c.shield_reward_mode,
            max_steps=self.max_steps,
            multiple_of=self.world_model.ensemble_size,
        )

    def bounds(self, k: np.ndarray, n: int, step: np.ndarray) -> np.ndarray:
        """u(k, n, delta_t) with delta_t from the 1-based steps `step` (broadcast against k)."""
        c = self.config
        t = np.minimum(step, self.max_steps)
        delta_t = credible_delta(
            t, delta=c.shield_credible_delta, schedule=c.shield_credible_schedule
        )
        return risk_bound(k=k, n=n, delta=delta_t, mode=c.shield_reward_mode)

    def _decide(
        self, obs: torch.Tensor, proposed: np.ndarray, logits: torch.Tensor, step: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Filter checked proposals (`RiskFilter.filter`).

        obs [E, A, D], proposed [E, A] int64, logits [E, A, n_actions] (the policy's),
        step [E] = 1-based index, within its episode, of the step these actions take
        (the trainer's convention; t of delta_t and K_t).
        Returns executed [E, A] int64, the bound of each executed action [E, A] and the
        number of (copy, agent) decisions without a safe action.
        """
        e, a = proposed.shape
        with torch.inference_mode():
            joint = obs.reshape(e, a * self.obs_dim)
            executed = proposed.copy()
            # Phase 1: the proposals of every agent of every copy.
            block_copy = np.repeat(np.arange(e), a)
            bound = self._judge(
                joint, block_copy, np.tile(np.arange(a), e), proposed.reshape(-1), step
            ).reshape(e, a)
            chosen_bound = bound.copy()
            refused = np.argwhere(bound > self.config.max_risk)  # [R, 2] (copy, agent)
            no_safe = 0
            if len(refused):
                no_safe = self._judge_alternatives(
                    refused, joint, proposed, logits, step, bound, executed, chosen_bound
                )
        return executed, chosen_bound, no_safe

    def _judge_alternatives(
        self,
        refused: np.ndarray,
        joint: torch.Tensor,
        proposed: np.ndarray,
        logits: torch.Tensor,
        step: np.ndarray,
        proposal_bound: np.ndarray,
        executed: np.ndarray,
        chosen_bound: np.ndarray,
    ) -> int:
        """Phase 2 for the refused (copy, agent) pairs; writes executed/chosen_bound in place."""
        n = self.n_actions
        r_copy = refused[:, 0]
        r_agent = refused[:, 1]
        # Candidates by decreasing policy probability (stable: ties keep the action order),
        # the refused proposal removed: [R, n - 1].
        order = torch.argsort(-logits[r_copy, r_agent], dim=-1, stable=True).numpy()
        keep = order != proposed[r_copy, r_agent][:, None]
        candidates = order[keep].reshape(len(refused), n - 1)
        bound = self._judge(
            joint, np.repeat(r_copy, n - 1), np.repeat(r_agent, n - 1), candidates.reshape(-1), step
        ).reshape(len(refused), n - 1)
        safe = bound <= self.config.max_risk  # [R, n - 1]
        first_safe = np.argmax(safe, axis=1)
        has_safe = safe.any(axis=1)
        lowest = np.argmin(bound, axis=1)
        rows = np.arange(len(refused))
        own = proposal_bound[r_copy, r_agent]
        for i in rows:
            if has_safe[i]:
                pick_bound, pick = bound[i, first_safe[i]], candidates[i, first_safe[i]]
            elif bound[i, lowest[i]] < own[i]:
                pick_bound, pick = bound[i, lowest[i]], candidates[i, lowest[i]]
            else:
                pick_bound, pick = own[i], proposed[r_copy[i], r_agent[i]]
            executed[r_copy[i], r_agent[i]] = pick
            chosen_bound[r_copy[i], r_agent[i]] = pick_bound
        return int((~has_safe).sum())

    def _judge(
        self,
        joint: torch.Tensor,
        block_copy: np.ndarray,
        block_agent: np.ndarray,
        block_action: np.ndarray,
        step: np.ndarray,
    ) -> np.ndarray:
        """Bounds of B candidate blocks (copy, agent, first action) -> [B], in two stages.

        Screening: K1 = ceil(screen_fraction * K) rollouts for every block. A block whose k1
        violations already put u(k1, K, delta_t) above max_risk is refused now (u grows with k,
        so the remaining rollouts cannot rescue it); it keeps the bound u(k1, K1, delta_t) of
        the rollouts it had. The other blocks get the remaining K - K1 rollouts and the bound
        of all K. Accept/refuse decisions are exactly those of K rollouts for every block; the
        risky blocks, the common case early in training, cost only K1.
        """
        m = self.world_model.ensemble_size
        k_total = int(self.rollouts_for(step[block_copy]).max())
        k_screen = min(k_total, -(-math.ceil(self.config.screen_fraction * k_total) // m) * m)
        blocks = (
            joint[torch.from_numpy(block_copy)],
            torch.from_numpy(block_agent),
            torch.from_numpy(block_action.astype(np.int64)),
        )
        t = step[block_copy]
        k = self._count_violations(*blocks, k_screen)
        bound = self.bounds(k, k_screen, t)
        hopeful = np.flatnonzero(self.bounds(k, k_total, t) <= self.config.max_risk)
        if k_screen < k_total and len(hopeful):
            index = torch.from_numpy(hopeful)
            more = self._count_violations(*(b[index] for b in blocks), k_total - k_screen)
            bound[hopeful] = self.bounds(k[hopeful] + more, k_total, t[hopeful])
        return bound

    def _count_violations(
        self, joint_obs: torch.Tensor, focal: torch.Tensor, first_action: torch.Tensor, k: int
    ) -> np.ndarray:
        """k rollouts per block: joint_obs [B, A*D], focal agent [B], first action [B] -> [B]."""
        m = self.world_model.ensemble_size
        a, d, n_act = self.n_agents, self.obs_dim, self.n_actions
        blocks = joint_obs.shape[0]
        per_member = k // m
        rows = blocks * per_member  # rows per member
        total = m * rows
        # Row (member, block, j) lives at [member, block * per_member + j]: rollout j * m + member.
        block_of_row = torch.arange(blocks).repeat_interleave(per_member)  # [rows]
        obs = joint_obs[block_of_row].unsqueeze(0).expand(m, rows, a * d).contiguous()
        focal_flat = focal[block_of_row].repeat(m)  # [M * rows]
        # Index tensors selecting the focal agent along the agent axis, built once.
        pick_action = focal_flat.unsqueeze(1)  # [M * rows, 1]
        pick_obs = pick_action.unsqueeze(2).expand(total, 1, d)
        pick_logits = pick_action.unsqueeze(2).expand(total, 1, n_act)
        first_flat = first_action[block_of_row].repeat(m).unsqueeze(1)
        # Uniform-mixing weight w per (row, agent): the opponents' w, 0 for the agent's own
        # policy; as the two constant parts of the mixture CDF (see `_sample`), built once.
        mixture = None
        if self.opponent_weight > 0.0:
            mix = torch.full((total, a, 1), self.opponent_weight)
            mix.scatter_(1, pick_action.unsqueeze(2), 0.0)
            ramp = torch.arange(1, n_act + 1, dtype=torch.float32) / n_act
            mixture = (1.0 - mix, mix * ramp)
        alive = torch.ones(total, dtype=torch.bool)
        violated = torch.zeros(total, dtype=torch.bool)
        for depth in range(self.config.lookahead):
            flat = obs.view(total, a * d)
            logits = self.opponent_model.joint_logits(flat)  # [M * rows, A, n]
            self.stats.om_rows += total * a
            if depth > 0:
                focal_obs = torch.gather(flat.view(total, a, d), 1, pick_obs).squeeze(1)
                own = self.policy_logits(focal_obs, focal_flat)  # [M * rows, n]
                logits.scatter_(1, pick_logits, own.unsqueeze(1))
                self.stats.policy_rows += total
            # One draw per step: a uniform per (row, agent) for its action, one for the cost
            # and one for the done of each row.
            draws = torch.rand(total, a + 2, generator=self.generator)
            actions = self._sample(logits, draws[:, :a].unsqueeze(2), mixture)  # [M * rows, A]
            if depth == 0:
                actions.scatter_(1, pick_action, first_flat)
            next_obs, cost_prob, done_prob = self.world_model.predict(obs, actions.view(m, rows, a))
            self.stats.wm_rows += total
            focal_cost = torch.gather(cost_prob.reshape(total, a), 1, pick_action).squeeze(1)
            violated |= alive & (draws[:, a] < focal_cost)
            alive &= draws[:, a + 1] >= done_prob.reshape(total)
            obs = next_obs
        return violated.view(m, blocks, per_member).sum(dim=(0, 2)).numpy()

    def _sample(
        self,
        logits: torch.Tensor,
        u: torch.Tensor,
        mixture: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor:
        """One action per (row, agent) from w * uniform + (1 - w) * softmax(logits).

        logits [N, A, n] (overwritten), u [N, A, 1] uniforms; `mixture` = (1 - w [N, A, 1],
        w * (j + 1) / n [N, A, n]) or None for w = 0. Inverse CDF: the unnormalised cumulative
        C = cumsum(exp(logits - max)) becomes the mixture CDF (1 - w) C / C_n + w (j + 1) / n in
        place, and the action is the number of entries <= u. No softmax is ever normalised.
        """
        cdf = logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_().cumsum_(dim=-1)
        if mixture is None:
            below = cdf <= u * cdf[..., -1:]
        else:
            keep, ramp = mixture
            below = cdf.mul_(keep / cdf[..., -1:]).add_(ramp) <= u
        # u < 1 and the CDF ends at 1 up to rounding: the clamp keeps the index valid.
        return below.sum(dim=-1).clamp_(max=self.n_actions - 1)
