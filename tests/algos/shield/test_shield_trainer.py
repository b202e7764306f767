"""ShieldedIPPO on a toy VectorEnv: patience, overrides, logging, resume, deployed filter."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from src.algos import metrics as M
from src.algos.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from src.algos.ippo import IPPO
from src.algos.networks import ActorCritic
from src.algos.policy import load_actor
from src.algos.shield.assemble import load_shield
from src.algos.shield.trainer import ShieldedIPPO
from src.algos.train import train_run
from src.analysis.export import updates_table
from src.config.run import RunConfig, make_run_config
from src.config.shield import CALIBRATION_BINS, ShieldConfig
from src.stats import rank_auc
from tests.algos.shield.shield_toys import GridVectorEnv

SMALL = {
    "ensemble_size": 2,
    "wm_hidden": [32],
    "om_hidden": [16],
    "replay_size": 2000,
    "hidden_sizes": [16],
}


def run_config(*, patience: int, updates: int = 4, seed: int = 0, **base) -> dict:
    return make_run_config(
        env_name="tiny_grid",
        algo="shield",
        num_envs=2,
        timesteps=2 * 16 * updates,
        rollouts=16,
        learning_epochs=1,
        mini_batches=2,
        max_risk=0.1,
        seed_offset=seed,
        shield_patience=patience,
        algo_params=dict(SMALL),
        **base,
    )


class Stop(Exception):
    pass


class StopAfterTwo:
    """A training callback that checkpoints after the second update, then stops training."""

    def __init__(self, where):
        self.where = where

    def on_epoch_end(self, trainer, epoch):
        pass

    def on_update_end(self, trainer):
        if trainer.update == 2:
            save_checkpoint(trainer, self.where)
            raise Stop


def _trainer(config: dict) -> ShieldedIPPO:
    trainer = ShieldedIPPO(config, GridVectorEnv(num_envs=2, slip=0.1))
    # The calibration episodes run on the same toy task, with the cap the certificate asks.
    trainer.make_calibration_env = lambda copies, steps: GridVectorEnv(
        num_envs=copies, max_steps=steps, slip=0.1
    )
    return trainer


def _config(
    *,
    max_risk: float = 0.1,
    calibration_episodes: int = 6,
    patience: int = 1,
    updates: int = 4,
    seed: int = 3,
) -> dict:
    config = run_config(patience=patience, updates=updates, seed=seed)
    config["max_risk"] = max_risk
    config["algo_params"].update(
        critic_steps=2, horizon=5, calibration_episodes=calibration_episodes
    )
    return config


def test_passive_shield_trains_exactly_like_ippo() -> None:
    config = _config(patience=100, updates=3, seed=0, calibration_episodes=0)
    shielded = ShieldedIPPO(config, GridVectorEnv(num_envs=2))
    shielded.train(progress=False)
    plain_config = {**config, "algo": "ippo"}
    plain_config["algo_params"] = {"hidden_sizes": [16]}
    plain = IPPO(plain_config, GridVectorEnv(num_envs=2))
    plain.train(progress=False)
    for a, b in zip(shielded.net.parameters(), plain.net.parameters(), strict=True):
        assert torch.equal(a, b)
    for row in shielded.updates:
        assert row[M.SHIELD_ARMED] == 0.0
        assert row[M.SHIELD_INTERVENTIONS] == 0.0
        # The models train while the shield watches.
        assert row[M.WM_TRAIN_LOSS] is not None and row[M.CRITIC_LOSS] is not None
    assert all(ep.shield_interventions == 0 for ep in shielded.history)
    assert shielded.replay.train.size + shielded.replay.valid.size == 3 * 16 * 2


def test_no_override_before_patience_and_overrides_after() -> None:
    trainer = _trainer(_config(patience=2, updates=5, max_risk=0.001))
    trainer.train(progress=False)
    rows = trainer.updates
    assert [row[M.SHIELD_ARMED] for row in rows] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert all(row[M.SHIELD_INTERVENTIONS] == 0.0 for row in rows[:2])
    assert sum(row[M.SHIELD_INTERVENTIONS] for row in rows[2:]) > 0
    assert all(row[M.SHIELD_MEAN_BOUND] is None for row in rows[:2])
    assert all(0.0 <= row[M.SHIELD_MEAN_BOUND] <= 1.0 for row in rows[2:])
    for row in rows:
        for key in (M.SHIELD_NO_SAFE_ACTION, M.SHIELD_SECONDS, M.WM_VALID_LOSS, M.CRITIC_LOSS):
            assert key in row
    # The central shield has no opponent model.
    assert trainer.opponent_model is None and M.OM_VALID_LOSS not in rows[-1]
    assert sum(ep.shield_interventions for ep in trainer.history) > 0


def test_monotone_floor_weight_is_logged_and_never_increases() -> None:
    trainer = _trainer({**_config(), "algo": "shield_dec"})
    assert trainer.shield_cfg.shield_opponent_mode == "monotone_floor"
    trainer.train(progress=False)
    weights = [row[M.SHIELD_OPPONENT_WEIGHT] for row in trainer.updates]
    assert all(b <= a for a, b in itertools.pairwise(weights))
    # It follows w_t = min(w_{t-1}, clip(CE_valid / ln 5, 0, 1)) from the logged validation loss.
    expected = 1.0
    for row in trainer.updates:
        if row[M.OM_VALID_LOSS] is not None:
            expected = min(expected, min(1.0, row[M.OM_VALID_LOSS] / math.log(5)))
        assert row[M.SHIELD_OPPONENT_WEIGHT] == pytest.approx(expected)


def test_policy_file_rebuilds_the_deployed_shield(tmp_path: Path) -> None:
    config = _config(updates=3, max_risk=0.001, calibration_episodes=0)
    train_run(config, tmp_path, make_env=lambda c: GridVectorEnv(num_envs=2), progress=False)
    actor = load_actor(tmp_path, shielded=True)
    assert actor.shielded
    env = GridVectorEnv(num_envs=3)
    obs = env.reset(seed=5)
    actor.reset(3, 11)
    interventions = 0
    for step in range(1, 6):
        actions = actor.act(obs, np.full(3, step))
        interventions += int(actor.last_intervened.sum())
        obs = env.step(actions).obs
    assert interventions > 0
    base = load_actor(tmp_path, shielded=False)
    assert not base.shielded
    # The filter alone, from the policy file's content.
    state = torch.load(tmp_path / "policy.pt", weights_only=True)
    net = ActorCritic.from_policy_state(state)
    config = RunConfig.from_dict(state["config"])
    shield = load_shield(state, config, net=net)
    executed, intervened = shield.filter(
        obs, np.zeros((3, 2), dtype=np.int64), torch.zeros(3, 2, 5), np.ones(3, dtype=np.int64)
    )
    assert executed.shape == (3, 2) and intervened.dtype == bool
    with pytest.raises(ValueError, match="shield"):
        load_shield({k: v for k, v in state.items() if k != "shield"}, config, net=net)
    # A policy.pt of the old v0 shield (no critic) is refused, saying so.
    old = {**state, "shield": {k: v for k, v in state["shield"].items() if k != "critic"}}
    with pytest.raises(ValueError, match="no 'critic': a run of the old v0 shield"):
        load_shield(old, config, net=net)
    # A policy.pt whose shield config records keys that were removed is refused in one line
    # naming each, even at the behaviour that stayed.
    removed = {"risk_scope": "receding", "search": "coordinate", "backup": "coordinate"}
    recorded = {**state["shield"], "config": {**state["shield"]["config"], **removed}}
    with pytest.raises(ValueError) as refused:
        load_shield({**state, "shield": recorded}, config, net=net)
    message = str(refused.value)
    assert "\n" not in message and message.endswith(": a run of an older code version")
    assert all(f"{key}: removed (" in message for key in removed)


def test_unknown_algo_params_are_rejected() -> None:
    config = run_config(patience=1)
    config["algo_params"] = {**SMALL, "rollout": 3}
    with pytest.raises(ValueError, match="rollout"):
        ShieldedIPPO(config, GridVectorEnv(num_envs=2))
    # The old v0 shield's rollout settings are not the shield's any more.
    config["algo_params"] = {**SMALL, "rollout_count": 16}
    with pytest.raises(ValueError, match="rollout_count"):
        ShieldedIPPO(config, GridVectorEnv(num_envs=2))


@pytest.mark.parametrize("algo", ["shield", "shield_dec"])
def test_resume_is_bit_for_bit_with_the_ledger_the_allowance_and_the_certificate(tmp_path, algo):
    config = {**_config(), "algo": algo}
    full = _trainer(config)
    full.train(progress=False)
    first = _trainer(config)

    with pytest.raises(Stop):
        first.train(callbacks=[StopAfterTwo(tmp_path)], progress=False)
    resumed = _trainer(config)
    load_checkpoint(resumed, latest_checkpoint(tmp_path))
    resumed.train(progress=False)
    for a, b in zip(full.net.parameters(), resumed.net.parameters(), strict=True):
        assert torch.equal(a, b)
    assert full.ledger.total == resumed.ledger.total > 0
    assert np.array_equal(full.ledger.labelled()[0], resumed.ledger.labelled()[0])
    assert [row[M.SHIELD_ALLOWANCE] for row in full.updates] == [
        row[M.SHIELD_ALLOWANCE] for row in resumed.updates
    ]
    assert full.certificate == resumed.certificate
    assert full.shield.allowance == resumed.shield.allowance == full.certificate.allowance


def test_certificate_tests_the_ladder_and_deploys_its_allowance():
    # max_risk = 0.001: six episodes can never show it (P(Bin(6, 0.001) <= 0) > delta).
    config = _config(max_risk=0.001)
    trainer = _trainer(config)
    trainer.train(progress=False)
    certificate = trainer.certificate
    assert not certificate.certified and certificate.statement.startswith("no certificate")
    assert len(certificate.tested) == 1  # the sequence stops at its first failure
    anchor = trainer._settled_allowance()
    first = ShieldConfig.from_parts(trainer.config.base, config["algo_params"]).certify_multiples[0]
    assert first == 0.3  # the default ladder's most cautious rung
    assert certificate.allowance == pytest.approx(0.3 * anchor)
    assert trainer.shield.allowance == certificate.allowance
    # policy.pt carries the deployed allowance and the certificate; the loaded shield uses it.
    state = {"config": trainer.config.to_dict(), **trainer.policy_state()}
    shield = load_shield(state, trainer.config, net=trainer.net)
    assert shield.allowance == certificate.allowance
    assert state["shield"]["certificate"]["certified"] is False


def test_without_calibration_episodes_states_no_certificate():
    trainer = _trainer(_config(calibration_episodes=0))
    trainer.train(progress=False)
    assert trainer.certificate.episodes == 0 and not trainer.certificate.tested
    assert "no calibration episodes" in trainer.certificate.statement


@pytest.mark.parametrize("imitation", [0.0, 0.5])
def test_imitation_loss_is_the_executed_actions_log_likelihood_on_overrides(imitation):
    config = _config()
    config["algo_params"]["imitation"] = imitation
    trainer = _trainer(config)
    trainer._obs = trainer.env.reset(seed=[0, 1])
    trainer.collect_rollout()
    trainer.buffer.intervened[0, 0, 0] = True  # at least one override in the batch
    batch = trainer.buffer.flat(trainer.compute_advantages())
    # As IPPO's update passes it: log pi(action | obs) under the current weights, with graph.
    log_pi = torch.log_softmax(trainer.net.logits(batch["inputs"]), -1)
    new_log_probs = log_pi.gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
    losses = trainer.extra_losses({**batch, "new_log_probs": new_log_probs})
    if imitation == 0:
        assert "intervened" not in batch and losses == {}
        return
    with torch.no_grad():
        log_p = torch.log_softmax(trainer.net.logits(batch["inputs"]), -1)
    taken = log_p[torch.arange(len(batch["actions"])), batch["actions"]]
    mask = trainer.buffer.intervened.reshape(-1)
    expected = -imitation * taken[mask].sum() / len(mask)
    assert losses[M.SHIELD_IMITATION].item() == pytest.approx(expected.item(), rel=1e-5)
    # The loss pulls the policy towards the executed actions of overridden agent-steps only.
    losses[M.SHIELD_IMITATION].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.net.parameters())


@pytest.mark.parametrize("mode", ["model", "uniform", "monotone_floor"])
def test_shield_dec_fits_its_opponent_model_and_trusts_it_as_the_mode_says(tmp_path, mode):
    config = {**_config(), "algo": "shield_dec", "shield_opponent_mode": mode}
    trainer = _trainer(config)
    assert trainer.shield.config.coordination == "decentralised"
    assert trainer.opponent_model is trainer.shield.opponent_model is not None
    trainer.train(progress=False)
    weights = [row[M.SHIELD_OPPONENT_WEIGHT] for row in trainer.updates]
    assert all(row[M.OM_VALID_LOSS] is not None for row in trainer.updates[1:])
    if mode == "monotone_floor":
        assert all(b <= a for a, b in itertools.pairwise(weights)) and weights[-1] < 1.0
    else:
        assert weights == [{"model": 0.0, "uniform": 1.0}[mode]] * len(weights)
    # policy.pt rebuilds the same decentralised shield: same decisions on the same inputs
    # (allowance 0: every agent not on its safest action is moved).
    state = {"config": trainer.config.to_dict(), **trainer.policy_state()}
    shield = load_shield(state, trainer.config, net=trainer.net)
    assert shield.config.coordination == "decentralised"
    assert shield.opponent_weight == trainer.shield.opponent_weight
    env = GridVectorEnv(num_envs=4)
    obs = env.reset(seed=[1, 2, 3, 4])
    proposed = np.array([[0, 1], [2, 3], [4, 0], [1, 1]])
    logits = torch.zeros(4, 2, 5)
    decisions = []
    for judge in (trainer.shield, shield):
        judge.reset(4, 7)
        judge.allowance = 0.0
        decisions.append(judge.filter(obs, proposed, logits, np.ones(4, dtype=np.int64))[0])
    np.testing.assert_array_equal(*decisions)
    assert (decisions[0] != proposed).any()


def test_the_decentralised_filter_has_the_same_bits_in_blocks_of_any_size(monkeypatch):
    """The distinct joint actions judged in blocks (`decentral.JUDGED_BLOCK`), each with its
    copies' states only, give the bits of judging them at once, through the models' matmuls."""
    from src.algos.shield import decentral

    config = {**_config(), "algo": "shield_dec"}
    config["algo_params"]["wm_hidden"] = [32, 32]
    trainer = _trainer(config)
    trainer.train(progress=False)
    shield = trainer.shield
    copies = 30
    obs = GridVectorEnv(num_envs=copies).reset(seed=list(range(copies)))
    rng = np.random.default_rng(0)
    proposed = rng.integers(0, 5, (copies, 2))
    logits = torch.from_numpy(rng.standard_normal((copies, 2, 5)).astype(np.float32))
    decided = []
    for block in (10**6, 36, 12):
        monkeypatch.setattr(decentral, "JUDGED_BLOCK", block)
        shield.reset(copies, 7)
        shield.allowance = 0.0  # every proposal refused: every other action judged too
        executed, bound = shield.filter(obs, proposed, logits, np.ones(copies, dtype=np.int64))
        decided.append((executed, bound, shield.last.raw.copy()))
    for other in decided[1:]:
        for a, b in zip(decided[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def _label(ledger, risk: np.ndarray, outcome: np.ndarray) -> None:
    """Labelled decisions straight away: a violation now, or an episode that ends now."""
    ledger.open(risk)
    ledger.close(outcome, np.ones(len(risk), dtype=bool), np.zeros(len(risk), dtype=bool))


def test_the_auc_of_the_critics_q_is_logged_once_the_calibration_map_has_its_decisions():
    config = {**_config(), "algo": "shield_dec"}
    trainer = _trainer(config)
    trainer.train(progress=False)
    # Every metric it logs is a column of updates.parquet.
    table = updates_table(trainer.updates, trainer.config.to_dict())
    assert {M.CRITIC_LOSS, M.SHIELD_AUC_TEAM} <= set(table.column_names)
    rng = np.random.default_rng(0)
    outcome = rng.random(1000) < 0.2
    risk = rng.random(1000) * 0.1 + 0.05 * outcome
    enough = 100 * CALIBRATION_BINS
    for n, expected in ((enough - 1, None), (enough, rank_auc(risk[:enough], outcome[:enough]))):
        trainer.ledger = type(trainer.ledger)(horizon=5, capacity=1000)
        _label(trainer.ledger, risk[:n], outcome[:n])
        row: dict = {}
        trainer._recalibrate(row)
        if expected is None:
            assert math.isnan(row[M.SHIELD_AUC_TEAM])
        else:
            assert row[M.SHIELD_AUC_TEAM] == expected > 0.7
