"""Diagnostics of the shield: cost calibration and real vs imagined lookahead risk."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from src.algos.networks import ActorCritic
from src.algos.shield.diagnostics import (
    cost_calibration,
    model_lookahead_risk,
    risk_summary,
    true_lookahead_risk,
)
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.shield import Shield
from src.algos.shield.world_model import EnsembleWorldModel
from src.envs.hazard_grid import HazardGridConfig, HazardGridVectorEnv
from tests.algos.shield.shield_toys import N_ACTIONS, N_AGENTS, OBS_DIM, FixedPolicy, shield_config

STAY, UP, DOWN, LEFT, RIGHT = range(5)


def one_agent_next_to_a_hazard(slip_prob: float) -> HazardGridVectorEnv:
    """One agent at (2, 1) with the only hazard at (1, 1) above it, goal far away."""
    env = HazardGridVectorEnv(
        HazardGridConfig(
            n_agents=1,
            size=6,
            n_hazards=1,
            slip_prob=slip_prob,
            max_steps=50,
            slip_mode="any",  # a slip may push the agent into the hazard
        ),
        num_envs=1,
        seed=0,
    )
    env.reset()
    state = env.get_state()
    hazard = np.zeros((1, 36), dtype=bool)
    hazard[0, 1 * 6 + 1] = True
    state.update(cell=np.array([[2 * 6 + 1]]), goal=np.array([[5 * 6 + 5]]), hazard=hazard)
    env.set_state(state)
    return env


def policy(env: HazardGridVectorEnv) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(
        obs_dim=env.obs_dim, n_agents=env.n_agents, n_actions=env.n_actions, hidden_sizes=(8,)
    )


def test_true_risk_without_slip_is_exact_and_leaves_the_env_alone():
    env = one_agent_next_to_a_hazard(slip_prob=0.0)
    before = env.get_state()
    risk = true_lookahead_risk(env, policy(env), lookahead=1, rollouts=50, seed=3)
    assert risk.shape == (1, 1, 5)
    np.testing.assert_array_equal(risk[0, 0], [0.0, 1.0, 0.0, 0.0, 0.0])
    after = env.get_state()
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(value), err_msg=key)


def test_true_risk_with_slip_matches_the_slip_probability():
    # Slip 0.2 replaces the action by one of the other four uniformly: a non-hazard move
    # enters the hazard with probability 0.2 / 4, the move into it stays there with 0.8.
    env = one_agent_next_to_a_hazard(slip_prob=0.2)
    n = 4000
    risk = true_lookahead_risk(env, policy(env), lookahead=1, rollouts=n, seed=5)[0, 0]
    expected = np.array([0.05, 0.8, 0.05, 0.05, 0.05])
    tolerance = 4 * np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(risk - expected) < tolerance), risk
    # Deterministic given the seed.
    again = true_lookahead_risk(env, policy(env), lookahead=1, rollouts=n, seed=5)[0, 0]
    np.testing.assert_array_equal(risk, again)


def test_true_risk_rejects_envs_without_stream_keys_and_bad_sizes():
    class NoKeys:
        num_envs, n_agents, n_actions = 1, 1, 5

        def get_state(self) -> dict:
            return {"positions": np.zeros(1)}

    with pytest.raises(ValueError, match="native grid"):
        true_lookahead_risk(NoKeys(), None, lookahead=1, rollouts=1, seed=0)
    env = one_agent_next_to_a_hazard(slip_prob=0.0)
    with pytest.raises(ValueError, match="rollouts"):
        true_lookahead_risk(env, policy(env), lookahead=1, rollouts=0, seed=0)


class ConstantCost:
    """World model whose every agent has cost probability p at every step."""

    def __init__(self, p: float, members: int) -> None:
        self.ensemble_size = members
        self.p = p

    def predict(self, joint_obs, joint_action):
        m, n, _ = joint_obs.shape
        return joint_obs, torch.full((m, n, N_AGENTS), self.p), torch.zeros(m, n)


def test_model_risk_estimates_the_imagined_probability_and_restores_the_shield():
    config = shield_config(
        shield_opponent_mode="uniform",
        ensemble_size=2,
    )
    uniform = FixedPolicy([1.0 / N_ACTIONS] * N_ACTIONS)
    shield = Shield(
        config=config,
        world_model=ConstantCost(0.1, members=2),
        opponent_model=uniform,
        policy_logits=uniform,
        n_agents=N_AGENTS,
        obs_dim=OBS_DIM,
        n_actions=N_ACTIONS,
        max_steps=50,
        seed=0,
    )
    generator_state = shield.generator.get_state().clone()
    obs = np.zeros((3, N_AGENTS, OBS_DIM), dtype=np.float32)
    n = 2000
    risk = model_lookahead_risk(shield, obs, lookahead=2, rollouts=n)
    assert risk.shape == (3, N_AGENTS, N_ACTIONS)
    expected = 1 - 0.9**2  # a violation at either of the two steps
    assert np.all(np.abs(risk - expected) < 5 * math.sqrt(expected * (1 - expected) / n))
    assert shield.config is config
    assert shield.stats.decisions == 0 and shield.stats.wm_rows == 0
    assert torch.equal(shield.generator.get_state(), generator_state)


def test_cost_calibration_scores_the_validation_rows():
    a, d, n_act = 2, 3, 5
    replay = TransitionReplay(capacity=400, n_agents=a, obs_dim=d, valid_fraction=0.5, seed=0)
    rng = np.random.default_rng(0)
    rows = 300
    obs = torch.from_numpy(rng.normal(size=(rows, a * d)).astype(np.float32))
    replay.add(
        obs=obs,
        action=torch.from_numpy(rng.integers(0, n_act, size=(rows, a))),
        next_obs=obs,
        cost=torch.from_numpy((rng.random((rows, a)) < 0.3).astype(np.float32)),
        done=torch.zeros(rows),
    )
    model = EnsembleWorldModel(
        n_agents=a,
        obs_dim=d,
        n_actions=n_act,
        ensemble_size=2,
        hidden=(8,),
        learning_rate=1e-3,
        seed=0,
    )
    report = cost_calibration(model, replay)
    valid = replay.valid.latest(replay.valid.size)
    assert report["n"] == valid["cost"].numel()
    assert sum(row["count"] for row in report["reliability"]) == report["n"]
    base = float(valid["cost"].mean())
    assert report["base_rate"] == pytest.approx(base)
    assert report["brier_base_rate"] == pytest.approx(base * (1 - base), rel=1e-6)
    with torch.no_grad():
        _, prob = model._losses({k: v.unsqueeze(0).expand(2, *v.shape) for k, v in valid.items()})
    brier = float(((prob.mean(0) - valid["cost"]) ** 2).mean())
    assert report["brier"] == pytest.approx(brier, rel=1e-5)
    with pytest.raises(ValueError, match="bins"):
        cost_calibration(model, replay, bins=(0.0, 0.5, 0.5, 1.0))


def test_risk_summary_compares_best_and_low_risk_candidates():
    true = np.array([[0.0, 0.5, 0.01], [0.3, 0.2, 0.9]])
    model = np.array([[0.1, 0.4, 0.0], [0.3, 0.25, 1.0]])
    summary = risk_summary(true, model, max_risk=0.25)
    assert summary["decisions"] == 2
    assert summary["best_true_mean"] == pytest.approx(0.1)
    assert summary["best_true_share_below_2pct"] == 0.5
    assert summary["best_true_share_within_max_risk"] == 1.0
    assert summary["best_model_mean"] == pytest.approx(0.125)
    assert summary["low_candidates"] == 2
    assert summary["low_model_mean"] == pytest.approx(0.05)
    assert summary["low_model_share_above_5pct"] == 0.5
    with pytest.raises(ValueError, match="shape"):
        risk_summary(true, model[:1], max_risk=0.1)
