"""The central shield on Box actions (`src.algos.shield.box`): its models on float actions, its
candidate filter, and a run on `spread` with continuous actions that arms, certifies (or says
it has no certificate), is evaluated with the shield on and off, resumes bit for bit and gives
the same bits for the same seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from src.algos import metrics as M
from src.algos.actions import BoxActions
from src.algos.checkpoint import load_checkpoint, save_checkpoint
from src.algos.networks import gaussian_log_prob
from src.algos.policy import load_actor
from src.algos.shield.assemble import build_shield
from src.algos.shield.box import BoxShield
from src.algos.shield.critic import RiskCritic
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.world_model import TeamWorldModel
from src.algos.train import build_trainer, make_vector_env_for, train_run
from src.checks import ConfigError
from src.config.run import RunConfig
from src.config.shield import ShieldConfig
from src.core.io import load_from_file
from src.evaluation.evaluate import evaluate_run
from tests.algos.test_continuous import _config as _box_config
from tests.algos.test_continuous import _same_weights
from tests.envs.test_mamujoco import needs_mujoco

A, D, K = 2, 12, 5
BOX = BoxActions.from_space(spaces.Box(0.0, 1.0, (K,), np.float32), env="spread")
SHIELD_PARAMS = {
    "calibration_episodes": 4,
    "critic_steps": 2,
    "critic_batch_size": 8,
    "candidates": 8,
}


def _config(algo: str = "shield", **changes: Any) -> dict[str, Any]:
    """`algo` on spread with Box actions: 4 copies x 16 steps x 4 updates, armed after 1."""
    settings: dict[str, Any] = {
        "timesteps": 4 * 16 * 4,
        "learning_epochs": 1,
        "shield_patience": 1,
        "algo_params": dict(SHIELD_PARAMS),
    }
    settings.update(changes)
    return _box_config(algo, **settings)


def _shield_config(**changes: Any) -> ShieldConfig:
    values: dict[str, Any] = {
        "max_risk": 0.1,
        "shield_patience": 1,
        "shield_opponent_mode": "model",
        "shield_reward_mode": "bayesian",
        "shield_credible_delta": 0.05,
        "shield_credible_schedule": "summable",
        "wm_version": "v0",
        "om_version": "v0",
        "shield_version": "v0",
        "ensemble_size": 2,
        "wm_hidden": (16,),
        "critic_hidden": (16,),
        "candidates": 8,
    }
    values.update(changes)
    return ShieldConfig(**values)


def _replay(rows: int = 64) -> TransitionReplay:
    g = torch.Generator().manual_seed(0)
    replay = TransitionReplay(
        capacity=256, n_agents=A, obs_dim=D, valid_fraction=0.2, seed=1, action_dim=K
    )
    replay.add(
        obs=torch.randn(rows, A * D, generator=g),
        action=torch.rand(rows, A, K, generator=g),
        next_obs=torch.randn(rows, A * D, generator=g),
        cost=(torch.rand(rows, A, generator=g) < 0.2).float(),
        done=torch.zeros(rows),
    )
    return replay


# ------------------------------------------------------------------ models on float actions


def test_world_model_and_critic_take_float_actions():
    model = TeamWorldModel(
        n_agents=A,
        obs_dim=D,
        n_actions=K,
        ensemble_size=2,
        hidden=(16,),
        learning_rate=1e-3,
        seed=0,
        continuous=True,
    )
    replay = _replay()
    fitted = model.fit(
        replay,
        n_samples=64,
        batch_size=16,
        max_valid=32,
        generator=torch.Generator().manual_seed(2),
    )
    assert np.isfinite(fitted["train_loss"]) and np.isfinite(fitted["cost_loss"])
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(2, 3, A * D, generator=g)
    options = torch.rand(2, 3, 4, A, K, generator=g)
    with torch.inference_mode():
        next_obs, risk, done = model.predict_options(obs, options)
        # The options' first layers are the full layer's products on the float inputs.
        flat_obs = obs.unsqueeze(2).expand(2, 3, 4, A * D).reshape(2, 12, A * D).clone()
        one_next, one_risk, one_done = model.predict(flat_obs, options.reshape(2, 12, A, K))
    assert next_obs.shape == (2, 3, 4, A * D) and risk.shape == (2, 3, 4)
    assert torch.allclose(next_obs.reshape(2, 12, -1), one_next, atol=1e-5)
    assert torch.allclose(risk.reshape(2, 12), one_risk.squeeze(-1), atol=1e-5)
    assert torch.allclose(done.reshape(2, 12), one_done, atol=1e-5)
    # Another float action gives another risk: the actions enter as values, not as indices.
    assert not torch.equal(risk[:, :, 0], risk[:, :, 1])

    critic = RiskCritic(
        n_agents=A,
        obs_dim=D,
        n_actions=K,
        ensemble_size=2,
        hidden=(16,),
        learning_rate=1e-3,
        tau=0.1,
        horizon=5,
        seed=4,
        box=(torch.zeros(K), torch.ones(K)),
        candidates=6,
    )
    loss = critic.fit(
        replay, model, steps=2, batch_size=8, generator=torch.Generator().manual_seed(5)
    )
    assert np.isfinite(loss["loss"])
    with torch.inference_mode():
        q = critic.option_q(model, obs, options, torch.full((2, 3), 4.0))
        # The backup's least risk is over the recorded action and the uniform draws: never
        # above the recorded action's own q.
        start = options[:, :, 0]
        least = critic.backup_targets(
            model, obs, torch.full((2, 3), 5.0), start, torch.Generator().manual_seed(6)
        )
        recorded = critic.option_q(
            model, obs, start.unsqueeze(2), torch.full((2, 3), 4.0), target=True
        )
    assert q.shape == (2, 3, 4) and ((q >= 0) & (q <= 1)).all()
    assert (least <= recorded[..., 0] + 1e-6).all()


# ------------------------------------------------------------------ the candidate filter


def _hand_set_shield(risk_of: Any, **changes: Any) -> BoxShield:
    """A Box shield whose models' risk q is `risk_of(clipped joint actions [N, K, A, k])`."""
    config = _shield_config(**changes)
    parts = build_shield(config, n_agents=A, obs_dim=D, n_actions=K, seed=0, box=BOX)
    shield = parts.shield
    assert isinstance(shield, BoxShield)

    def raw_risk_options(
        joint: torch.Tensor, options: torch.Tensor, remaining: torch.Tensor, **_: Any
    ) -> torch.Tensor:
        return risk_of(options)

    shield.raw_risk_options = raw_risk_options  # type: ignore[method-assign]
    shield.allowance = 0.5
    shield.reset(num_envs=2, seed=9)
    return shield


