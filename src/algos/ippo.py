"""Independent PPO with a parameter-shared actor-critic (de Witt et al. 2020, Yu et al. 2022).

The trainer reads top to bottom: `collect_rollout` -> `compute_advantages` -> `update_policy`
-> `log_update`, driven by `train`. Its parts live elsewhere, one job each: the networks
(`networks.ActorCritic`), the rollout storage (`buffer.RolloutBuffer`), the episode
bookkeeping (`tracker.EpisodeTracker`), the filter between proposal and env
(`filters.ActionFilter`, the identity here) and the maths (`maths`). Subclasses
(`ippo_lag.IPPOLag`, `shield.trainer.ShieldedIPPO`) change behaviour only through the hooks
`observe`, `shaped_reward`, `prepare_batch`, `extra_losses`, `after_update`, `extra_state` /
`load_extra_state` and `extra_policy_state`, and by setting `action_filter` and
`learns_from_proposals`.

`train(callbacks=...)` calls each callback's `on_epoch_end(trainer, epoch)` after every
learning epoch and `on_update_end(trainer)` after every update (checkpointing is one).

Discrete actions get a categorical policy over the actor's logits. Box actions (a task whose
VectorEnv has `continuous_actions`, e.g. `spread` with `continuous_actions: true`) get a
Gaussian policy (`actions.BoxActions`, docs/design.md, section 6.1): the actor gives the mean,
a state-independent log-std parameter the spread; the rollout stores the raw, unbounded
sample and its log-probability, and the env receives it clipped to the Box. An action filter
on Box actions (the shields, `shield.box.BoxShield`) gets the raw samples with the policy's
mean and log-std and returns raw actions, which the buffer learns from. An algorithm
whose registry entry does not list `box` among its `action_kinds` is refused on a Box task
when its trainer is built.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm import tqdm

from src.algos import metrics as M
from src.algos.actions import POLICY_KEY, BoxActions, team_action_box
from src.algos.api import TrainingCallback
from src.algos.buffer import RolloutBuffer
from src.algos.filters import ActionFilter, Unfiltered
from src.algos.maths import compute_gae, explained_variance, normalise, ppo_clip_loss, value_loss
from src.algos.networks import (
    ActorCritic,
    gaussian_entropy,
    gaussian_log_prob,
    sample_actions,
    sample_gaussian,
)
from src.algos.registry import ALGORITHMS, get_algorithm
from src.algos.seeding import seed_everything
from src.algos.tracker import EpisodeTracker
from src.config.run import RunConfig
from src.core.logging import log
from src.numerics import adam
from src.records import EpisodeLog
from src.seeds import copy_seeds

__all__ = ["IPPO", "IPPO_VERSIONS", "TrainingCallback"]


class IPPO:
    """The IPPO trainer over one `VectorEnv` (observations `[E, A, D]`; Discrete actions
    `[E, A]`, or Box actions `[E, A, ...]` with a Gaussian policy)."""

    uses_cost_critic: ClassVar[bool] = False

    def __init__(self, config: RunConfig | Mapping[str, Any], env: Any) -> None:
        """Build networks, optimiser, buffer and tracker from a run config and a VectorEnv."""
        self.config = RunConfig.from_dict(config)
        self.cfg = self.config.ppo
        if env.num_envs != self.cfg.num_envs:
            raise ValueError(
                f"env has {env.num_envs} copies, run config num_envs={self.cfg.num_envs}"
            )
        if env.n_agents != self.config.env.n_agents:
            raise ValueError(
                f"env has {env.n_agents} agents, run config n_agents={self.config.env.n_agents}"
            )
        self.env = env
        self.seed = self.config.seed
        self.num_envs = self.cfg.num_envs
        self.rollouts = self.cfg.rollouts
        self.steps_per_update = self.cfg.steps_per_update
        self.num_updates = self.cfg.num_updates
        e, a, d = env.num_envs, env.n_agents, env.obs_dim
        # None: Discrete actions (a categorical policy); else the Box of a Gaussian policy.
        self.box: BoxActions | None = self._action_box(env)

        seed_everything(self.seed)
        self.net = ActorCritic(
            obs_dim=d,
            n_agents=a,
            n_actions=env.n_actions if self.box is None else self.box.dim,
            hidden_sizes=self.cfg.hidden_sizes,
            cost_critic=self.uses_cost_critic,
            continuous=self.box is not None,
        )
        self.optimizer = adam(
            self.net.parameters(), lr=self.cfg.learning_rate, eps=self.cfg.adam_eps
        )
        # Action sampling and minibatch order draw from this generator only.
        self.generator = torch.Generator().manual_seed(self.seed)
        self.buffer = RolloutBuffer(
            steps=self.rollouts,
            num_envs=e,
            n_agents=a,
            obs_dim=d,
            action_dim=None if self.box is None else self.box.dim,
        )
        ids = torch.eye(a).expand(self.rollouts, e, a, a)
        self.buffer.inputs[..., d:] = ids
        self.buffer.final_inputs[..., d:] = ids
        self.action_filter: ActionFilter = Unfiltered()
        # What the buffer holds per step: the executed actions (the default), or the policy's
        # own proposals, with the filter counted as part of the environment.
        self.learns_from_proposals = False
        self.tracker = EpisodeTracker(
            num_envs=e,
            n_agents=a,
            env=self.config.env_name,
            algo=self.config.algo,
            run=self.config.run_idx,
        )

        self.history: list[EpisodeLog] = []
        self.updates: list[dict[str, Any]] = []
        self.update = 0  # completed policy updates
        self.vector_step = 0  # completed vector steps
        self.wall_time = 0.0  # seconds spent training, summed over resumes
        self._obs: np.ndarray | None = None
        self._episodes_since_update: list[EpisodeLog] = []

    def _action_box(self, env: Any) -> BoxActions | None:
        """The Box of the env's actions (None: Discrete), refused in one line for an algorithm
        whose registry entry does not take Box actions (the shields)."""
        box = team_action_box(
            env, env_name=self.config.env_name, params=self.config.env.constructor_params()
        )
        if box is None:
            return None
        spec = get_algorithm(self.config.algo)
        if "box" not in spec.action_kinds:
            takers = [name for name, entry in ALGORITHMS.items() if "box" in entry.action_kinds]
            raise ValueError(
                f"algo {spec.name} takes {' or '.join(spec.action_kinds)} actions, and env "
                f"{self.config.env_name} has box actions ({box.dim} entries in "
                f"[{box.low.min():g}, {box.high.max():g}]); leave {spec.name} out for this env "
                f"(the built-in algorithms that take box actions: {', '.join(takers)})"
            )
        return box

    # ------------------------------------------------------------------ extension hooks

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        """See every real transition: `obs` `[E, A, D]` acted on, `executed` `[E, A]` (Box:
        the clipped `[E, A, ...]` the env received), result."""

    def shaped_reward(self, reward: np.ndarray, intervened: np.ndarray) -> np.ndarray:
        """The reward `[E, A]` the policy learns from, given the filter's `[E, A]` flags."""
        return reward

    def reward_ends(self) -> torch.Tensor | None:
        """`[T, E, A]` bool: rollout steps at which the reward's process ends besides the
        episodes' terminations (the reward GAE does not bootstrap past them); None: none."""
        return None

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Add `[T, E, A, ...]` tensors or change `advantages` before the update."""
        return batch

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Losses added to the PPO loss of a minibatch (already weighted), keyed by metric key.

        `batch` holds flat `[N, ...]` minibatch tensors: `inputs`, `actions` (Box: the raw
        `[N, k]` Gaussian samples), `log_probs`, `values`, `returns`, `advantages` plus
        whatever `prepare_batch` added, and `new_log_probs`, log pi(actions | inputs) under the
        current weights (with its graph, as the PPO loss uses it). The mean of each value over
        minibatches is logged under its key.
        """
        return {}

    def after_update(self, update: int) -> dict[str, float | None]:
        """Called after policy update `update` (0-based); returns extra metrics to log."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """Subclass state to checkpoint (see `checkpoint` for the values it may hold)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""

    def extra_policy_state(self) -> dict[str, Any]:
        """Entries added to policy.pt (tensors, state dicts and plain values only)."""
        return {}

    # ------------------------------------------------------------------ the training loop

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        """Run the remaining updates, calling `callbacks` at the end of each epoch and update."""
        if self._obs is None:
            self._obs = self.env.reset(seed=copy_seeds(self.seed, self.num_envs))
        bar = tqdm(
            total=self.num_updates * self.steps_per_update,
            initial=self.vector_step * self.num_envs,
            unit="step",
            file=sys.stderr,
            disable=not progress or not sys.stderr.isatty(),
            dynamic_ncols=True,
        )
        try:
            while self.update < self.num_updates:
                started = time.perf_counter()
                self.collect_rollout()
                batch = self.compute_advantages()
                losses = self.update_policy(batch, callbacks=callbacks)
                row = self.log_update(losses, started=started)
                self.update += 1
                bar.update(self.steps_per_update)
                bar.set_postfix(
                    {
                        "steps/s": f"{row[M.STEPS_PER_SECOND]:.0f}",
                        "return": _fmt(row[M.EPISODE_RETURN]),
                        "cost": _fmt(row[M.EPISODE_COST]),
                    },
                    refresh=False,
                )
                for callback in callbacks:
                    callback.on_update_end(self)
        finally:
            bar.close()

    @torch.inference_mode()
    def collect_rollout(self) -> None:
        """Step every copy `rollouts` times with the current policy, filling the buffer."""
        buf, d = self.buffer, self.env.obs_dim
        obs = self._obs
        for t in range(self.rollouts):
            x = buf.inputs[t]  # [E, A, D + A]
            x[..., :d].copy_(torch.from_numpy(obs))
            if self.box is None:
                executed, intervened = self._act_discrete(t, obs)
            else:
                executed, intervened = self._act_box(t, obs)
            result = self.env.step(executed)
            self.observe(obs, executed, result)
            buf.final_inputs[t, ..., :d].copy_(torch.from_numpy(result.final_obs))
            buf.rewards[t].copy_(torch.from_numpy(self.shaped_reward(result.reward, intervened)))
            buf.costs[t].copy_(torch.from_numpy(result.cost))
            buf.terminated[t].copy_(torch.from_numpy(result.terminated))
            buf.truncated[t].copy_(torch.from_numpy(result.truncated))
            buf.intervened[t].copy_(torch.from_numpy(np.asarray(intervened, dtype=bool)))
            first, finished = self.tracker.record(result, intervened, self.vector_step)
            self.history += finished
            self._episodes_since_update += finished
            self.vector_step += 1
            buf.first_violation[t].copy_(torch.from_numpy(first))
            obs = result.obs
        self._obs = obs

    def _act_discrete(self, t: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample step `t`'s Discrete actions from `buffer.inputs[t]`, filter them, and store
        the learned actions and their log-probabilities in the buffer; (the executed actions
        `[E, A]` int64, the filter's `[E, A]` intervention flags)."""
        buf = self.buffer
        logits = self.net.logits(buf.inputs[t])  # [E, A, n_actions]
        proposed = sample_actions(logits, self.generator)  # [E, A]
        executed, intervened = self.action_filter.filter(
            obs, proposed.numpy(), logits, self.tracker.next_step
        )
        learned = proposed if self.learns_from_proposals else torch.as_tensor(executed)
        buf.actions[t].copy_(learned)
        buf.log_probs[t].copy_(
            torch.log_softmax(logits, -1).gather(-1, buf.actions[t].unsqueeze(-1)).squeeze(-1)
        )
        return np.asarray(executed, dtype=np.int64), intervened

    def _act_box(self, t: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample step `t`'s Box actions from `buffer.inputs[t]` and filter them: the raw
        actions (the filter's, or the policy's samples unfiltered) and their log-probabilities
        go to the buffer, the env gets them clipped to the Box; (the env's actions
        `[E, A, ...]`, the filter's `[E, A]` intervention flags)."""
        buf, box = self.buffer, self.box
        assert box is not None
        mean = self.net.action_mean(buf.inputs[t])  # [E, A, k]
        raw = sample_gaussian(mean, self.net.log_std, self.generator)  # [E, A, k]
        intervened = np.zeros(raw.shape[:-1], dtype=bool)
        if not isinstance(self.action_filter, Unfiltered):
            executed, intervened = self.action_filter.filter(
                obs, raw.numpy(), (mean, self.net.log_std), self.tracker.next_step
            )
            raw = torch.from_numpy(np.asarray(executed, dtype=np.float32))
        buf.actions[t].copy_(raw)
        buf.log_probs[t].copy_(gaussian_log_prob(mean, self.net.log_std, raw))
        return box.to_env(raw), intervened

    def log_probs_and_entropy(
        self, inputs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(actions | inputs) `[N]` under the current weights (with their graph) and the
        policy's mean entropy over `inputs` (a Gaussian's is the same in every state)."""
        if self.box is None:
            log_p = torch.log_softmax(self.net.logits(inputs), -1)  # [N, n_actions]
            new_log_probs = log_p.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            return new_log_probs, -(log_p.exp() * log_p).sum(-1).mean()
        mean = self.net.action_mean(inputs)  # [N, k]
        log_std = self.net.log_std
        return gaussian_log_prob(mean, log_std, actions), gaussian_entropy(log_std)

    def compute_advantages(self) -> dict[str, torch.Tensor]:
        """GAE over the rollout: V(final_obs) bootstraps truncations, terminations get 0."""
        buf = self.buffer
        with torch.no_grad():
            values = self.net.value(buf.inputs)  # [T, E, A]
            next_values = self.net.value(buf.final_inputs)  # [T, E, A]
        terminated, truncated = buf.terminated, buf.truncated
        ends = self.reward_ends()
        if ends is not None:
            terminated, truncated = terminated.bool() | ends, truncated.bool() & ~ends
        advantages, returns = compute_gae(
            rewards=buf.rewards,
            values=values,
            next_values=next_values,
            terminated=terminated,
            truncated=truncated,
            gamma=self.cfg.gamma,
            gae_lambda=self.cfg.gae_lambda,
        )
        if self.cfg.normalise_advantages:
            advantages = normalise(advantages)
        batch = {
            "inputs": buf.inputs,
            "actions": buf.actions,
            "log_probs": buf.log_probs,
            "values": values,
            "returns": returns,
            "advantages": advantages,
        }
        return self.prepare_batch(batch)

    def update_policy(
        self, batch: dict[str, torch.Tensor], *, callbacks: Sequence[TrainingCallback] = ()
    ) -> dict[str, float | None]:
        """`learning_epochs` passes of `mini_batches` clipped-PPO steps over the rollout."""
        cfg = self.cfg
        if cfg.anneal_lr:
            lr = cfg.learning_rate * (1.0 - self.update / self.num_updates)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        flat = self.buffer.flat(batch)
        sums: dict[str, float] = {}
        count = 0
        for epoch in range(cfg.learning_epochs):
            for mb in self.buffer.minibatches(
                flat, mini_batches=cfg.mini_batches, generator=self.generator
            ):
                new_log_probs, entropy = self.log_probs_and_entropy(mb["inputs"], mb["actions"])
                pg_loss, approx_kl, clip_fraction = ppo_clip_loss(
                    new_log_probs=new_log_probs,
                    old_log_probs=mb["log_probs"],
                    advantages=mb["advantages"],
                    clip_coef=cfg.clip_coef,
                )
                v_loss = value_loss(
                    values=self.net.value(mb["inputs"]),
                    returns=mb["returns"],
                    old_values=mb["values"],
                    clip_coef=cfg.clip_coef if cfg.clip_value_loss else None,
                )
                extra = self.extra_losses({**mb, "new_log_probs": new_log_probs})
                loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
                for term in extra.values():
                    loss = loss + term
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                step_metrics = {
                    M.POLICY_LOSS: pg_loss,
                    M.VALUE_LOSS: v_loss,
                    M.ENTROPY: entropy,
                    M.APPROX_KL: approx_kl,
                    M.CLIP_FRACTION: clip_fraction,
                    **extra,
                }
                for key, value in step_metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(value.detach())
                count += 1
            for callback in callbacks:
                callback.on_epoch_end(self, epoch)
        out: dict[str, float | None] = {key: total / count for key, total in sums.items()}
        ev = explained_variance(predictions=batch["values"], targets=batch["returns"])
        # Constant returns leave it undefined: a null, like the other undefined metrics.
        out[M.EXPLAINED_VARIANCE] = None if math.isnan(ev) else ev
        out[M.LEARNING_RATE] = float(self.optimizer.param_groups[0]["lr"])
        return out

    def log_update(self, losses: dict[str, float | None], *, started: float) -> dict[str, Any]:
        """Record one row of updates.json (episode statistics of the rollout, losses, hooks).

        `started`: `time.perf_counter()` when the update began; its wall time and steps per
        second count everything up to the end of the `after_update` hook (a shield's model
        fits included)."""
        episodes, self._episodes_since_update = self._episodes_since_update, []
        row: dict[str, Any] = {
            "update": self.update,
            "global_step": self.vector_step * self.num_envs,
            M.GLOBAL_STEP: self.vector_step * self.num_envs,
            M.EPISODE_RETURN: _mean([ep.team_return for ep in episodes]),
            M.EPISODE_LENGTH: _mean([ep.length for ep in episodes]),
            M.EPISODE_COST: _mean([ep.cost for ep in episodes]),
            M.VIOLATION_RATE: _mean([float(ep.violated) for ep in episodes]),
            **losses,
        }
        row.update(self.after_update(self.update))
        elapsed = time.perf_counter() - started
        self.wall_time += elapsed
        row["wall_time"] = self.wall_time
        row[M.STEPS_PER_SECOND] = self.steps_per_update / max(elapsed, 1e-9)
        self.updates.append(row)
        log(
            f"update {self.update + 1}/{self.num_updates} step {row['global_step']} "
            f"return {_fmt(row[M.EPISODE_RETURN])} violations {_fmt(row[M.VIOLATION_RATE])} "
            f"{row[M.STEPS_PER_SECOND]:.0f} steps/s",
            type="train",
        )
        return row

    @property
    def recent_episodes(self) -> list[EpisodeLog]:
        """Episodes finished since the last update was logged (the current rollout's)."""
        return self._episodes_since_update

    # ------------------------------------------------------------------ state

    def policy_state(self) -> dict[str, Any]:
        """The content of policy.pt: weights, network shape, run config and hook extras, and
        for Box actions their space (`actions.POLICY_KEY`), which the evaluation clips to."""
        state = {
            "actor_critic": self.net.state_dict(),
            "network": self.net.describe(),
            "config": self.config.to_dict(),
            "algo_config": self.algo_config(),
            **self.extra_policy_state(),
        }
        if self.box is not None:
            state[POLICY_KEY] = self.box.describe()
        return state

    @classmethod
    def load_actor(
        cls, policy_state: dict[str, Any], config: RunConfig, *, shielded: bool = True
    ) -> Any:
        """The final policy of a policy.pt content (`src.algos.policy.actor_from_state`): the
        method the pipeline calls on an algorithm given by import path, so a subclass of IPPO
        is evaluated and rendered like the built-in trainers."""
        # Imported here: evaluation imports the policy module without the trainer.
        from src.algos.policy import actor_from_state

        return actor_from_state(policy_state, config, shielded=shielded)

    def algo_config(self) -> dict[str, Any]:
        """The tunable hyperparameters of the algorithm's sections (recorded in policy.pt)."""
        return self.cfg.tunables()

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue bit for bit (see `checkpoint`)."""
        return {
            "actor_critic": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
            "update": self.update,
            "vector_step": self.vector_step,
            "wall_time": self.wall_time,
            "obs": self._obs,
            "env": self.env.get_state(),
            "history": [episode.to_dict() for episode in self.history],
            "updates": list(self.updates),
            "episodes_since_update": [episode.to_dict() for episode in self._episodes_since_update],
            "tracker": self.tracker.state_dict(),
            "extra": self.extra_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore a state written from `state()`."""
        self.net.load_state_dict(state["actor_critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(tuple(state["numpy_rng"]))
        version, internal, gauss = state["python_rng"]
        random.setstate((version, tuple(internal), gauss))
        self.update = int(state["update"])
        self.vector_step = int(state["vector_step"])
        self.wall_time = float(state["wall_time"])
        self._obs = state["obs"]
        self.env.set_state(state["env"])
        self.history = [EpisodeLog.from_dict(entry) for entry in state["history"]]
        self.updates = list(state["updates"])
        self._episodes_since_update = [
            EpisodeLog.from_dict(entry) for entry in state["episodes_since_update"]
        ]
        self.tracker.load_state_dict(state["tracker"])
        self.load_extra_state(state["extra"])


# ippo_version -> the trainer class; v0 is the implementation above.
IPPO_VERSIONS: dict[str, type[IPPO]] = {"v0": IPPO}


def _mean(values: list[float]) -> float | None:
    """Mean, or None (a null in updates.json) when no episode finished."""
    return float(np.mean(values)) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
