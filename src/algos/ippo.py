"""Independent PPO with a parameter-shared actor-critic (de Witt et al. 2020, Yu et al. 2022).

The trainer reads top to bottom: `collect_rollout` -> `compute_advantages` -> `update_policy`
-> `log_update`, driven by `train`. Subclasses (`ippo_lag.IPPOLag`, `shield.trainer.
ShieldedIPPO`) change behaviour only through the hooks below (docs/architecture.md,
"Extension points of the IPPO trainer"):

- `filter_actions(obs, proposed, logits, episode_step) -> (executed, intervened)`
- `observe(obs, executed, result)`
- `extra_losses(batch) -> dict[str, Tensor]`
- `after_update(update) -> dict[str, float]`
- `extra_state()` / `load_extra_state(state)` (checkpoints), `extra_policy_state()` (policy.pt)

plus `prepare_batch(batch)`, through which `IPPOLag` adds cost advantages to the batch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm import tqdm

from src.algos import metrics as M
from src.algos.buffer import RolloutBuffer
from src.algos.maths import compute_gae, explained_variance, normalise, ppo_clip_loss, value_loss
from src.algos.networks import ActorCritic, sample_actions
from src.core.logging import log
from src.core.wandb import EpisodeLog

__all__ = ["IPPO", "PAUSE_ENV_VAR", "IPPOConfig", "copy_seeds", "seed_everything"]

# Test hook: "<phase>:<update>:<marker path>" makes training create the marker file and sleep
# at that point (phase `mid_update`: after the first epoch of update <update>; phase
# `after_checkpoint`: right after the checkpoint following update <update>), so a test can
# SIGKILL it at a known point. Unset in normal runs.
PAUSE_ENV_VAR = "SAFE_MARL_TEST_PAUSE_AT"

# Keys of the resolved run config that the trainer reads.
RUN_KEYS = (
    "env_name",
    "algo",
    "run_idx",
    "seed",
    "num_envs",
    "timesteps",
    "rollouts",
    "learning_epochs",
    "mini_batches",
    "learning_rate",
)


@dataclass(frozen=True, kw_only=True)
class IPPOConfig:
    """Hyperparameters of IPPO beyond the seed's knobs (the run config's `algo_params`)."""

    gamma: float = 0.99
    """Discount factor of the reward."""
    gae_lambda: float = 0.95
    """GAE lambda: bias-variance trade-off of the advantage estimate."""
    clip_coef: float = 0.2
    """PPO ratio clip epsilon."""
    clip_value_loss: bool = False
    """Clip the value loss around the rollout's values with `clip_coef` (PPO2 style)."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss (and of the cost value loss in ippo_lag)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and each critic."""
    normalise_advantages: bool = True
    """Standardise the reward advantages over the whole rollout before the update."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the run."""
    adam_eps: float = 1e-5
    """Adam epsilon."""

    def __post_init__(self) -> None:
        """Normalise lists to tuples and reject bad values naming the field."""
        if isinstance(self.hidden_sizes, list):
            object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type in ("bool",) and not isinstance(value, bool):
                raise ValueError(f"{field.name} must be a bool, got {value!r}")
            if field.type == "float":
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(f"{field.name} must be a number, got {value!r}")
                if not np.isfinite(value) or value < 0:
                    raise ValueError(f"{field.name} must be finite and >= 0, got {value!r}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}")
        for name in ("clip_coef", "max_grad_norm", "adam_eps"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        sizes = self.hidden_sizes
        if (
            not isinstance(sizes, tuple)
            or not sizes
            or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in sizes)
        ):
            raise ValueError(
                f"hidden_sizes must be a non-empty list of positive ints, got {sizes!r}"
            )

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any] | None, *, ignore: Collection[str] = ()
    ) -> IPPOConfig:
        """Build from `algo_params`; keys in `ignore` belong to a subclass's own config.

        Raises `ValueError` naming every unknown key and listing the known ones.
        """
        params = dict(params or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in params if k not in names and k not in ignore)
        if unknown:
            raise ValueError(
                f"unknown algo_params {unknown} for {cls.__name__}; known: {sorted(names)}"
            )
        return cls(**{k: v for k, v in params.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (tuples as lists)."""
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        return out


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs (network init uses torch's)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def copy_seeds(seed: int, num_envs: int) -> list[int]:
    """Independent per-copy reset seeds, so runs with neighbouring seeds share no copy."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs)]


def _pause_for_tests(phase: str, update: int) -> None:
    """Sleep forever at a point named by `SAFE_MARL_TEST_PAUSE_AT` (see PAUSE_ENV_VAR)."""
    spec = os.environ.get(PAUSE_ENV_VAR)
    if not spec:
        return
    want_phase, want_update, marker = spec.split(":", 2)
    if want_phase == phase and int(want_update) == update:
        Path(marker).write_text(f"{phase} {update}\n")
        while True:
            time.sleep(1.0)


def _require_int(config: Mapping[str, Any], key: str, low: int) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"run config {key}={value!r}: must be an int >= {low}")
    return int(value)


class IPPO:
    """The IPPO trainer over one `VectorEnv` (observations `[E, A, D]`, discrete actions)."""

    config_cls: ClassVar[type[IPPOConfig]] = IPPOConfig
    uses_cost_critic: ClassVar[bool] = False

    def __init__(
        self,
        run_config: Mapping[str, Any],
        env: Any,
        *,
        extra_algo_params: Collection[str] = (),
    ) -> None:
        """Build networks, optimiser and buffers from a resolved run config and a VectorEnv.

        `extra_algo_params` names `algo_params` keys that a subclass reads into its own config,
        so they are not reported as unknown here.
        """
        missing = [k for k in RUN_KEYS if k not in run_config]
        if missing:
            raise ValueError(f"run config lacks the keys {missing}")
        self.run_config = dict(run_config)
        self.cfg = self.config_cls.from_params(
            run_config.get("algo_params"), ignore=extra_algo_params
        )
        self.seed = _require_int(run_config, "seed", 0)
        self.num_envs = _require_int(run_config, "num_envs", 1)
        self.rollouts = _require_int(run_config, "rollouts", 1)
        self.learning_epochs = _require_int(run_config, "learning_epochs", 1)
        self.mini_batches = _require_int(run_config, "mini_batches", 1)
        timesteps = _require_int(run_config, "timesteps", 1)
        self.learning_rate = float(run_config["learning_rate"])
        if not self.learning_rate > 0:
            raise ValueError(f"run config learning_rate={self.learning_rate!r}: must be > 0")
        if env.num_envs != self.num_envs:
            raise ValueError(f"env has {env.num_envs} copies, run config num_envs={self.num_envs}")
        self.env = env
        e, a, d = env.num_envs, env.n_agents, env.obs_dim
        batch = self.rollouts * e * a
        if batch % self.mini_batches:
            raise ValueError(
                f"mini_batches={self.mini_batches}: must divide the PPO batch "
                f"rollouts*num_envs*n_agents = {self.rollouts}*{e}*{a} = {batch}"
            )
        self.steps_per_update = self.rollouts * e
        self.num_updates = timesteps // self.steps_per_update
        if self.num_updates < 1:
            raise ValueError(
                f"timesteps={timesteps}: must be >= rollouts*num_envs = {self.steps_per_update}"
            )

        seed_everything(self.seed)
        self.net = ActorCritic(
            obs_dim=d,
            n_agents=a,
            n_actions=env.n_actions,
            hidden_sizes=self.cfg.hidden_sizes,
            cost_critic=self.uses_cost_critic,
        )
        # foreach: one fused call per step instead of a Python loop over parameters (the
        # CPU default), measurably cheaper for these small networks.
        self.optimizer = torch.optim.Adam(
            self.net.parameters(), lr=self.learning_rate, eps=self.cfg.adam_eps, foreach=True
        )
        # Action sampling and minibatch order draw from this generator only.
        self.generator = torch.Generator().manual_seed(self.seed)
        self.buffer = RolloutBuffer(steps=self.rollouts, num_envs=e, n_agents=a, obs_dim=d)
        ids = torch.eye(a).expand(self.rollouts, e, a, a)
        self.buffer.inputs[..., d:] = ids
        self.buffer.final_inputs[..., d:] = ids
        self._no_intervention = np.zeros((e, a), dtype=bool)

        self.history: list[EpisodeLog] = []
        self.updates: list[dict[str, Any]] = []
        self.update = 0  # completed policy updates
        self.vector_step = 0  # completed vector steps
        self.wall_time = 0.0  # seconds spent training, summed over resumes
        self._obs: np.ndarray | None = None
        self._episodes_since_update: list[EpisodeLog] = []
        self._reset_trackers()

    # ------------------------------------------------------------------ extension hooks

    def filter_actions(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Choose the executed actions; the default executes the policy's proposal.

        `obs` `[E, A, D]`, `proposed` `[E, A]` int64, `logits` `[E, A, n_actions]`,
        `episode_step` `[E]`: 1-based index, within its episode, of the step these actions
        take (the `StepResult.episode_step` that step will report). Returns executed `[E, A]`
        int64 and intervened `[E, A]` bool. The buffer stores the executed action and its
        log-probability under the policy.
        """
        return proposed, self._no_intervention

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        """See every real transition: `obs` `[E, A, D]` acted on, `executed` `[E, A]`, result."""

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Add `[T, E, A, ...]` tensors or change `advantages` before the update."""
        return batch

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Losses added to the PPO loss of a minibatch (already weighted), keyed by metric key.

        `batch` holds flat `[N, ...]` minibatch tensors: `inputs`, `actions`, `log_probs`,
        `values`, `returns`, `advantages` plus whatever `prepare_batch` added. The mean of each
        value over minibatches is logged under its key.
        """
        return {}

    def after_update(self, update: int) -> dict[str, float]:
        """Called after policy update `update` (0-based); returns extra metrics to log."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """Subclass state to checkpoint (picklable)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""

    def extra_policy_state(self) -> dict[str, Any]:
        """Entries added to policy.pt (tensors, state dicts and plain values only)."""
        return {}

    # ------------------------------------------------------------------ the training loop

    def train(
        self, *, on_update: Callable[[IPPO], None] | None = None, progress: bool = True
    ) -> None:
        """Run the remaining updates; `on_update(self)` runs after each (e.g. checkpointing)."""
        if self._obs is None:
            self._obs = self.env.reset(seed=copy_seeds(self.seed, self.num_envs))
        torch.set_num_threads(int(self.run_config.get("threads", torch.get_num_threads())))
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
                losses = self.update_policy(batch)
                elapsed = time.perf_counter() - started
                self.wall_time += elapsed
                row = self.log_update(losses, elapsed=elapsed)
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
                if on_update is not None:
                    on_update(self)
                _pause_for_tests("after_checkpoint", self.update - 1)
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
            logits = self.net.logits(x)  # [E, A, n_actions]
            proposed = sample_actions(logits, self.generator)  # [E, A]
            executed, intervened = self.filter_actions(
                obs, proposed.numpy(), logits, self._episode_step + 1
            )
            executed_t = torch.as_tensor(executed, dtype=torch.int64)
            buf.actions[t].copy_(executed_t)
            buf.log_probs[t].copy_(
                torch.log_softmax(logits, -1).gather(-1, executed_t.unsqueeze(-1)).squeeze(-1)
            )
            result = self.env.step(buf.actions[t].numpy())
            self.observe(obs, executed, result)
            buf.final_inputs[t, ..., :d].copy_(torch.from_numpy(result.final_obs))
            buf.rewards[t].copy_(torch.from_numpy(result.reward))
            buf.costs[t].copy_(torch.from_numpy(result.cost))
            buf.terminated[t].copy_(torch.from_numpy(result.terminated))
            buf.truncated[t].copy_(torch.from_numpy(result.truncated))
            buf.intervened[t].copy_(torch.from_numpy(np.asarray(intervened, dtype=bool)))
            buf.first_violation[t].copy_(torch.from_numpy(self._track_episodes(result, intervened)))
            obs = result.obs
        self._obs = obs

    def compute_advantages(self) -> dict[str, torch.Tensor]:
        """GAE over the rollout: V(final_obs) bootstraps truncations, terminations get 0."""
        buf = self.buffer
        with torch.no_grad():
            values = self.net.value(buf.inputs)  # [T, E, A]
            next_values = self.net.value(buf.final_inputs)  # [T, E, A]
        advantages, returns = compute_gae(
            rewards=buf.rewards,
            values=values,
            next_values=next_values,
            terminated=buf.terminated,
            truncated=buf.truncated,
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

    def update_policy(self, batch: dict[str, torch.Tensor]) -> dict[str, float | None]:
        """`learning_epochs` passes of `mini_batches` clipped-PPO steps over the rollout."""
        cfg = self.cfg
        if cfg.anneal_lr:
            lr = self.learning_rate * (1.0 - self.update / self.num_updates)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        flat = self.buffer.flat(batch)
        sums: dict[str, float] = {}
        count = 0
        for epoch in range(self.learning_epochs):
            for mb in self.buffer.minibatches(
                flat, mini_batches=self.mini_batches, generator=self.generator
            ):
                logits = self.net.logits(mb["inputs"])  # [N, n_actions]
                log_p = torch.log_softmax(logits, -1)
                new_log_probs = log_p.gather(-1, mb["actions"].unsqueeze(-1)).squeeze(-1)
                entropy = -(log_p.exp() * log_p).sum(-1).mean()
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
                extra = self.extra_losses(mb)
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
            if epoch == 0:
                _pause_for_tests("mid_update", self.update)
        out = {key: total / count for key, total in sums.items()}
        ev = explained_variance(predictions=batch["values"], targets=batch["returns"])
        # Constant returns leave it undefined: a null, like the other undefined metrics.
        out[M.EXPLAINED_VARIANCE] = None if math.isnan(ev) else ev
        out[M.LEARNING_RATE] = float(self.optimizer.param_groups[0]["lr"])
        return out

    def log_update(self, losses: dict[str, float | None], *, elapsed: float) -> dict[str, Any]:
        """Record one row of updates.json (episode statistics of the rollout, losses, hooks)."""
        episodes, self._episodes_since_update = self._episodes_since_update, []
        row: dict[str, Any] = {
            "update": self.update,
            "global_step": self.vector_step * self.num_envs,
            "wall_time": self.wall_time,
            M.GLOBAL_STEP: self.vector_step * self.num_envs,
            M.STEPS_PER_SECOND: self.steps_per_update / max(elapsed, 1e-9),
            M.EPISODE_RETURN: _mean([ep.team_return for ep in episodes]),
            M.EPISODE_LENGTH: _mean([ep.length for ep in episodes]),
            M.EPISODE_COST: _mean([ep.cost for ep in episodes]),
            M.VIOLATION_RATE: _mean([float(ep.violated) for ep in episodes]),
            **losses,
        }
        row.update(self.after_update(self.update))
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

    # ------------------------------------------------------------------ episode bookkeeping

    def _reset_trackers(self) -> None:
        e, a = self.num_envs, self.env.n_agents
        self._episode_step = np.zeros(e, dtype=np.int64)
        self._ep_t_start = np.arange(e, dtype=np.int64) + 1
        self._ep_returns = np.zeros((e, a), dtype=np.float64)
        self._ep_cost = np.zeros(e, dtype=np.float64)
        self._ep_violated = np.zeros(e, dtype=bool)
        self._ep_first_violation = np.full(e, -1, dtype=np.int64)
        self._ep_interventions = np.zeros(e, dtype=np.int64)

    def _track_episodes(self, result: Any, intervened: np.ndarray) -> np.ndarray:
        """Update per-copy episode sums; emit an EpisodeLog per finished episode.

        Returns `[E]` bool: this step is its episode's first violation. Global step numbers
        are 1-based: step `(vector_step, copy)` is `vector_step * E + copy + 1`, so `t_end`
        strictly increases along the history.
        """
        e = self.num_envs
        self._episode_step += 1
        self._ep_returns += result.reward
        self._ep_cost += result.cost.sum(axis=1)
        violation = (result.cost > 0).any(axis=1)
        first = violation & ~self._ep_violated
        self._ep_first_violation[first] = self._episode_step[first]
        self._ep_violated |= violation
        self._ep_interventions += np.asarray(intervened).sum(axis=1)
        terminated = result.terminated.any(axis=1)
        done = terminated | result.truncated.any(axis=1)
        for copy in np.flatnonzero(done):
            episode = EpisodeLog(
                env=str(self.run_config["env_name"]),
                algo=str(self.run_config["algo"]),
                run=int(self.run_config["run_idx"]),
                episode=len(self.history),
                env_copy=int(copy),
                t_start=int(self._ep_t_start[copy]),
                t_end=self.vector_step * e + int(copy) + 1,
                length=int(self._episode_step[copy]),
                team_return=float(self._ep_returns[copy].sum()),
                agent_returns=tuple(float(r) for r in self._ep_returns[copy]),
                cost=float(self._ep_cost[copy]),
                violated=bool(self._ep_violated[copy]),
                first_violation_step=int(self._ep_first_violation[copy]),
                truncated_by_cap=not bool(terminated[copy]),
                shield_interventions=int(self._ep_interventions[copy]),
            )
            self.history.append(episode)
            self._episodes_since_update.append(episode)
        if done.any():
            self._episode_step[done] = 0
            self._ep_t_start[done] = (self.vector_step + 1) * e + np.flatnonzero(done) + 1
            self._ep_returns[done] = 0.0
            self._ep_cost[done] = 0.0
            self._ep_violated[done] = False
            self._ep_first_violation[done] = -1
            self._ep_interventions[done] = 0
        self.vector_step += 1
        return first

    # ------------------------------------------------------------------ state

    def policy_state(self) -> dict[str, Any]:
        """The content of policy.pt: weights, network shape, run config and hook extras."""
        return {
            "actor_critic": self.net.state_dict(),
            "network": self.net.describe(),
            "config": _plain_config(self.run_config),
            "algo_config": self.cfg.to_dict(),
            **self.extra_policy_state(),
        }

    def torch_state(self) -> dict[str, Any]:
        """Checkpoint part loadable with `weights_only=True`: weights, optimiser, torch RNGs."""
        return {
            "actor_critic": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def other_state(self) -> dict[str, Any]:
        """Checkpoint part that needs pickle: env state, NumPy/Python RNGs, history, hooks."""
        return {
            "update": self.update,
            "vector_step": self.vector_step,
            "wall_time": self.wall_time,
            "obs": self._obs,
            "env": self.env.get_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
            "history": list(self.history),
            "updates": list(self.updates),
            "episodes_since_update": list(self._episodes_since_update),
            "trackers": {
                name: getattr(self, name).copy()
                for name in (
                    "_episode_step",
                    "_ep_t_start",
                    "_ep_returns",
                    "_ep_cost",
                    "_ep_violated",
                    "_ep_first_violation",
                    "_ep_interventions",
                )
            },
            "extra": self.extra_state(),
        }

    def load_state(self, torch_state: dict[str, Any], other: dict[str, Any]) -> None:
        """Restore a checkpoint written from `torch_state()` and `other_state()`."""
        self.net.load_state_dict(torch_state["actor_critic"])
        self.optimizer.load_state_dict(torch_state["optimizer"])
        self.generator.set_state(torch_state["generator"])
        torch.set_rng_state(torch_state["torch_rng"])
        self.update = int(other["update"])
        self.vector_step = int(other["vector_step"])
        self.wall_time = float(other["wall_time"])
        self._obs = other["obs"]
        self.env.set_state(other["env"])
        np.random.set_state(other["numpy_rng"])
        random.setstate(other["python_rng"])
        self.history = list(other["history"])
        self.updates = list(other["updates"])
        self._episodes_since_update = list(other["episodes_since_update"])
        for name, value in other["trackers"].items():
            setattr(self, name, value.copy())
        self.load_extra_state(other["extra"])


def _plain_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run config with tuples as lists, so policy.pt loads with weights_only=True."""

    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, np.generic):
            return value.item()
        return value

    return plain(config)


def _mean(values: list[float]) -> float | None:
    """Mean, or None (a null in updates.json) when no episode finished."""
    return float(np.mean(values)) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