def _policy(e: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((e, A, K), 0.5), torch.full((K,), np.log(0.3))


def test_the_filter_keeps_an_allowed_proposal_and_replaces_a_refused_one():
    # q: agent 0's first entry as the env receives it (clipped). Copy 0 proposes 0.2 (allowed),
    # copy 1 proposes 0.9 (refused).
    shield = _hand_set_shield(lambda options: options[..., 0, 0].double())
    judged: dict[str, torch.Tensor] = {}
    candidates = shield._candidates

    def seen(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        judged["options"], judged["q"] = candidates(*args)
        return judged["options"], judged["q"]

    shield._candidates = seen  # type: ignore[method-assign]
    proposed = np.full((2, A, K), 0.5, dtype=np.float32)
    proposed[0, 0, 0], proposed[1, 0, 0] = 0.2, 0.9
    obs = np.zeros((2, A, D), dtype=np.float32)
    executed, intervened = shield.filter(obs, proposed, _policy(), np.ones(2, dtype=np.int64))
    assert np.array_equal(executed[0], proposed[0]) and not intervened[0].any()
    assert not np.array_equal(executed[1], proposed[1]) and intervened[1].any()
    # The replacement is allowed, and of the allowed candidates the policy's most likely.
    assert np.clip(executed[1, 0, 0], 0, 1) <= 0.5
    assert shield.last.raw[1] <= 0.5 and not shield.last.fallback.any()
    assert shield.stats.decisions == 2 and shield.stats.no_safe_action == 0
    # Only the refused copy's candidates were judged: the proposal, 8 policy samples and the
    # cross-entropy search's safest joint action.
    options, q = judged["options"], judged["q"]
    assert options.shape == (1, 10, A, K) and q.shape == (1, 10)
    mean, log_std = _policy()
    log_p = gaussian_log_prob(mean[1], log_std, options[0]).sum(-1)
    best = torch.where(q[0] <= 0.5, log_p.double(), -np.inf).argmax()
    assert np.array_equal(executed[1], options[0, best].numpy())


def test_without_an_allowed_candidate_the_least_risk_one_is_the_fallback():
    # q falls with agent 1's second entry, and never reaches the allowance.
    shield = _hand_set_shield(lambda options: (1.0 - 0.1 * options[..., 1, 1]).double())
    proposed = np.full((2, A, K), 0.5, dtype=np.float32)
    executed, intervened = shield.filter(
        np.zeros((2, A, D), dtype=np.float32), proposed, _policy(), np.ones(2, dtype=np.int64)
    )
    assert shield.last.fallback.all() and shield.stats.no_safe_action == 2
    # The cross-entropy search's candidate pushes the entry towards the bound 1.
    assert (executed[:, 1, 1] > 0.9).all() and intervened[:, 1].all()


def test_the_filter_is_reproducible_from_its_seed():
    shield = _hand_set_shield(lambda options: options[..., 0, 0].double())
    proposed = np.full((2, A, K), 0.9, dtype=np.float32)
    args = (np.zeros((2, A, D), dtype=np.float32), proposed, _policy(), np.ones(2, dtype=np.int64))
    first = shield.filter(*args)[0]
    shield.reset(num_envs=2, seed=9)
    assert np.array_equal(first, shield.filter(*args)[0])


def test_each_agent_alone_keeps_an_allowed_own_action_and_replaces_a_refused_one():
    # The decentralised shield: q is agent 0's first entry. Agent 0's proposal 0.9 adds risk
    # over its own safest candidate and is replaced; agent 1's actions do not change q (no
    # excess), so it keeps its proposal whatever the others are predicted to do.
    shield = _hand_set_shield(
        lambda options: options[..., 0, 0].double(), coordination="decentralised"
    )
    assert shield.opponent_model is not None and shield.opponent_model.continuous
    proposed = np.full((2, A, K), 0.5, dtype=np.float32)
    proposed[:, 0, 0] = 0.9
    obs = np.random.default_rng(1).normal(size=(2, A, D)).astype(np.float32)
    executed, intervened = shield.filter(obs, proposed, _policy(), np.ones(2, dtype=np.int64))
    assert intervened[:, 0].all() and not intervened[:, 1].any()
    assert np.array_equal(executed[:, 1], proposed[:, 1])
    # Agent 0's replacement is within the allowance of its least risk (0 at best).
    assert (np.clip(executed[:, 0, 0], 0, 1) <= 0.5 + shield.last.safest).all()
    assert shield.stats.decisions == 2


def test_discrete_only_settings_are_refused_on_box_actions_in_one_line():
    with pytest.raises(ConfigError) as error:
        _shield_config(learn_from="proposals").check_box()
    assert str(error.value).startswith("learn_from='proposals': must be 'executed' on Box actions")
    assert "\n" not in str(error.value)
    config = _config(algo_params={**SHIELD_PARAMS, "learn_from": "proposals"})
    with pytest.raises(ConfigError, match="learn_from='proposals': must be 'executed' on Box"):
        build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))


