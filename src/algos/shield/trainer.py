"""ShieldedIPPO: IPPO whose actions pass through a shield (docs/design.md).

Only the trainer's extension points are used:

- `action_filter`: the identity for the first `shield_patience` policy updates (the shield
  only watches and its models learn), then the shield;
- `observe`: every real transition goes into the models' replay (also while watching), the
  rollout's steps together when the update's fits begin (one replay write per update);
- `observe`: every executed decision of the armed shield opens an entry of the outcome
  ledger, closed by what the real env does within the shield's horizon;
- `after_update`: fits the models on the replay (world model; the decentralised shield's
  opponent model and its mixing weight; the safety critic), refits the calibration map g on
  the labelled decisions and moves the allowance by the violating share of the finished
  training episodes (`src.algos.shield.calibration`), logs the shield's counters, arms the
  shield once patience has passed;
- `train`: after the last update, the certificate of the deployed allowance (`certify`);
- `extra_state` / `load_extra_state`: models, optimisers, replay, ledger, allowance,
  generators, counters;
- `extra_policy_state`: the trained models, the shield config, the calibration, the deployed
  allowance and the certificate, for `load_shield`.

What the policy learns from depends on `learn_from`.

- `learn_from: executed` (default): the PPO buffer holds the *executed* action and its
  log-probability under the current policy, pi(a_exec | s): the shield's correction is treated
  as the policy's own action, and every overridden agent-step costs the agent
  `intervention_penalty` of reward, so the states that need an override lose value. PPO's
  clipped ratio bounds the step towards an executed action the policy found unlikely, so
  `imitation` adds the log-likelihood of the corrections on the overridden agent-steps
  (`extra_losses`). The base policy thus imitates the corrections, and learns to steer clear of
  the states that need them.
- `learn_from: proposals`: the shield is part of the policy's environment. The buffer
  holds the policy's own *proposal* and its log-probability (so the PPO ratio and the
  advantage estimate are exactly on-policy for the environment "shield, then env"), with the
  same penalty. The policy learns what its proposals lead to through the shield; it may
  leave its safety to the shield, so the base policy alone stays unsafe.

With Box actions (`self.box`) the models learn from the actions the env received (clipped to
the Box), the shield is `box.BoxShield` (a candidate set per decision) and its generator is
checkpointed; the calibration, the allowance, the certificate and this loop are the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from src.algos import metrics as M
from src.algos.filters import Unfiltered
from src.algos.ippo import IPPO, TrainingCallback
from src.algos.seeding import derived_seeds
from src.algos.shield.assemble import build_shield
from src.algos.shield.bounds import calibration_factor, credible_delta
from src.algos.shield.calibration import (
    POLICY_STATE_KEY,
    AdaptiveAllowance,
    CalibrationMap,
    Certificate,
    OutcomeLedger,
    fit_calibration,
    fixed_sequence_test,
)
from src.algos.shield.critic import RiskCritic
from src.algos.shield.opponent_model import opponent_weight
from src.algos.shield.replay import TransitionReplay
from src.config.run import RunConfig
from src.config.shield import CALIBRATION_BINS, CALIBRATION_WINDOW
from src.core.logging import log
from src.envs.base import joint_observation
from src.records import EpisodeLog
from src.stats import rank_auc

__all__ = ["ShieldedIPPO", "constraint_outcomes"]


class ShieldedIPPO(IPPO):
    """IPPO with a shield; see the module docstring."""

    def __init__(self, config: RunConfig | Mapping[str, Any], env: Any) -> None:
        """Build the IPPO trainer, then the shield's models, replay and filter."""
        super().__init__(config, env)
        if self.config.shield is None:
            raise ValueError(f"algo {self.config.algo!r} has no shield section")
        self.shield_cfg = cfg = self.config.shield
        # Steps of the constraint: the certificate's episodes and the allowance's events.
        self.constraint_horizon = self.config.constraint_horizon_of(int(env.max_steps))
        if self.box is not None:
            cfg.check_box()
        parts = build_shield(
            cfg,
            n_agents=env.n_agents,
            obs_dim=env.obs_dim,
            n_actions=env.n_actions if self.box is None else self.box.dim,
            seed=self.seed,
            box=self.box,
        )
        self.shield = parts.shield
        self.world_model = parts.world_model
        self.opponent_model = parts.opponent_model
        self.fits = 0  # model fits so far (the calibration's confidence schedule counts them)
        self.learns_from_proposals = cfg.learn_from == "proposals"
        replay_seed, fit_seed = derived_seeds(self.seed + 1, 2)
        self.replay = TransitionReplay(
            capacity=cfg.replay_size,
            n_agents=env.n_agents,
            obs_dim=env.obs_dim,
            valid_fraction=cfg.valid_fraction,
            seed=replay_seed,
            action_dim=None if self.box is None else self.box.dim,
        )
        # Minibatches of model training draw from this generator only (not the policy's).
        self.fit_generator = torch.Generator().manual_seed(fit_seed)
        # The current rollout's transitions, stored in the replay by `after_update`.
        self._unstored: list[dict[str, torch.Tensor]] = []
        # Real outcomes of the executed decisions, the allowance that tracks the constraint in
        # training, and the certificate of the deployed shield.
        self.ledger = OutcomeLedger(horizon=cfg.horizon, capacity=CALIBRATION_WINDOW)
        start = cfg.max_risk
        self.adaptive = AdaptiveAllowance(
            value=start, target=cfg.max_risk, rate=cfg.adapt_rate, low=1e-4, high=1.0
        )
        self.shield.allowance = start
        self.certificate: Certificate | None = None
        self.episodes_seen = 0  # finished episodes the allowance has adapted to
        self.armed_at = 0  # first global env step of the armed shield
        self.make_calibration_env: Callable[[int, int], Any] = partial(_registry_env, self.config)
        self._set_armed(cfg.shield_patience == 0)
        self._armed_this_update = self.armed

    @property
    def critic(self) -> RiskCritic:
        """The shield's safety critic."""
        return self.shield.critic

    def _set_armed(self, armed: bool) -> None:
        """Arm the shield (it filters the proposals) or let it only watch."""
        self.armed = armed
        self.action_filter = self.shield if armed else Unfiltered()

    # ------------------------------------------------------------------ hooks

    def shaped_reward(self, reward: np.ndarray, intervened: np.ndarray) -> np.ndarray:
        """Each overridden agent-step costs `intervention_penalty` of reward."""
        penalty = self.shield_cfg.intervention_penalty
        return (reward - penalty * np.asarray(intervened, dtype=np.float32)).astype(np.float32)

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """With `imitation`: which agent-steps the shield overrode (their executed actions
        are the batch's `actions`)."""
        if self._imitates():
            batch["intervened"] = self.buffer.intervened.float()
        return batch

    def extra_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """With `imitation`: imitation * mean(-log pi(executed | obs) on overridden
        agent-steps, 0 elsewhere)."""
        if not self._imitates():
            return {}
        loss = -(batch["intervened"] * batch["new_log_probs"]).mean()
        return {M.SHIELD_IMITATION: self.shield_cfg.imitation * loss}

    def _imitates(self) -> bool:
        return self.shield_cfg.imitation > 0 and not self.learns_from_proposals

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        """Store the real transition (obs -> final_obs, executed actions) in the replay; open
        the executed decision in the outcome ledger and close what the step decided."""
        outcome = (
            (np.asarray(result.cost) > 0).any(axis=1),
            np.asarray(result.terminated).any(axis=1),
            np.asarray(result.truncated).any(axis=1),
        )
        self.ledger.open(self._decision_risk(obs))
        self.ledger.close(*outcome)
        self._unstored.append(
            {
                "obs": torch.as_tensor(joint_observation(obs), dtype=torch.float32),
                "action": self._replay_action(executed),
                "next_obs": torch.as_tensor(
                    joint_observation(result.final_obs), dtype=torch.float32
                ),
                "cost": torch.from_numpy((np.asarray(result.cost) > 0).astype(np.float32)),
                # Truncation by the hidden cap is not predictable from observations: only
                # termination is a "done" for the world model.
                "done": torch.from_numpy(
                    np.asarray(result.terminated).any(axis=1).astype(np.float32)
                ),
            }
        )

    def _replay_action(self, executed: np.ndarray) -> torch.Tensor:
        """The executed joint actions as the replay holds them: [E, A] int64, or the Box
        actions the env received as [E, A, k] float32."""
        if self.box is None:
            return torch.as_tensor(np.asarray(executed), dtype=torch.int64)
        flat = np.asarray(executed, dtype=np.float32).reshape(*executed.shape[:2], self.box.dim)
        return torch.from_numpy(flat)

    def _store_transitions(self) -> None:
        """Put the transitions observed since the last call into the replay, in step order (one
        write: the ring's bookkeeping per write costs more than its rows)."""
        if self._unstored:
            steps, self._unstored = self._unstored, []
            self.replay.add(**{k: torch.cat([s[k] for s in steps]) for k in steps[0]})

    def _decision_risk(self, obs: np.ndarray) -> np.ndarray:
        """The models' raw risk q of each copy's executed joint action [E] when the armed
        shield decided it (its latest decision); NaN while the shield only watches (the
        calibration is about the decisions the shield takes, not about the unshielded
        policy's)."""
        e = np.asarray(obs).shape[0]
        last = self.shield.last
        if self.armed and last is not None and last.raw.shape == (e,):
            return last.raw
        return np.full(e, math.nan)

    def _recalibrate(self, row: dict[str, float | None]) -> None:
        """The calibration (the map g on labelled decisions once there are enough, the
        held-out factor before) and the allowance adapted to the episodes finished since the
        last update that started with the shield armed."""
        cfg = self.shield_cfg
        risk, outcome = self.ledger.labelled()
        enough = risk.size >= 100 * CALIBRATION_BINS
        # How well the critic's q ranks the real outcomes, once the map has its decisions.
        row[M.SHIELD_AUC_TEAM] = rank_auc(risk, outcome) if enough else math.nan
        if enough:
            schedule = cfg.shield_credible_schedule
            delta = credible_delta(self.fits, delta=cfg.shield_credible_delta, schedule=schedule)
            mode, bins = cfg.shield_reward_mode, CALIBRATION_BINS
            self.shield.calibration = fit_calibration(
                risk, outcome, bins=bins, delta=float(delta), mode=mode
            )
            with torch.inference_mode():
                calibrated = self.shield.calibrate(torch.from_numpy(risk))
            row[M.SHIELD_CALIBRATION] = float(calibrated.mean()) / max(float(risk.mean()), 1e-12)
            row[M.SHIELD_REALIZED] = float(outcome.mean())
        else:
            self.shield.calibration = self._calibration()
            row[M.SHIELD_CALIBRATION] = self.shield.calibration
        row[M.SHIELD_LABELLED] = float(self.ledger.total)
        finished = self.history[self.episodes_seen :]
        self.episodes_seen = len(self.history)
        if self.armed:
            self.adaptive.update(
                constraint_outcomes(finished, since=self.armed_at, horizon=self.constraint_horizon)
            )
        self.shield.allowance = self.adaptive.value
        row[M.SHIELD_ALLOWANCE] = self.shield.allowance

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        """IPPO's training; then the certificate of the deployed shield."""
        super().train(callbacks=callbacks, progress=progress)
        if self.certificate is None:
            self.certificate = self.certify()
            self.shield.allowance = self.certificate.allowance
            log(
                f"{self.config.env_name} {self.config.algo} run {self.config.run_idx}: "
                f"{self.certificate.statement}",
                type="train",
            )

    def certify(self) -> Certificate:
        """Test the allowances `certify_multiples` x the allowance training settled at, most
        cautious first, on the calibration episodes (`calibration.fixed_sequence_test`), all
        of them in one batch of env copies."""
        cfg = self.shield_cfg
        seeds = cfg.calibration_seeds(self.config.run_idx)
        anchor = self._settled_allowance()
        allowances = [anchor * m for m in cfg.certify_multiples]
        test = partial(
            fixed_sequence_test,
            max_risk=cfg.max_risk,
            delta=cfg.certificate_delta,
            horizon=self.constraint_horizon,
            first_seed=seeds.start,
        )
        if not len(seeds):
            # `calibration_episodes: 0`: nothing tested, no certificate.
            return Certificate(
                certified=False,
                allowance=anchor,
                max_risk=cfg.max_risk,
                delta=cfg.certificate_delta,
                horizon=self.constraint_horizon,
                episodes=0,
                violations=-1,
                p_value=math.nan,
                first_seed=seeds.start,
            )
        from src.algos.policy import Actor

        actor = Actor(net=self.net, config=self.config, action_filter=self.shield, box=self.box)
        play = calibration_outcomes(
            actor,
            make_vec=lambda copies: self.make_calibration_env(copies, self.constraint_horizon),
            seeds=seeds,
            horizon=self.constraint_horizon,
        )

        def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
            started = time.perf_counter()
            violations, total = play(allowance, first, stop)
            log(
                f"calibration episodes {first}-{stop - 1} with allowance {allowance:.4g}: "
                f"{violations} violated, mean return {total / (stop - first):.1f} "
                f"({time.perf_counter() - started:.0f} s)",
                type="train",
            )
            return violations, total

        certificate = test(allowances, outcomes, episodes=len(seeds))
        self.shield.allowance = certificate.allowance
        self.net.train()
        return certificate

    def _settled_allowance(self) -> float:
        """The geometric mean of the allowance over the second half of the armed updates (the
        allowance oscillates around the level where training episodes violate at max_risk);
        the current allowance when no update was armed."""
        armed = [row for row in self.updates if row.get(M.SHIELD_ARMED)]
        values = [row[M.SHIELD_ALLOWANCE] for row in armed[len(armed) // 2 :]]
        values = [v for v in values if v is not None and v > 0]
        if not values:
            return self.shield.allowance
        return math.exp(sum(math.log(v) for v in values) / len(values))

    def after_update(self, update: int) -> dict[str, float | None]:
        """Fit the models, log the shield's counters, arm after `shield_patience` updates."""
        cfg = self.shield_cfg
        started = time.perf_counter()
        self._store_transitions()
        n_samples = math.ceil(cfg.model_epochs * self.replay.added_since_fit)
        self.replay.added_since_fit = 0
        fit = {"n_samples": n_samples, "batch_size": cfg.model_batch_size}
        fit["max_valid"] = cfg.max_valid_batch
        wm = self.world_model.fit(self.replay, **fit, generator=self.fit_generator)
        self.fits += 1
        row: dict[str, float | None] = {
            M.SHIELD_ARMED: float(self._armed_this_update),
            M.WM_TRAIN_LOSS: wm["train_loss"],
            M.WM_VALID_LOSS: wm["valid_loss"],
            M.WM_COST_ACCURACY: wm["cost_accuracy"],
        }
        if self.opponent_model is not None:
            om = self.opponent_model.fit(self.replay, **fit, generator=self.fit_generator)
            self.shield.opponent_weight = opponent_weight(
                cfg.shield_opponent_mode,
                self.shield.opponent_weight,
                valid_loss=om["valid_loss"],
                unexplained=om.get("valid_unexplained"),
                n_actions=self.env.n_actions,
            )
            row[M.SHIELD_OPPONENT_WEIGHT] = self.shield.opponent_weight
            row[M.OM_TRAIN_LOSS] = om["train_loss"]
            row[M.OM_VALID_LOSS] = om["valid_loss"]
            row[M.OM_VALID_ACCURACY] = om["valid_accuracy"]
        fitted = self.critic.fit(
            self.replay,
            self.world_model,
            steps=cfg.critic_steps,
            batch_size=cfg.critic_batch_size,
            generator=self.fit_generator,
        )
        row[M.CRITIC_LOSS] = fitted["loss"]
        self._recalibrate(row)
        stats = self.shield.stats
        self.shield.stats = type(stats)()
        row[M.SHIELD_INTERVENTIONS] = float(stats.interventions)
        row[M.SHIELD_NO_SAFE_ACTION] = float(stats.no_safe_action)
        row[M.SHIELD_MEAN_BOUND] = stats.mean_bound
        row[M.SHIELD_SECONDS] = stats.seconds
        row[M.SHIELD_MODEL_SECONDS] = time.perf_counter() - started
        # `update` is 0-based: after it, update + 1 updates are done.
        if not self.armed and update + 1 >= cfg.shield_patience:
            self.armed_at = self.vector_step * self.num_envs
        self._set_armed(update + 1 >= cfg.shield_patience)
        self._armed_this_update = self.armed
        # Undefined values (nothing to validate yet, no decision made) are nulls, as in IPPO.
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}

    def _calibration(self) -> float:
        """The calibration factor of the world model's team risk on held-out transitions.

        The shield's risk for a transition is the worst member's; on the latest held-out real
        transitions, k violations in n against the mean of those risks give
        `bounds.calibration_factor` at confidence 1 - delta_f, delta_f from
        `shield_credible_schedule` over the run's model fits (f = 1, 2, ...).
        """
        cfg = self.shield_cfg
        if self.replay.valid.size == 0:
            return 1.0
        valid = self.replay.valid.latest(cfg.max_valid_batch)
        members = self.world_model.ensemble_size
        with torch.no_grad():
            obs = valid["obs"].unsqueeze(0).expand(members, *valid["obs"].shape)
            action = valid["action"].unsqueeze(0).expand(members, *valid["action"].shape)
            _, risk, _ = self.world_model.predict(obs, action)
        predicted = risk.squeeze(-1).amax(dim=0).numpy()
        observed = valid["cost"].amax(dim=1).numpy()
        delta = float(
            credible_delta(
                self.fits,
                delta=cfg.shield_credible_delta,
                schedule=cfg.shield_credible_schedule,
            )
        )
        return calibration_factor(
            predicted=predicted, observed=observed, delta=delta, mode=cfg.shield_reward_mode
        )

    def extra_state(self) -> dict[str, Any]:
        """Models, optimisers, replay, generators and counters (between updates: a rollout's
        transitions not yet in the replay would be lost)."""
        if self._unstored:
            raise RuntimeError("the state is taken between updates, not during a rollout")
        state: dict[str, Any] = {
            "world_model": self.world_model.state_dict(),
            "world_model_extra": self.world_model.extra_state(),
            "replay": self.replay.state_dict(),
            "fit_generator": self.fit_generator.get_state(),
            "stats": vars(self.shield.stats).copy(),
            "armed": self.armed,
            "armed_this_update": self._armed_this_update,
            "fits": self.fits,
        }
        if self.opponent_model is not None:
            state["opponent_model"] = self.opponent_model.state_dict()
            state["opponent_model_extra"] = self.opponent_model.extra_state()
            state["opponent_weight"] = self.shield.opponent_weight
        if self.opponent_model is not None or self.box is not None:
            # The shield samples (completions of the others' actions, or Box candidates).
            state["shield_generator"] = self.shield.generator.get_state()
        state["critic"] = self.critic.state_dict()
        state["critic_extra"] = self.critic.extra_state()
        state["calibration"] = _calibration_state(self.shield.calibration)
        state["ledger"] = self.ledger.state_dict()
        state["allowance"] = self.adaptive.value
        state["episodes_seen"] = self.episodes_seen
        state["armed_at"] = self.armed_at
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""
        self.world_model.load_state_dict(state["world_model"])
        self.world_model.load_extra_state(state["world_model_extra"])
        self.replay.load_state_dict(state["replay"])
        self.fit_generator.set_state(state["fit_generator"])
        self.shield.stats = type(self.shield.stats)(**state["stats"])
        self._set_armed(bool(state["armed"]))
        self._armed_this_update = bool(state["armed_this_update"])
        self.fits = int(state["fits"])
        if self.opponent_model is not None:
            self.opponent_model.load_state_dict(state["opponent_model"])
            self.opponent_model.load_extra_state(state["opponent_model_extra"])
            self.shield.opponent_weight = float(state["opponent_weight"])
        if "shield_generator" in state:
            self.shield.generator.set_state(state["shield_generator"])
        self.critic.load_state_dict(state["critic"])
        self.critic.load_extra_state(state["critic_extra"])
        self.shield.calibration = _calibration_from(state["calibration"])
        self.ledger.load_state_dict(state["ledger"])
        self.adaptive.value = float(state["allowance"])
        self.shield.allowance = self.adaptive.value
        self.episodes_seen = int(state["episodes_seen"])
        self.armed_at = int(state["armed_at"])

    def algo_config(self) -> dict[str, Any]:
        """PPO's tunable hyperparameters (the shield's are in policy.pt's `shield` entry)."""
        return self.cfg.tunables()

    def extra_policy_state(self) -> dict[str, Any]:
        """The trained shield for policy.pt: config, model weights, the training cap, the
        calibration, the deployed allowance and the certificate (and the decentralised
        shield's opponent model and weight)."""
        saved: dict[str, Any] = {
            "config": self.shield_cfg.to_dict(),
            "world_model": self.world_model.state_dict(),
            "max_steps": int(self.env.max_steps),
            "armed": bool(self.armed),
        }
        if self.opponent_model is not None:
            saved["opponent_model"] = self.opponent_model.state_dict()
            saved["opponent_weight"] = float(self.shield.opponent_weight)
        saved["critic"] = self.critic.state_dict()
        saved["calibration"] = _calibration_state(self.shield.calibration)
        saved["allowance"] = float(self.shield.allowance)
        if self.certificate is not None:
            saved["certificate"] = self.certificate.to_dict()
        return {POLICY_STATE_KEY: saved}


def constraint_outcomes(episodes: Sequence[EpisodeLog], *, since: int, horizon: int) -> list[bool]:
    """Whether each episode that started at global step `since` or later violated within its
    first `horizon` steps (the constraint horizon), in order: the event the certificate tests,
    which the training allowance adapts to; a later violation does not count, an episode that
    ended earlier counts as safe after its end."""
    return [
        ep.violated and ep.first_violation_step <= horizon for ep in episodes if ep.t_start >= since
    ]


def _registry_env(config: RunConfig, copies: int, max_steps: int) -> Any:
    """A VectorEnv of the run's env from the registry, `copies` copies, cap `max_steps`."""
    from src.envs.registry import make_vector_env

    params = config.env.constructor_params(max_steps=max_steps)
    return make_vector_env(config.env_name, num_envs=copies, seed=None, **params)


def _calibration_state(calibration: float | CalibrationMap) -> float | dict[str, list[float]]:
    """The shield's calibration as plain values: the factor, or the map's knots and bounds."""
    if isinstance(calibration, CalibrationMap):
        return calibration.to_dict()
    return float(calibration)


def _calibration_from(state: Any) -> float | CalibrationMap:
    """The inverse of `_calibration_state`."""
    return CalibrationMap.from_dict(state) if isinstance(state, dict) else float(state)


def calibration_outcomes(
    actor: Any, *, make_vec: Callable[[int], Any], seeds: range, horizon: int
) -> Callable[[float, int, int], tuple[int, float]]:
    """`outcomes` of `calibration.fixed_sequence_test` for `actor`, a policy whose action filter
    is a `BudgetShield`: episodes i <= e < j with allowance a are one batch of j - i env
    copies reset from seeds[i:j], the actor seeded with seeds[i], `horizon` steps; returns
    (episodes with a violation, summed return). The evaluation's episode loop plays them;
    the certificate check (`benchmarks/certificate_check.py`) replays them with a loop of its
    own, so that a fault here shows as a certificate that does not reproduce."""
    from src.evaluation.episodes import first_violation_steps
    from src.evaluation.evaluate import collect_episodes

    def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
        actor.action_filter.allowance = allowance
        batch = collect_episodes(
            make_vec=make_vec,
            actor=actor,
            seeds=seeds[first:stop],
            max_steps=horizon,
            batch_size=stop - first,
            actor_seed=seeds[first],
        )
        violated = first_violation_steps(batch.violation, batch.length) > 0
        return int(violated.sum()), float(batch.reward.sum())

    return outcomes
