"""The central shield on Box actions: a candidate set per decision (docs/design.md, 6.3).

The risks are the discrete shield's (`budget.BudgetShield`): q(s, a) = max_m Q_m(s, a) of the
same world model and safety critic, which take the joint action as floats, the action the env
receives (the raw Gaussian sample clipped to the Box). Joint actions are not enumerated; per
env copy and step, with the allowance a:

- the proposal (the agents' raw samples) is executed if q(s, clip(proposal)) <= a;
- otherwise the candidates are judged in one model call: the proposal, `candidates` joint
  actions drawn from the agents' Gaussian policies (raw samples from the shield's generator)
  and the safest joint action of a small cross-entropy search on q (`CEM_ITERATIONS` rounds
  of `CEM_SAMPLES` joint actions in the Box, each round's `CEM_ELITES` least-risk ones
  setting the next round's mean and spread, starting at the clipped policy mean). The
  allowed candidate (q <= a) of highest joint log-density under the policy is executed (the
  analogue of the discrete "most likely allowed action"); where none is allowed, the
  candidate of least q (the fallback, counted like the discrete one).

Work per refused decision: candidates + CEM_ITERATIONS x CEM_SAMPLES joint actions, whatever the
team's size. The executed action is a raw sample (or a point of the Box), so the policy learns
from it with its exact log-density, and the env clips it as it clips every sample. The shield
samples from its own generator, seeded by `reset` (and checkpointed by the trainer), so its
decisions are reproducible.

With `coordination: decentralised` (`shield_dec`) each agent's shield sees its own proposal,
not the others': agent i judges an own action b by rho_i(s, b), the mean of q over
`opponent_samples` completions of the others' actions drawn from the Gaussian opponent model
(each agent's predicted mean from its own observation, the model's spread), each draw taken
instead uniformly in the Box with the mixing weight w (`shield_opponent_mode`), clipped to the
Box. Its proposal is kept when rho_i(s, proposal) <= a or its excess over the least rho_i
among its candidates (the proposal and `candidates` samples of its own policy) is within a;
otherwise it takes the allowed candidate of highest log-density under its policy (the least-rho
one always is). The decision's q is the largest rho_i of the executed actions, as for Discrete
actions. Work per decision: A x `opponent_samples` joint actions, and (candidates + 1) x
`opponent_samples` more per refused agent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from src.algos.actions import BoxActions
from src.algos.networks import gaussian_log_prob
from src.algos.shield.budget import BudgetShield, Decision
from src.config.shield import CEM_ELITES, CEM_ITERATIONS, CEM_SAMPLES

__all__ = ["BoxShield"]


class BoxShield(BudgetShield):
    """The shield of Box actions (module docstring); an `ActionFilter` whose `filter` takes
    raw Gaussian proposals [E, A, k] and the policy (mean [E, A, k], log-std [k]) in place of
    the logits, and returns the executed raw actions [E, A, k]."""

    def __init__(self, *, box: BoxActions, **parts: Any) -> None:
        """`box`: the agents' Box (finite bounds); `parts`: those of `BudgetShield`, with
        `n_actions` the Box's entries."""
        if not (np.isfinite(box.low).all() and np.isfinite(box.high).all()):
            raise ValueError(
                f"the shield on Box actions needs finite bounds, got [{box.low.min():g}, "
                f"{box.high.max():g}]: it draws candidates uniformly in the Box"
            )
        super().__init__(**parts)
        self.box = box
        self.low = torch.from_numpy(box.low).float()
        self.high = torch.from_numpy(box.high).float()

    def clip(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw actions [..., k] clipped to the Box, as the env receives them."""
        return torch.maximum(torch.minimum(raw, self.high), self.low)

    def _checked(
        self, obs: np.ndarray, proposed: np.ndarray, logits: Any, episode_step: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray, Any, np.ndarray]:
        """obs [E, A, D], raw proposals [E, A, k], the policy (mean [E, A, k], log-std [k])
        and steps [E] checked; a `ValueError` names the first argument that is wrong."""
        a, d, k = self.n_agents, self.obs_dim, self.n_actions
        obs = np.asarray(obs, dtype=np.float32)
        if obs.ndim != 3 or obs.shape[1:] != (a, d):
            raise ValueError(f"obs must have shape [E, {a}, {d}], got {obs.shape}")
        e = obs.shape[0]
        proposed = np.asarray(proposed, dtype=np.float32)
        if proposed.shape != (e, a, k) or not np.isfinite(proposed).all():
            raise ValueError(
                f"proposed must be finite floats [{e}, {a}, {k}], got {proposed.shape}"
            )
        mean, log_std = logits
        if tuple(mean.shape) != (e, a, k) or tuple(log_std.shape) != (k,):
            raise ValueError(
                f"the policy must be (mean [{e}, {a}, {k}], log_std [{k}]), got "
                f"({tuple(mean.shape)}, {tuple(log_std.shape)})"
            )
        step = np.asarray(episode_step)
        if step.shape != (e,) or not np.issubdtype(step.dtype, np.integer) or step.min() < 1:
            raise ValueError(f"episode_step must be ints >= 1 of shape [{e}], got {episode_step}")
        policy = (mean.detach().float(), log_std.detach().float())
        return torch.from_numpy(obs), proposed, policy, step.astype(np.int64)

    def _changed(self, executed: np.ndarray, proposed: np.ndarray) -> np.ndarray:
        """[E, A]: the agents whose executed action differs from their proposal."""
        return (executed != proposed).any(axis=-1)

    def _decide(
        self, obs: torch.Tensor, proposed: np.ndarray, logits: Any, step: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The checked arguments -> executed raw actions [E, A, k], their calibrated risks U
        [E] and the number of decisions that fell back to the least-risk candidate."""
        if self.config.coordination == "decentralised":
            return self._decide_alone(obs, proposed, logits)
        e, a, _ = proposed.shape
        remaining = torch.full((e,), float(self.config.horizon))
        executed = proposed.copy()
        safest = np.full(e, math.nan)  # least q among the candidates, where they were judged
        fallback = np.zeros(e, dtype=bool)
        with torch.inference_mode():
            joint = obs.reshape(e, a * self.obs_dim)
            own = torch.from_numpy(proposed)
            raw = self.raw_risk(joint, self.clip(own), remaining).double().numpy()
            judge = np.flatnonzero(raw > self.allowance)
            if len(judge):
                rows = torch.from_numpy(judge)
                options, q = self._candidates(joint[rows], own[rows], logits, rows, remaining[rows])
                mean, log_std = logits
                log_p = gaussian_log_prob(mean[rows].unsqueeze(1), log_std, options).sum(-1)
                allowed = q <= self.allowance  # [R, K]
                score = torch.where(allowed, log_p.double(), torch.full_like(q, -math.inf))
                low = q.min(dim=1)
                pick = torch.where(allowed.any(dim=1), score.argmax(dim=1), low.indices)
                picked = torch.arange(len(judge))
                executed[judge] = options[picked, pick].numpy()
                raw[judge] = q[picked, pick].numpy()
                safest[judge] = low.values.numpy()
                fallback[judge] = ~allowed.any(dim=1).numpy()
            bound = self.calibrate(torch.from_numpy(raw)).double().numpy()
        allowance = np.fmax(self.allowance, np.where(fallback, safest, self.allowance))
        self.last = Decision(
            bound=bound,
            safest=safest,
            allowance=allowance,
            fallback=fallback,
            remaining=remaining.numpy(),
            raw=raw,
        )
        return executed, bound, int(fallback.sum())

    def _candidates(
        self,
        joint: torch.Tensor,
        proposed: torch.Tensor,
        policy: tuple[torch.Tensor, torch.Tensor],
        rows: torch.Tensor,
        remaining: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidate joint actions (raw) [R, 2 + candidates, A, k] of the refused copies
        `rows` and their q [R, K] (float64): the proposal, the policy's samples and the cross-
        entropy search's safest joint action."""
        mean, log_std = policy
        r = len(rows)
        noise = torch.randn(
            (r, self.config.candidates, *proposed.shape[1:]), generator=self.generator
        )
        drawn = mean[rows].unsqueeze(1) + log_std.exp() * noise
        searched, searched_q = self._cross_entropy(joint, self.clip(mean[rows]), remaining)
        options = torch.cat([proposed.unsqueeze(1), drawn], dim=1)
        q = self.raw_risk_options(joint, self.clip(options), remaining).double()
        options = torch.cat([options, searched.unsqueeze(1)], dim=1)
        return options, torch.cat([q, searched_q.unsqueeze(1)], dim=1)

    def _cross_entropy(
        self, joint: torch.Tensor, start: torch.Tensor, remaining: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The least-q joint action [R, A, k] (in the Box) a cross-entropy search from `start`
        [R, A, k] found, and its q [R] (float64)."""
        r = start.shape[0]
        rows = torch.arange(r).unsqueeze(1)
        centre = start
        spread = ((self.high - self.low) / 4).expand_as(start)
        best, best_q = start, torch.full((r,), math.inf, dtype=torch.float64)
        for _ in range(CEM_ITERATIONS):
            noise = torch.randn((r, CEM_SAMPLES, *start.shape[1:]), generator=self.generator)
            drawn = self.clip(centre.unsqueeze(1) + spread.unsqueeze(1) * noise)
            q = self.raw_risk_options(joint, drawn, remaining).double()  # [R, S]
            order = torch.sort(q, dim=1, stable=True).indices[:, :CEM_ELITES]
            elites = drawn[rows, order]  # [R, CEM_ELITES, A, k]
            top = q[rows[:, 0], order[:, 0]]
            lower = top < best_q
            best = torch.where(lower[:, None, None], elites[:, 0], best)
            best_q = torch.where(lower, top, best_q)
            centre, spread = elites.mean(dim=1), elites.std(dim=1)
        return best, best_q

    def _decide_alone(  # type: ignore[override]
        self, obs: torch.Tensor, proposed: np.ndarray, logits: Any
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """`coordination: decentralised` (module docstring): each agent's shield alone."""
        e, a, k = proposed.shape
        remaining = torch.full((e,), float(self.config.horizon))
        mean, log_std = logits
        executed = proposed.copy()
        with torch.inference_mode():
            joint = obs.reshape(e, a * self.obs_dim)
            others = self._completions(joint)  # [E, S, A, k]
            own = torch.from_numpy(proposed)

            def rho(copies: torch.Tensor, agents: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
                """Mean q over the completions of agent agents[r]'s own actions b [R, B, k]."""
                r, n_own, s = len(copies), b.shape[1], others.shape[1]
                options = others[copies].unsqueeze(1).expand(r, n_own, s, a, k).clone()
                options[torch.arange(r), :, :, agents] = self.clip(b).unsqueeze(2)
                flat = options.view(r, n_own * s, a, k)
                q = self.raw_risk_options(joint[copies], flat, remaining[copies]).double()
                return q.view(r, n_own, s).mean(dim=2)

            copies, agents = torch.arange(e).repeat_interleave(a), torch.arange(a).repeat(e)
            chosen = rho(copies, agents, own.view(e * a, 1, k))[:, 0].numpy()  # [E * A]
            least = np.full(e * a, math.nan)  # the agent's least rho, where it was needed
            fallback = np.zeros(e * a, dtype=bool)
            refused = np.flatnonzero(chosen > self.allowance)
            if len(refused):
                c, i = copies[refused], agents[refused]
                noise = torch.randn(
                    (len(refused), self.config.candidates, k), generator=self.generator
                )
                drawn = mean[c, i].unsqueeze(1) + log_std.exp() * noise
                candidates = torch.cat([own[c, i].unsqueeze(1), drawn], dim=1)  # [R, B, k]
                every = rho(c, i, candidates)  # [R, B]
                low = every.min(dim=1).values
                allowed = every - low[:, None] <= self.allowance
                log_p = gaussian_log_prob(mean[c, i].unsqueeze(1), log_std, candidates).double()
                score = torch.where(allowed, log_p, torch.full_like(log_p, -math.inf))
                pick = torch.where(allowed[:, 0], 0, score.argmax(dim=1))
                rows = torch.arange(len(refused))
                executed[c.numpy(), i.numpy()] = candidates[rows, pick].numpy()
                chosen[refused] = every[rows, pick].numpy()
                least[refused] = low.numpy()
                fallback[refused] = (~allowed[:, 0] & (allowed.sum(dim=1) == 1)).numpy()
            bound, fell = self._record_alone(chosen, least, fallback, remaining, (e, a))
        return executed, bound, fell

    def _completions(self, joint: torch.Tensor) -> torch.Tensor:
        """`opponent_samples` joint actions [E, S, A, k] per copy, each agent's drawn from the
        opponent model's Gaussian, or uniformly in the Box with the mixing weight, clipped."""
        model = self.opponent_model
        predicted = model.joint_logits(joint).clone()  # type: ignore[union-attr]  [E, A, k]
        e, a, k = predicted.shape
        shape = (e, self.config.opponent_samples, a, k)
        noise = torch.randn(shape, generator=self.generator)
        drawn = predicted.unsqueeze(1) + model.log_std.detach().exp() * noise  # type: ignore[union-attr]
        uniform = self.low + (self.high - self.low) * torch.rand(shape, generator=self.generator)
        mixed = torch.rand((*shape[:3], 1), generator=self.generator) < self.opponent_weight
        return self.clip(torch.where(mixed, uniform, drawn))
