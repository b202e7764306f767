"""The shield's world model: (joint obs, joint action) -> (next joint obs, team risk, done).

The interface the shield uses is `WorldModel.predict` on member-major batches: rows arrive as
[M, N, ...] where M = `ensemble_size` and row (m, n) is evaluated by member m, so the whole
ensemble runs as one batched matmul per layer (`torch.baddbmm`) instead of a loop over members.
A model without members (e.g. the exact dynamics of a test grid) has `ensemble_size = 1`.

`TeamWorldModel` (`wm_version` v0) predicts the event the constraint is about,
P(some agent's cost > 0 at the step), from a cost model shared by the agents (`AgentCostModel`):
each agent's cost depends on its own observation and action and on the others' actions, the
same function for every agent, so every transition teaches it A times and it generalises to
joint actions the replay rarely holds. The agents' probabilities combine as
1 - prod_a (1 - p_a), which can only overstate the team's risk when their costs are positively
correlated (a collision costs both). The next joint obs and the done probability come from an
`EnsembleWorldModel`, its dynamics part.

Box actions (`continuous=True`, `n_actions` then the entries of one agent's action): every
part takes the joint action as floats [..., A, n_actions], the action the env receives
(clipped to the Box), in the input columns where Discrete actions put their one-hots; each
first layer multiplies them (`action_rows`) where a one-hot selects its rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from src import numerics
from src.algos.shield.ensemble import (
    Versioned,
    every_member,
    fit_normalisation,
    fit_steps,
    fold_normalisation,
    rows_of_states,
    run_stacked,
    selected_rows,
    selected_rows_and_state,
    stacked_layers,
)
from src.algos.shield.kernels import Workspace
from src.algos.shield.optimizer_state import OptimizerState
from src.algos.shield.replay import TransitionReplay
from src.checks import lookup
from src.numerics import adam

__all__ = [
    "WM_VERSIONS",
    "AgentCostModel",
    "EnsembleWorldModel",
    "TeamWorldModel",
    "WorldModel",
    "action_rows",
    "make_world_model",
    "predict_options",
]


@runtime_checkable
class WorldModel(Protocol):
    """What the shield needs from a world model."""

    ensemble_size: int

    def predict(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """joint_obs [M, N, A*D] float, joint_action [M, N, A] int64 ->
        (next joint obs [M, N, A*D], cost probability [M, N, A], done probability [M, N])."""
        ...


class EnsembleWorldModel(Versioned, OptimizerState, nn.Module):
    """The dynamics of `TeamWorldModel`: an ensemble of M ReLU MLPs, evaluated together with
    batched matmuls.

    Each member maps [normalised joint obs, one-hot joint action] to the normalised change of
    the joint obs (squared error), per-agent cost logits and a done logit (cross-entropy). The
    cost logits are trained with the rest (they shape the shared layers) but the team's risk
    comes from `AgentCostModel`. Normalisation statistics are refreshed from the training
    replay before each fit.
    """

    def __init__(
        self,
        *,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        ensemble_size: int,
        hidden: tuple[int, ...],
        learning_rate: float,
        seed: int,
        continuous: bool = False,
    ) -> None:
        """Build the members with parameters drawn from a generator seeded with `seed`;
        `continuous`: float actions of `n_actions` entries per agent (module docstring)."""
        super().__init__()
        for name, value in (("n_agents", n_agents), ("obs_dim", obs_dim), ("n_actions", n_actions)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.n_agents = n_agents
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.continuous = continuous
        self.ensemble_size = ensemble_size
        self.joint_dim = n_agents * obs_dim
        self.in_dim = self.joint_dim + n_agents * n_actions
        self.out_dim = self.joint_dim + n_agents + 1
        generator = torch.Generator().manual_seed(seed)
        sizes = (self.in_dim, *hidden, self.out_dim)
        self.weights, self.biases = stacked_layers(ensemble_size, sizes, generator)
        self.register_buffer("obs_mean", torch.zeros(self.joint_dim))
        self.register_buffer("obs_std", torch.ones(self.joint_dim))
        self.register_buffer("delta_mean", torch.zeros(self.joint_dim))
        self.register_buffer("delta_std", torch.ones(self.joint_dim))
        self.register_buffer("action_offset", torch.arange(n_agents) * n_actions)
        self.optimizer = adam(self.parameters(), lr=learning_rate)
        self._workspace = Workspace()
        self._flip = 0  # which of the two input buffers the next inference call fills
        self._folded: tuple[tuple[int, ...], list] | None = None

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        """(fan_in, fan_out) of each layer of one member, for FLOP counts."""
        return [tuple(w.shape[1:]) for w in self.weights]

    def _forward(self, joint_obs: torch.Tensor, joint_action: torch.Tensor) -> torch.Tensor:
        """[M, N, A*D], [M, N, A] -> raw outputs [M, N, A*D + A + 1]."""
        m, n, _ = joint_obs.shape
        x = torch.zeros(m, n, self.in_dim)
        x[..., : self.joint_dim] = (joint_obs - self.obs_mean) / self.obs_std
        if self.continuous:
            x[..., self.joint_dim :] = joint_action.flatten(-2)
        else:
            x[..., self.joint_dim :].scatter_(2, joint_action + self.action_offset, 1.0)
        return run_stacked(x, self.weights, self.biases)

    def _folded_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The members' (weight, bias) with the normalisations folded in (inference only).

        Input: `ensemble.fold_normalisation`, so the raw joint obs goes straight into the first
        layer. Output: the obs part predicts the normalised
        change, so scaling its columns by the change's std and adding its mean to the bias
        makes the last layer emit the raw change. Two passes over the rows saved per call.
        """
        key = self.version()
        if self._folded is not None and self._folded[0] == key:
            return self._folded[1]
        d = self.joint_dim
        layers = [(w.detach(), b.detach()) for w, b in zip(self.weights, self.biases, strict=True)]
        layers[0] = fold_normalisation(*layers[0], self.obs_mean, self.obs_std)
        wl, bl = layers[-1]
        wl, bl = wl.clone(), bl.clone()
        wl[..., :d] *= self.delta_std
        bl[..., :d] = bl[..., :d] * self.delta_std + self.delta_mean
        layers[-1] = (wl, bl)
        self._folded = (key, layers)
        return layers

    def _predict_inference(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`predict` in inference mode, with every intermediate in a reused workspace buffer.

        The input buffers alternate between calls and the next joint obs is written straight
        into the obs columns of the other one, so a rollout that feeds each prediction back in
        (the shield) never copies its state: the returned next obs is a view that stays valid
        until the call after next.
        """
        m, n, _ = joint_obs.shape
        ws, d = self._workspace, self.joint_dim
        self._flip ^= 1
        x = ws.get(f"input{self._flip}", (m, n, self.in_dim))
        if joint_obs.data_ptr() != x.data_ptr() or joint_obs.stride() != x[..., :d].stride():
            x[..., :d].copy_(joint_obs)
        onehot = x[..., d:]
        if self.continuous:
            onehot.copy_(joint_action.flatten(-2))
        else:
            onehot.zero_()
            onehot.scatter_(2, joint_action + self.action_offset, 1.0)
        layers = self._folded_layers()
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            out = ws.get(f"layer{i}", (m, n, w.shape[2]))
            numerics.baddbmm(b, x, w, out=out)
            x = out.relu_() if i < last else out
        next_obs = ws.get(f"input{self._flip ^ 1}", (m, n, self.in_dim))[..., :d]
        torch.add(x[..., :d], joint_obs, out=next_obs)
        cost_prob = torch.sigmoid(x[..., d : d + self.n_agents])
        done_prob = torch.sigmoid(x[..., -1])
        return next_obs, cost_prob, done_prob

    def predict_options(
        self, joint_obs: torch.Tensor, options: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Without gradients: the successors of each state [M, S, A*D] under each of its K
        joint actions [M, S, K, A] -> (next joint obs [M, S, K, A*D], cost probability
        [M, S, K, A], done probability [M, S, K]); row (m, s, k) by member m.

        The state's part of the first layer is computed once per state; each option adds the
        first-layer rows its actions' one-hots select (`ensemble.selected_rows`).
        """
        hidden = self.option_hidden(joint_obs, options)
        m, s, k, h = hidden.shape
        d = self.joint_dim
        w, b = self.output_layer()
        x = numerics.baddbmm(b, hidden.view(m, s * k, h), w).view(m, s, k, -1)
        next_obs = x[..., :d] + joint_obs.unsqueeze(2)
        cost_prob = torch.sigmoid(x[..., d : d + self.n_agents])
        return next_obs, cost_prob, torch.sigmoid(x[..., -1])

    def option_hidden(
        self,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Without gradients: the last hidden layer [M, S, K, H] of each state [M, S, A*D]
        under each of its K joint actions [M, S, K, A] (row (m, s, k) by member m), which
        `output_layer` maps to the outputs of `predict_options`. With `state_index` [P] or
        [M, P] int64 (`ensemble.rows_of_states`), the options [M, P, K, A] of row p are of
        the state it names (-> [M, P, K, H]).

        The state's part of the first layer is computed once per state; each option adds the
        first-layer rows its actions' one-hots select (`ensemble.selected_rows`; with
        `state_index`, to its state's part in the same pass: `selected_rows_and_state`).
        """
        m, s, k = options.shape[:3]
        d = self.joint_dim
        layers = self._folded_layers()
        w0, b0 = layers[0]
        first = numerics.baddbmm(b0, joint_obs, w0[:, :d])  # [M, S, H]
        if self.continuous:
            lead = options[:1] if options.stride(0) == 0 else options
            x = action_rows(w0[:, d:], lead.flatten(-2), first, state_index)
        elif state_index is None:
            x = first.unsqueeze(2) + selected_rows(w0[:, d:], options + self.action_offset)
        else:  # each row's state added in the same pass (no gathered copy of the states)
            # The same options for every member (a broadcast view): their rows once.
            lead = options[:1] if options.stride(0) == 0 else options
            state = state_index.view(-1, s, 1)  # [1 or M, P, 1]
            x = selected_rows_and_state(w0[:, d:], lead + self.action_offset, first, state)
        x = x.relu_().view(m, s * k, -1)
        for w, b in layers[1:-1]:
            x = numerics.baddbmm(b, x, w).relu_()
        return x.view(m, s, k, -1)

    def output_layer(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer of the inference path, weight [M, H, A*D + A + 1] and bias
        [M, 1, A*D + A + 1], with the normalisation folded in: from the last hidden layer, the
        raw change of the joint obs (first A*D outputs), the per-agent cost logits and the done
        logit (last)."""
        return self._folded_layers()[-1]

    def predict(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """See `WorldModel.predict`; row (m, n) is evaluated by member m.

        In inference mode the returned next obs lives in a workspace buffer (see
        `_predict_inference`); outside it every output is a fresh tensor.
        """
        if joint_obs.dim() != 3 or joint_obs.shape[0] != self.ensemble_size:
            raise ValueError(
                f"joint_obs must be [{self.ensemble_size}, N, {self.joint_dim}], "
                f"got {tuple(joint_obs.shape)}"
            )
        if torch.is_inference_mode_enabled():
            return self._predict_inference(joint_obs, joint_action)
        d = self.joint_dim
        out = self._forward(joint_obs, joint_action)
        next_obs = joint_obs + self.delta_mean + self.delta_std * out[..., :d]
        cost_prob = torch.sigmoid(out[..., d : d + self.n_agents])
        done_prob = torch.sigmoid(out[..., -1])
        return next_obs, cost_prob, done_prob

    def _losses(self, rows: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-member loss [M] and cost probabilities [M, B, A] on member-major rows."""
        out = self._forward(rows["obs"], rows["action"])
        d = self.joint_dim
        target = (rows["next_obs"] - rows["obs"] - self.delta_mean) / self.delta_std
        obs_loss = (out[..., :d] - target).pow(2).mean(dim=(1, 2))
        cost_logit = out[..., d : d + self.n_agents]
        cost_loss = F.binary_cross_entropy_with_logits(
            cost_logit, rows["cost"], reduction="none"
        ).mean(dim=(1, 2))
        done_loss = F.binary_cross_entropy_with_logits(
            out[..., -1], rows["done"], reduction="none"
        ).mean(dim=1)
        return obs_loss + cost_loss + done_loss, torch.sigmoid(cost_logit)

    def _refresh_normalisation(self, replay: TransitionReplay) -> None:
        fit_normalisation(self.obs_mean, self.obs_std, replay.train.moments("obs"))
        fit_normalisation(self.delta_mean, self.delta_std, replay.train.moments("delta"))

    def fit(
        self,
        replay: TransitionReplay,
        *,
        n_samples: int,
        batch_size: int,
        max_valid: int,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """Train on about `n_samples` replay rows per member; score the validation part.

        Each member draws its own minibatches (independent bootstrap-like resampling keeps the
        members diverse). Returns train_loss, valid_loss, cost_accuracy (NaN when undefined).
        """
        metrics = {"train_loss": math.nan, "valid_loss": math.nan, "cost_accuracy": math.nan}
        if replay.train.size == 0:
            return metrics
        self._refresh_normalisation(replay)
        steps = fit_steps(n_samples, batch_size)
        total = 0.0
        for _ in range(steps):
            rows = replay.sample_train((self.ensemble_size, batch_size), generator)
            loss = self._losses(rows)[0].sum()
            self.optimizer_step(loss)
            total += float(loss.detach()) / self.ensemble_size
        metrics["train_loss"] = total / steps
        if replay.valid.size > 0:
            with torch.no_grad():
                valid = replay.valid.latest(max_valid)
                rows = {k: every_member(v, self.ensemble_size) for k, v in valid.items()}
                member_loss, cost_prob = self._losses(rows)
                predicted = cost_prob.mean(dim=0) > 0.5
                metrics["valid_loss"] = float(member_loss.mean())
                metrics["cost_accuracy"] = float(
                    (predicted == (valid["cost"] > 0.5)).float().mean()
                )
        return metrics


class AgentCostModel(Versioned, OptimizerState, nn.Module):
    """An ensemble of M agent-shared MLPs: P(agent a's cost > 0 at this step), [M, N, A].

    Agent a's input is its own normalised observation, the one-hot of its own action, the
    one-hots of the other agents' actions (in agent order) and the one-hot of its index.
    """

    def __init__(
        self,
        *,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        ensemble_size: int,
        hidden: tuple[int, ...],
        learning_rate: float,
        generator: torch.Generator,
        continuous: bool = False,
    ) -> None:
        """Members drawn from `generator`; `continuous`: float actions of `n_actions` entries
        per agent (module docstring)."""
        super().__init__()
        a, d, n = n_agents, obs_dim, n_actions
        self.n_agents, self.obs_dim, self.n_actions = a, d, n
        self.continuous = continuous
        self.ensemble_size = ensemble_size
        self.in_dim = d + a * n + a
        self.weights, self.biases = stacked_layers(
            ensemble_size, (self.in_dim, *hidden, 1), generator
        )
        others = [[j for j in range(a) if j != i] for i in range(a)]
        # Column of agent a's action (own first, then the others) in the action one-hots.
        order = torch.tensor([[i, *rest] for i, rest in enumerate(others)], dtype=torch.int64)
        self.register_buffer("order", order)  # [A, A]
        self.register_buffer("offset", torch.arange(a) * n)  # [A]
        self.register_buffer("obs_mean", torch.zeros(d))
        self.register_buffer("obs_std", torch.ones(d))
        self.optimizer = adam(self.parameters(), lr=learning_rate)
        self._inference: tuple[tuple[int, ...], tuple[Any, ...]] | None = None

    def logits(self, joint_obs: torch.Tensor, joint_action: torch.Tensor) -> torch.Tensor:
        """[M, N, A*D], [M, N, A] -> logits [M, N, A] (row (m, n) by member m)."""
        m, n, _ = joint_obs.shape
        a, d = self.n_agents, self.obs_dim
        x = torch.zeros(m, n, a, self.in_dim)
        x[..., :d] = (joint_obs.view(m, n, a, d) - self.obs_mean) / self.obs_std
        if self.continuous:  # [M, N, A, A * n]: own action first
            x[..., d : d + a * self.n_actions] = joint_action[..., self.order, :].flatten(-2)
        else:
            actions = joint_action[..., self.order]  # [M, N, A, A]: own action first
            x[..., d : d + a * self.n_actions].scatter_(3, actions + self.offset, 1.0)
        x[..., d + a * self.n_actions :] = torch.eye(a)
        x = run_stacked(x.view(m, n * a, self.in_dim), self.weights, self.biases)
        return x.view(m, n, a)

    def _inference_layers(self) -> tuple[Any, ...]:
        """`option_logits`' layers, cached until the model changes (`version`): the first
        layer's obs rows with the normalisation folded in [M, D, H], its bias plus each agent's
        index row [M, 1, A, H], its action rows [M, A * n_actions, H], and the later layers'
        (weight, bias)."""
        key = self.version()
        if self._inference is not None and self._inference[0] == key:
            return self._inference[1]
        a, d, n = self.n_agents, self.obs_dim, self.n_actions
        layers = [(w.detach(), b.detach()) for w, b in zip(self.weights, self.biases, strict=True)]
        w0, b0 = fold_normalisation(*layers[0], self.obs_mean, self.obs_std)
        agent_bias = (b0 + w0[:, d + a * n :]).unsqueeze(1)  # [M, 1, A, H]
        built = (w0[:, :d], agent_bias, w0[:, d : d + a * n], layers[1:])
        self._inference = (key, built)
        return built

    def option_logits(
        self,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Without gradients: `logits` of each state [M, S, A*D] under each of its K joint
        actions [M, S, K, A] -> [M, S, K, A] (with `state_index`, as `option_hidden`). Each
        agent's observation and index enter the first layer once per state; each option adds
        the rows its actions' one-hots select."""
        m, s, k, a = options.shape[:4]
        states = joint_obs.shape[1]
        obs_w, agent_bias, action_w, rest = self._inference_layers()
        first = numerics.bmm(joint_obs.view(m, states * a, self.obs_dim), obs_w)
        first = first.view(m, states, a, -1)
        first += agent_bias
        # The same options for every member (a broadcast view): their rows once.
        lead = options[:1] if options.stride(0) == 0 else options
        if self.continuous:  # [M, S, K, A, A * n]: own action first
            own_first = lead[..., self.order, :].flatten(-2)
            x = action_rows(action_w, own_first, first, state_index)
        elif state_index is None:
            actions = lead[..., self.order] + self.offset  # [M, S, K, A, A]: own action first
            x = first.unsqueeze(2) + selected_rows(action_w, actions.expand(m, *actions.shape[1:]))
        else:  # row (state, agent) of the state part, state * A + agent, in the same pass
            actions = lead[..., self.order] + self.offset
            state = state_index.view(-1, s, 1, 1) * a + torch.arange(a)  # [1 or M, P, 1, A]
            x = selected_rows_and_state(action_w, actions, first.view(m, states * a, -1), state)
        x = x.relu_().view(m, s * k * a, -1)
        last = len(rest) - 1
        for i, (w, b) in enumerate(rest):
            x = numerics.baddbmm(b, x, w)
            if i < last:
                x = x.relu_()
        return x.view(m, s, k, a)

    def fit_step(self, rows: dict[str, torch.Tensor]) -> float:
        """One Adam step on member-major rows ([M, B, ...]); returns the mean loss."""
        logit = self.logits(rows["obs"], rows["action"])
        loss = F.binary_cross_entropy_with_logits(logit, rows["cost"])
        self.optimizer_step(loss)
        return float(loss.detach())


class TeamWorldModel(nn.Module):
    """`wm_version` v0: joint dynamics (next joint obs, done) and the team's one-step violation
    risk.

    `predict` has the WorldModel interface with one cost column, the team's risk
    1 - prod_a (1 - p_a) of the agent-shared `AgentCostModel`; the next joint obs and the done
    probability come from an `EnsembleWorldModel` (whose per-agent cost outputs go unused).
    """

    cost_dim = 1

    def __init__(
        self,
        *,
        n_agents: int,
        obs_dim: int,
        n_actions: int,
        ensemble_size: int,
        hidden: tuple[int, ...],
        learning_rate: float,
        seed: int,
        continuous: bool = False,
    ) -> None:
        """Both parts drawn from generators seeded from `seed`; `continuous`: float actions
        of `n_actions` entries per agent (module docstring)."""
        super().__init__()
        self.ensemble_size = ensemble_size
        self.n_agents, self.obs_dim, self.n_actions = n_agents, obs_dim, n_actions
        self.continuous = continuous
        # The two parts are built alike but for their random draws.
        common = {"n_agents": n_agents, "obs_dim": obs_dim, "n_actions": n_actions}
        common.update(ensemble_size=ensemble_size, hidden=hidden, learning_rate=learning_rate)
        common.update(continuous=continuous)
        self.dynamics = EnsembleWorldModel(**common, seed=seed)
        self.costs = AgentCostModel(**common, generator=torch.Generator().manual_seed(seed + 1))

    def agent_risk(self, joint_obs: torch.Tensor, joint_action: torch.Tensor) -> torch.Tensor:
        """Each agent's probability of a cost at this step, [M, N, A]."""
        return torch.sigmoid(self.costs.logits(joint_obs, joint_action))

    def predict(
        self, joint_obs: torch.Tensor, joint_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next joint obs [M, N, A*D], team risk [M, N, 1], done probability [M, N])."""
        next_obs, _, done = self.dynamics.predict(joint_obs, joint_action)
        safe = (1.0 - self.agent_risk(joint_obs, joint_action)).prod(dim=-1, keepdim=True)
        return next_obs, 1.0 - safe, done

    def predict_options(
        self, joint_obs: torch.Tensor, options: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Without gradients: each state [M, S, A*D] under each of its K joint actions
        [M, S, K, A] -> (next joint obs [M, S, K, A*D], team risk [M, S, K], done
        probability [M, S, K]); as `predict` on the states repeated K times, with the state's
        share of each first layer computed once."""
        next_obs, _, done = self.dynamics.predict_options(joint_obs, options)
        return next_obs, self.option_risk(joint_obs, options), done

    def option_risk(
        self,
        joint_obs: torch.Tensor,
        options: torch.Tensor,
        state_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Without gradients: the team risk [M, S, K] of each state [M, S, A*D] under each of
        its K joint actions [M, S, K, A] (with `state_index`, as `option_hidden`)."""
        agent = torch.sigmoid(self.costs.option_logits(joint_obs, options, state_index))
        return 1.0 - (1.0 - agent).prod(dim=-1)

    def fit(
        self,
        replay: TransitionReplay,
        *,
        n_samples: int,
        batch_size: int,
        max_valid: int,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """Train both parts on about `n_samples` replay rows per member; score held-out rows.

        Returns the dynamics' train_loss and valid_loss, the cost model's cost_loss and
        cost_valid_loss, and cost_accuracy: how often the team risk's side of 1/2 matches
        whether some agent's cost was > 0 (NaN when undefined).
        """
        metrics = self.dynamics.fit(
            replay,
            n_samples=n_samples,
            batch_size=batch_size,
            max_valid=max_valid,
            generator=generator,
        )
        metrics.update(cost_loss=math.nan, cost_valid_loss=math.nan, cost_accuracy=math.nan)
        if replay.train.size == 0:
            return metrics
        pooled = replay.train.moments("obs").pooled(self.obs_dim)  # every agent's own obs
        fit_normalisation(self.costs.obs_mean, self.costs.obs_std, pooled)
        steps = fit_steps(n_samples, batch_size)
        total = sum(
            self.costs.fit_step(replay.sample_train((self.ensemble_size, batch_size), generator))
            for _ in range(steps)
        )
        metrics["cost_loss"] = total / steps
        if replay.valid.size > 0:
            with torch.no_grad():
                valid = replay.valid.latest(max_valid)
                rows = {k: every_member(v, self.ensemble_size) for k, v in valid.items()}
                logit = self.costs.logits(rows["obs"], rows["action"])
                metrics["cost_valid_loss"] = float(
                    F.binary_cross_entropy_with_logits(logit, rows["cost"])
                )
                team = 1.0 - (1.0 - torch.sigmoid(logit)).prod(dim=-1).mean(dim=0)
                observed = valid["cost"].amax(dim=-1)
                metrics["cost_accuracy"] = float(((team > 0.5) == (observed > 0.5)).float().mean())
        return metrics

    def extra_state(self) -> dict[str, Any]:
        """Both optimizers' states (the parameters are in `state_dict`)."""
        return {"dynamics": self.dynamics.extra_state(), "costs": self.costs.extra_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""
        self.dynamics.load_extra_state(state["dynamics"])
        self.costs.load_extra_state(state["costs"])


def action_rows(
    table: torch.Tensor,
    actions: torch.Tensor,
    first: torch.Tensor,
    state_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """A first layer's sum for float actions: per member, `actions` [M or 1, P, K, ..., F]
    times its action rows `table` [M, F, H], plus the state's part `first` [M, S, ..., H] of
    each row's state (row p's own, or the one `state_index` [P] or [M, P] names) ->
    [M, P, K, ..., H]. The float counterpart of `ensemble.selected_rows` (one-hots)."""
    m = table.shape[0]
    flat = actions.reshape(actions.shape[0], -1, actions.shape[-1])
    rows = numerics.bmm(flat, table).view(m, *actions.shape[1:-1], -1)
    base = first if state_index is None else rows_of_states(first, state_index)
    return rows + base.unsqueeze(2)


def predict_options(
    model: WorldModel, joint_obs: torch.Tensor, options: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A team-risk model's (one cost column) successors of each state [M, S, A*D] under each of
    its K joint actions [M, S, K, A]: (next joint obs [M, S, K, A*D], risk [M, S, K], done
    [M, S, K]). The model's own `predict_options` where it has one, else `predict` on the
    states repeated K times (any model with the WorldModel interface)."""
    own = getattr(model, "predict_options", None)
    if own is not None:
        return own(joint_obs, options)
    m, s, k, a = options.shape
    obs = joint_obs.unsqueeze(2).expand(m, s, k, joint_obs.shape[-1]).reshape(m, s * k, -1)
    next_obs, risk, done = model.predict(obs, options.reshape(m, s * k, a))
    # `predict` may hand back views of reused buffers (`EnsembleWorldModel` in inference mode):
    # copies stay valid across the caller's next calls.
    return (
        next_obs.reshape(m, s, k, -1).clone(),
        risk.reshape(m, s, k).clone(),
        done.reshape(m, s, k).clone(),
    )


def make_world_model(
    version: str,
    *,
    n_agents: int,
    obs_dim: int,
    n_actions: int,
    config: Any,
    seed: int,
    continuous: bool = False,
) -> TeamWorldModel:
    """Build the world model `version` (a key of WM_VERSIONS) from a ShieldConfig
    (`continuous`: Box actions of `n_actions` entries per agent)."""
    return lookup(WM_VERSIONS, version, "wm_version")(
        n_agents=n_agents,
        obs_dim=obs_dim,
        n_actions=n_actions,
        config=config,
        seed=seed,
        continuous=continuous,
    )


def _team(
    *, n_agents: int, obs_dim: int, n_actions: int, config: Any, seed: int, continuous: bool
) -> TeamWorldModel:
    """A `TeamWorldModel` sized by the ShieldConfig's world-model settings."""
    return TeamWorldModel(
        continuous=continuous,
        n_agents=n_agents,
        obs_dim=obs_dim,
        n_actions=n_actions,
        ensemble_size=config.ensemble_size,
        hidden=tuple(config.wm_hidden),
        learning_rate=config.wm_learning_rate,
        seed=seed,
    )


# wm_version -> factory. v0: the team's risk from an agent-shared cost model, the dynamics from
# an `EnsembleWorldModel`.
WM_VERSIONS: dict[str, Callable[..., TeamWorldModel]] = {"v0": _team}