# ------------------------------------------------------------------ training


@pytest.mark.parametrize("algo", ["shield", "shield_dec"])
def test_box_shield_run_arms_certifies_and_is_evaluated(tmp_path: Path, algo: str):
    run = tmp_path / "run"
    train_run(_config(algo), run, progress=False)
    rows = load_from_file(run, "updates.json")
    assert [row["shield/armed"] for row in rows] == [0.0, 1.0, 1.0, 1.0]
    assert sum(row["shield/interventions"] for row in rows) > 0
    if algo == "shield_dec":
        # The Gaussian opponent model is fitted, and monotone_floor's weight never rises.
        weights = [row[M.SHIELD_OPPONENT_WEIGHT] for row in rows]
        assert all(0.0 <= w <= 1.0 for w in weights) and weights == sorted(weights, reverse=True)
        assert all(np.isfinite(row[M.OM_VALID_LOSS]) for row in rows[1:])
    saved = load_from_file(run, "policy.pt")["shield"]
    certificate = saved["certificate"]
    assert certificate["episodes"] >= 2 and certificate["horizon"] == 10
    assert isinstance(certificate["certified"], bool)
    assert saved["config"]["candidates"] == 8

    actor = load_actor(run)
    assert actor.shielded and isinstance(actor.action_filter, BoxShield)
    actor.reset(num_envs=3, seed=7)
    obs = np.random.default_rng(0).normal(size=(3, A, D)).astype(np.float32)
    actions = actor.act(obs, np.ones(3, dtype=np.int64))
    assert actions.shape == (3, A, K) and actions.min() >= 0.0 and actions.max() <= 1.0
    assert actor.last_intervened.shape == (3, A)

    evaluation = evaluate_run(run, tmp_path / "eval.parquet")
    assert set(evaluation["shielded"]) == {True, False}
    assert (evaluation["n"] == 6).all()


