"""ShieldedIPPO: IPPO whose actions pass through the shield (DESIGN.md section 6).

Only the trainer's extension points are overridden:

- `filter_actions`: passive (returns the proposal) for the first `shield_patience` policy
  updates, then the shield filters the proposals;
- `observe`: every real transition goes into the models' replay (also while passive);
- `after_update`: fits the world and opponent models on the replay, updates the opponent
  mixing weight, logs the shield's counters, arms the shield once patience has passed;
- `extra_state` / `load_extra_state`: models, optimisers, replay, generators, counters;
- `extra_policy_state`: the trained models and the shield config, for `load_shield_filter`.

What the policy learns from. The PPO buffer holds the *executed* action (after the shield) and
its log-probability under the current policy, pi(a_exec | s) (the trainer does this for every
subclass). Reasons: the reward and next state were produced by a_exec, so (s, a_exec, advantage)
is the only consistent sample; crediting the refused proposal would attribute consequences to an
action that never ran. Taking pi(a_exec | s) as the "old" log-probability (instead of the
shielded behaviour policy's probability of a_exec, which has no closed form) makes the first
PPO ratio exactly 1 and the clipped surrogate a trust region around pi itself, so the update
stays a proper PPO step on pi. It also teaches the base policy to propose the actions the shield
lets through, which the unshielded evaluation of the final policy measures.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.ippo import IPPO
from src.algos.shield.assemble import (
    POLICY_STATE_KEY,
    actor_policy_logits,
    build_shield,
    derived_seeds,
)
from src.algos.shield.config import ShieldConfig
from src.algos.shield.opponent_model import opponent_weight
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.shield import ShieldStats
from src.envs.base import joint_observation

__all__ = ["ShieldedIPPO"]


class ShieldedIPPO(IPPO):
    """IPPO with a shield; see the module docstring."""

    def __init__(self, run_config: Mapping[str, Any], env: Any) -> None:
        """Build the IPPO trainer, then the shield's models, replay and filter."""
        super().__init__(run_config, env, extra_algo_params=ShieldConfig.tunable_names())
        self.shield_cfg = ShieldConfig.from_run_config(run_config)
        cfg = self.shield_cfg
        parts = build_shield(
            cfg,
            n_agents=env.n_agents,
            obs_dim=env.obs_dim,
            n_actions=env.n_actions,
            max_steps=int(env.max_steps),
            policy_logits=actor_policy_logits(self.net),
            seed=self.seed,
        )
        self.shield = parts.shield
        self.world_model = parts.world_model
        self.opponent_model = parts.opponent_model
        replay_seed, fit_seed = derived_seeds(self.seed + 1, 2)
        self.replay = TransitionReplay(
            capacity=cfg.replay_size,
            n_agents=env.n_agents,
            obs_dim=env.obs_dim,
            valid_fraction=cfg.valid_fraction,
            seed=replay_seed,
        )
        # Minibatches of model training draw from this generator only (not the policy's).
        self.fit_generator = torch.Generator().manual_seed(fit_seed)
        self.armed = cfg.shield_patience == 0
        self._armed_this_update = self.armed

    # ------------------------------------------------------------------ hooks

    def filter_actions(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The shield's choice once armed; the proposal unchanged while it only watches."""
        if not self.armed:
            return super().filter_actions(obs, proposed, logits, episode_step)
        return self.shield.filter(obs, proposed, logits, episode_step)

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        """Store the real transition (obs -> final_obs, executed actions) in the replay."""
        self.replay.add(
            obs=torch.as_tensor(joint_observation(obs), dtype=torch.float32),
            action=torch.as_tensor(np.asarray(executed), dtype=torch.int64),
            next_obs=torch.as_tensor(joint_observation(result.final_obs), dtype=torch.float32),
            cost=torch.from_numpy((np.asarray(result.cost) > 0).astype(np.float32)),
            # Truncation by the hidden cap is not predictable from observations: only
            # termination is a "done" for the world model.
            done=torch.from_numpy(np.asarray(result.terminated).any(axis=1).astype(np.float32)),
        )

    def after_update(self, update: int) -> dict[str, float | None]:
        """Fit the models, log the shield's counters, arm after `shield_patience` updates."""
        cfg = self.shield_cfg
        started = time.perf_counter()
        n_samples = math.ceil(cfg.model_epochs * self.replay.added_since_fit)
        self.replay.added_since_fit = 0
        fit = {"n_samples": n_samples, "batch_size": cfg.model_batch_size}
        fit["max_valid"] = cfg.max_valid_batch
        wm = self.world_model.fit(self.replay, **fit, generator=self.fit_generator)
        om = self.opponent_model.fit(self.replay, **fit, generator=self.fit_generator)
        self.shield.opponent_weight = opponent_weight(
            cfg.shield_opponent_mode,
            self.shield.opponent_weight,
            valid_loss=om["valid_loss"],
            n_actions=self.env.n_actions,
        )
        stats = self.shield.stats
        self.shield.stats = ShieldStats()
        row = {
            M.SHIELD_ARMED: float(self._armed_this_update),
            M.SHIELD_INTERVENTIONS: float(stats.interventions),
            M.SHIELD_NO_SAFE_ACTION: float(stats.no_safe_action),
            M.SHIELD_MEAN_BOUND: stats.mean_bound,
            M.SHIELD_OPPONENT_WEIGHT: self.shield.opponent_weight,
            M.SHIELD_SECONDS: stats.seconds,
            M.SHIELD_MODEL_SECONDS: time.perf_counter() - started,
            M.WM_TRAIN_LOSS: wm["train_loss"],
            M.WM_VALID_LOSS: wm["valid_loss"],
            M.WM_COST_ACCURACY: wm["cost_accuracy"],
            M.OM_TRAIN_LOSS: om["train_loss"],
            M.OM_VALID_LOSS: om["valid_loss"],
            M.OM_VALID_ACCURACY: om["valid_accuracy"],
        }
        # `update` is 0-based: after it, update + 1 updates are done.
        self.armed = update + 1 >= cfg.shield_patience
        self._armed_this_update = self.armed
        # Undefined values (nothing to validate yet, no decision made) are nulls, as in IPPO.
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}

    def extra_state(self) -> dict[str, Any]:
        """Models, optimisers, replay, generators and counters."""
        return {
            "world_model": self.world_model.state_dict(),
            "world_model_extra": self.world_model.extra_state(),
            "opponent_model": self.opponent_model.state_dict(),
            "opponent_model_extra": self.opponent_model.extra_state(),
            "replay": self.replay.state_dict(),
            "fit_generator": self.fit_generator.get_state(),
            "shield_generator": self.shield.generator.get_state(),
            "opponent_weight": self.shield.opponent_weight,
            "stats": vars(self.shield.stats).copy(),
            "armed": self.armed,
            "armed_this_update": self._armed_this_update,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""
        self.world_model.load_state_dict(state["world_model"])
        self.world_model.load_extra_state(state["world_model_extra"])
        self.opponent_model.load_state_dict(state["opponent_model"])
        self.opponent_model.load_extra_state(state["opponent_model_extra"])
        self.replay.load_state_dict(state["replay"])
        self.fit_generator.set_state(state["fit_generator"])
        self.shield.generator.set_state(state["shield_generator"])
        self.shield.opponent_weight = float(state["opponent_weight"])
        self.shield.stats = ShieldStats(**state["stats"])
        self.armed = bool(state["armed"])
        self._armed_this_update = bool(state["armed_this_update"])

    def extra_policy_state(self) -> dict[str, Any]:
        """The trained shield for policy.pt: config, model weights, opponent weight, cap."""
        return {
            POLICY_STATE_KEY: {
                "config": self.shield_cfg.to_dict(),
                "world_model": self.world_model.state_dict(),
                "opponent_model": self.opponent_model.state_dict(),
                "opponent_weight": float(self.shield.opponent_weight),
                "max_steps": int(self.env.max_steps),
                "armed": bool(self.armed),
            }
        }
