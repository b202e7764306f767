"""The shield's safety critic: each world-model member's least risk-to-go, V_m(s, h).

V*_h(s) is the smallest probability, over all ways the team could act from joint observation
s, that some agent violates within the next h steps: the risk of the safest continuation (the
*backup*) over h steps. It follows the finite-horizon Bellman recursion of first-passage risk,

    V*_0(s) = 0,    V*_h(s) = min_a  r(s, a) + (1 - r(s, a)) (1 - d(s, a)) V*_{h-1}(s'(s, a)),

with r the team's one-step violation probability, d the probability that the step ends the
episode and s' the successor. `RiskCritic` holds one V_m per world-model member m, a function
of (s, h / horizon), and learns it by fitted value iteration *in that member's model*: replay
states with random h are expanded over every joint action, the member predicts (r, d, s'), a
slowly moving target copy values (s', h - 1), and V_m regresses on the minimum. Each member is
a complete, self-consistent model of the backup's risk; the shield takes the worst of them, so
disagreement widens its bound.

The minimum over joint actions: a descent one agent at a time from the joint action the replay
recorded in that state (`search.coordinate_descent`, `sweeps` sweeps, at most
sweeps A (n_actions - 1) + 1 joint actions, linear in the team). The descent's minimum is an
upper bound on the true one, so V_m errs towards more risk, never less. With Box actions
(`box`) the minimum is over a candidate set: the joint action the replay recorded in that state
and `candidates` joint actions drawn uniformly in the Box (from the fit's generator), again an
upper bound on the least risk over all joint actions.

The horizon index makes the recursion well posed: without it, "never violate" has many fixed
points (a parked, safe team keeps whatever value it starts with, and a function approximator
lifts it towards its riskier neighbours), while V_0 = 0 anchors every level from below.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from src import numerics
from src.algos.shield.ensemble import (
    every_member,
    fit_normalisation,
    fold_normalisation,
    rows_of_states,
    run_stacked,
    stacked_layers,
)
from src.algos.shield.optimizer_state import OptimizerState
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.search import coordinate_descent
from src.algos.shield.world_model import (
    EnsembleWorldModel,
    TeamWorldModel,
    WorldModel,
    predict_options,
)
from src.numerics import adam

__all__ = ["RiskCritic"]


# logit of the critics' starting value (about 0.001).
_START_LOGIT = -7.0


class _Members(nn.Module):
    """M stacked MLPs, joint obs [M, N, J] -> logit [M, N] (row (m, n) through member m)."""

    def __init__(
        self, members: int, joint_dim: int, hidden: tuple[int, ...], generator: torch.Generator
    ) -> None:
        super().__init__()
        self.weights, self.biases = stacked_layers(members, (joint_dim, *hidden, 1), generator)
        # Value iteration of a first-passage risk converges to V* from below (V* is the least
        # fixed point of its Bellman operator: a parked, safe state keeps any value it starts
        # with), so every member starts near V = 0, not at sigmoid(0) = 1/2.
        with torch.no_grad():
            self.weights[-1].mul_(0.01)
            self.biases[-1].fill_(_START_LOGIT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_stacked(x, self.weights, self.biases).squeeze(-1)


class RiskCritic(OptimizerState, nn.Module):
    """V_m(s) for every world-model member m, learned by fitted value iteration (see module)."""

    def __init__(
        self,
        *,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        ensemble_size: int,
        hidden: tuple[int, ...],
        learning_rate: float,
        tau: float,
        horizon: int,
        seed: int,
        sweeps: int = 2,
        box: tuple[torch.Tensor, torch.Tensor] | None = None,
        candidates: int = 16,
    ) -> None:
        """Members drawn from a generator seeded with `seed`; the target starts as a copy.

        `horizon` is the longest h the critic is asked for (its input is h / horizon);
        `sweeps`: the most sweeps over the agents of the backup's descent. `box`: the bounds
        (low, high) [n_actions] of Box actions of `n_actions` entries per agent, whose backup
        judges the recorded action and `candidates` uniform draws in the Box."""
        super().__init__()
        self.sweeps = sweeps
        self.box, self.candidates = box, candidates
        self.n_agents, self.obs_dim, self.n_actions = n_agents, obs_dim, n_actions
        self.ensemble_size = ensemble_size
        self.joint_dim = n_agents * obs_dim
        self.tau = tau
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = horizon
        generator = torch.Generator().manual_seed(seed)
        # Input: the joint observation and the remaining steps h / horizon.
        self.members = _Members(ensemble_size, self.joint_dim + 1, hidden, generator)
        self.target = copy.deepcopy(self.members).requires_grad_(False)
        self.register_buffer("obs_mean", torch.zeros(self.joint_dim))
        self.register_buffer("obs_std", torch.ones(self.joint_dim))
        self.optimizer = adam(self.members.parameters(), lr=learning_rate)
        # `_composed`'s cache, per net: (world model, version key, layers).
        self._composition: dict[str, tuple[Any, ...]] = {}
        self._tracked: dict[str, tuple[torch.Tensor, ...]] = {}  # the tensors of its key

    def _inputs(self, joint_obs: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
        """[M, N, J] and remaining steps [M, N] (or broadcastable) -> the members' inputs."""
        steps = torch.as_tensor(remaining, dtype=joint_obs.dtype).expand(joint_obs.shape[:-1])
        parts = [(joint_obs - self.obs_mean) / self.obs_std, (steps / self.horizon).unsqueeze(-1)]
        return torch.cat(parts, dim=-1)

    def _values(
        self, net: _Members, joint_obs: torch.Tensor, remaining: torch.Tensor
    ) -> torch.Tensor:
        value = torch.sigmoid(net(self._inputs(joint_obs, remaining)))
        # No steps left, no risk (V_0 = 0); a negative count means the same.
        steps = torch.as_tensor(remaining).expand(value.shape)
        return torch.where(steps > 0, value, torch.zeros_like(value))

    def values(self, joint_obs: torch.Tensor, remaining: torch.Tensor | int) -> torch.Tensor:
        """V_m(s, h) of joint_obs [M, N, J] (row (m, n) by member m) and remaining steps h
        ([M, N] or a number) -> [M, N] in [0, 1]; 0 where h <= 0."""
        if joint_obs.dim() != 3 or joint_obs.shape[0] != self.ensemble_size:
            raise ValueError(
                f"joint_obs must be [{self.ensemble_size}, N, {self.joint_dim}], "
                f"got {tuple(joint_obs.shape)}"
            )
        return self._values(self.members, joint_obs, torch.as_tensor(remaining))

    def all_members(self, joint_obs: torch.Tensor, remaining: torch.Tensor | int) -> torch.Tensor:
        """Every member's V of the same joint_obs [N, J] and remaining steps -> [M, N]."""
        return self.values(every_member(joint_obs, self.ensemble_size), remaining)

    def option_q(
        self,
        world_model: TeamWorldModel,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        left: torch.Tensor,
        *,
        target: bool = False,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Member m's r + (1 - r)(1 - d) V_m(s', left) of each state [M, S, J] under each of its
        K joint actions [M, S, K, A] (row (m, s) by member m), `left` [M, S] steps after this
        one: [M, S, K]. V is the live critic, or its slowly moving target with `target`.

        With `state_index` [P] or [M, P] int64 (`ensemble.rows_of_states`), row p of the
        options [M, P, K, A] and of `left` ([M, P]) is of the state of `joint_obs` it names
        -> [M, P, K]: the options of one state spread over several rows (each row its own
        steps), the state's parts still computed once.

        s' is never formed: it is s + u W + c, for the world model's last hidden layer u and
        the obs part (W, c) of its output layer, so V's first layer on it, s' W1, is s W1 (once
        per state) plus u (W W1) (per option, H x H' instead of H x J and J x H'), with W W1
        cached while neither model changes. Same numbers as predicting s' and valuing it, up
        to float rounding. A world model without these layers (any other with `predict`) has
        its successors predicted and valued.
        """
        dynamics = getattr(world_model, "dynamics", None)
        if not isinstance(dynamics, EnsembleWorldModel):
            if state_index is not None:
                joint_obs = rows_of_states(joint_obs, state_index)
            return self.valued_successors(world_model, joint_obs, options, left, target=target)
        hidden = dynamics.option_hidden(joint_obs, options, state_index)  # [M, S, K, H]
        m, s, k, h = hidden.shape
        state_w, hidden_w, bias, steps_w, rest = self._composed(
            "target" if target else "live", dynamics
        )
        width = state_w.shape[-1]
        # Per option: u (W W1) and, in the last column, the done logit.
        per_option = numerics.baddbmm(bias, hidden.view(m, s * k, h), hidden_w)
        done = torch.sigmoid(per_option[..., width]).view(m, s, k)
        # Per state: s W1 and the steps h / horizon.
        steps = (left / self.horizon).unsqueeze(-1) * steps_w
        if state_index is None:
            per_state = numerics.baddbmm(steps, joint_obs, state_w)
        else:
            per_state = rows_of_states(numerics.bmm(joint_obs, state_w), state_index) + steps
        x = per_option[..., :width].view(m, s, k, width) + per_state.unsqueeze(2)
        x = x.relu_().view(m, s * k, width)
        last = len(rest) - 1
        for i, (w, b) in enumerate(rest):
            x = numerics.baddbmm(b, x, w)
            if i < last:
                x = x.relu_()
        # No steps left, no risk (V_0 = 0).
        value = torch.sigmoid(x).view(m, s, k) * (left > 0).unsqueeze(2)
        risk = world_model.option_risk(joint_obs, options, state_index)
        return risk + (1.0 - risk) * (1.0 - done) * value

    def valued_successors(
        self,
        world_model: WorldModel,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        left: torch.Tensor,
        *,
        target: bool = False,
    ) -> torch.Tensor:
        """`option_q` by predicting the successors [M, S, K, J] (`predict_options`) and valuing
        them: the definition, for any world model with the team-risk interface."""
        next_obs, risk, done = predict_options(world_model, joint_obs, options)
        m, s, k, j = next_obs.shape
        after = left.unsqueeze(2).expand(m, s, k).reshape(m, s * k)
        net = self.target if target else self.members
        value = self._values(net, next_obs.reshape(m, s * k, j), after).view(m, s, k)
        return risk + (1.0 - risk) * (1.0 - done) * value

    def _composed(self, which: str, dynamics: EnsembleWorldModel) -> tuple[Any, ...]:
        """`option_q`'s layers of the live (`which="live"`) or target net, composed with the
        output layer of `dynamics`: (state weight [M, J, H'], hidden weight [M, H, H' + 1],
        bias [M, 1, H' + 1], steps weight [M, 1, H'], the later layers' (weight, bias)); the
        last column of the hidden weight and bias is the world model's done logit. Cached
        until either model changes (their version counters) or another world model is
        passed."""
        net = self.target if which == "target" else self.members
        tracked = self._tracked.get(which)
        if tracked is None:
            tracked = self._tracked[which] = (*net.parameters(), self.obs_mean, self.obs_std)
        key = (tuple(t._version for t in tracked), dynamics.version())
        cached = self._composition.get(which)
        if cached is not None and cached[0] is dynamics and cached[1] == key:
            return cached[2]
        j = self.joint_dim
        layers = [(w.detach(), b.detach()) for w, b in zip(net.weights, net.biases, strict=True)]
        first, bias = fold_normalisation(*layers[0], self.obs_mean, self.obs_std)
        state_w = first[:, :j]  # the joint obs; then the steps h / horizon
        out_w, out_b = dynamics.output_layer()
        hidden_w = torch.cat([out_w[..., :j] @ state_w, out_w[..., -1:]], dim=-1)
        bias = torch.cat([bias + out_b[..., :j] @ state_w, out_b[..., -1:]], dim=-1)
        composed = (state_w, hidden_w, bias, first[:, j : j + 1], layers[1:])
        self._composition[which] = (dynamics, key, composed)
        return composed

    def backup_targets(
        self,
        world_model: TeamWorldModel,
        joint_obs: torch.Tensor,
        remaining: torch.Tensor,
        start: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """min over joint actions of member m's r + (1 - r)(1 - d) V_target(s', h - 1): [M, B].

        `joint_obs` is [M, B, J] (member m's states in row m), `remaining` [M, B] the h >= 1;
        `start` [M, B, A]: where the descent starts (joint action 0 when None). Box actions:
        `start` [M, B, A, n_actions] the recorded actions, judged with `candidates` uniform
        draws in the Box from `generator`.
        """
        m, b, _ = joint_obs.shape
        a = self.n_agents

        def q_of(options: torch.Tensor) -> torch.Tensor:
            """[M, B, K, A] joint actions -> their q [M, B, K]."""
            return self.option_q(world_model, joint_obs, options, remaining - 1, target=True)

        if self.box is not None:
            if start is None or generator is None:
                raise ValueError("a Box backup needs the recorded actions and a generator")
            low, high = self.box
            shape = (m, b, self.candidates, a, low.shape[0])
            drawn = low + (high - low) * torch.rand(shape, generator=generator)
            return q_of(torch.cat([start.unsqueeze(2), drawn], dim=2)).amin(dim=2)
        if start is None:
            start = torch.zeros(m, b, a, dtype=torch.int64)
        first = q_of(start.unsqueeze(2)).reshape(m * b)
        _, best = coordinate_descent(
            # Every row takes every turn (`rows` is all of them): the members judge their rows
            # together, in the world model's member-major layout.
            lambda rows, options: q_of(options.view(m, b, *options.shape[1:])).view(m * b, -1),
            start.reshape(m * b, a),
            first,
            n_actions=self.n_actions,
            sweeps=self.sweeps,
        )
        return best.view(m, b).to(joint_obs.dtype)

    def fit(
        self,
        replay: TransitionReplay,
        world_model: TeamWorldModel,
        *,
        steps: int,
        batch_size: int,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """`steps` value-iteration steps on replay states; returns the mean loss (NaN if none)."""
        if replay.train.size == 0 or steps == 0:
            return {"loss": math.nan}
        # Both ends of the transitions, as the states the critic is trained on.
        both = replay.train.moments("obs") + replay.train.moments("next_obs")
        fit_normalisation(self.obs_mean, self.obs_std, both)
        total = 0.0
        m = self.ensemble_size
        for _ in range(steps):
            rows = replay.sample_train((m, batch_size), generator)
            # Both ends of real transitions, so states near the episode's end are covered.
            obs = torch.cat([rows["obs"], rows["next_obs"]], dim=1)  # [M, 2B, J]
            # The backup's descent starts from the joint action recorded in the state (and,
            # after it, from the same one).
            start = torch.cat([rows["action"], rows["action"]], dim=1)  # [M, 2B, A]
            remaining = torch.randint(
                1, self.horizon + 1, obs.shape[:2], generator=generator
            ).float()
            with torch.inference_mode():
                target = self.backup_targets(world_model, obs, remaining, start, generator)
            target = target.clone()  # a normal tensor: the loss keeps it for the backward pass
            logit = self.members(self._inputs(obs, remaining))
            loss = F.binary_cross_entropy_with_logits(logit, target)
            self.optimizer_step(loss)
            with torch.no_grad():
                for live, slow in zip(
                    self.members.parameters(), self.target.parameters(), strict=True
                ):
                    slow.lerp_(live, self.tau)
            total += float(loss.detach())
        return {"loss": total / steps}