@pytest.mark.parametrize("algo", ["shield", "shield_dec"])
def test_same_seed_same_bits_and_a_resumed_run_goes_on_as_if_never_stopped(
    tmp_path: Path, algo: str
):
    config = _config(algo)
    for name in ("a", "b"):
        train_run(config, tmp_path / name, progress=False)
    _same_weights(tmp_path / "a", tmp_path / "b")
    for name in ("history.json", "updates.json", "policy.pt"):
        first, second = (load_from_file(tmp_path / run, name) for run in ("a", "b"))
        if name == "updates.json":
            first, second = (
                [{k: v for k, v in row.items() if k not in M.WALL_CLOCK_KEYS} for row in rows]
                for rows in (first, second)
            )
        if name == "policy.pt":
            first, second = first["shield"]["certificate"], second["shield"]["certificate"]
        assert first == second, name

    run_config = RunConfig.from_dict(config)
    whole = build_trainer(run_config, make_vector_env_for(run_config))
    saved: list[Path] = []

    class AtUpdate2:
        def on_epoch_end(self, trainer: Any, epoch: int) -> None:
            pass

        def on_update_end(self, trainer: Any) -> None:
            if trainer.update == 2:
                saved.append(save_checkpoint(trainer, tmp_path / "checkpoints"))

    whole.train(callbacks=[AtUpdate2()], progress=False)
    resumed = build_trainer(run_config, make_vector_env_for(run_config))
    load_checkpoint(resumed, saved[0])
    assert resumed.update == 2 and resumed.armed
    resumed.train(progress=False)
    for key, tensor in whole.net.state_dict().items():
        assert torch.equal(tensor, resumed.net.state_dict()[key]), key
    for key, tensor in whole.world_model.state_dict().items():
        assert torch.equal(tensor, resumed.world_model.state_dict()[key]), key
    assert [e.to_dict() for e in whole.history] == [e.to_dict() for e in resumed.history]
    assert whole.certificate.to_dict() == resumed.certificate.to_dict()


@needs_mujoco
def test_box_shield_runs_on_mamujoco(tmp_path: Path):
    # The second Box task: HalfCheetah 2x3, actions in [-1, 1]^3 per agent.
    config = _box_config(
        "shield",
        env_name="mamujoco",
        num_envs=2,
        timesteps=2 * 16 * 3,
        learning_epochs=1,
        shield_patience=1,
        env_params={"max_steps": 16},
        final_policy_eval_episodes=2,
        final_policy_eval_horizons=[16],
        final_policy_eval_num_envs=2,
        algo_params={**SHIELD_PARAMS, "calibration_episodes": 2, "candidates": 4},
    )
    run = tmp_path / "run"
    train_run(config, run, progress=False)
    shield = load_from_file(run, "policy.pt")["shield"]
    assert shield["certificate"]["episodes"] == 2 and shield["config"]["candidates"] == 4
    evaluation = evaluate_run(run, tmp_path / "eval.parquet")
    assert set(evaluation["shielded"]) == {True, False}
