"""The batched shield filter: exact-model safety, candidate order, batching, coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from src.algos.shield.shield import Shield
from src.config.shield import ShieldConfig
from tests.algos.shield.shield_toys import (
    N_ACTIONS,
    N_AGENTS,
    OBS_DIM,
    ExactGridModel,
    FixedPolicy,
    TinyGrid,
    exact_risk,
    shield_config,
)


def make_config(**overrides) -> ShieldConfig:
    values = {"shield_opponent_mode": "uniform", "rollout_count": 200, "lookahead": 1}
    return shield_config(**{**values, **overrides})


def make_shield(config, world_model, *, own=None, other=None, seed=0, max_steps=50) -> Shield:
    uniform = [1.0 / N_ACTIONS] * N_ACTIONS
    return Shield(
        config=config,
        world_model=world_model,
        opponent_model=FixedPolicy(other or uniform),
        policy_logits=FixedPolicy(own or uniform),
        n_agents=N_AGENTS,
        obs_dim=OBS_DIM,
        n_actions=N_ACTIONS,
        max_steps=max_steps,
        seed=seed,
    )


def random_states(grid: TinyGrid, count: int, rng: np.random.Generator) -> np.ndarray:
    free = np.argwhere(~grid.hazard)
    picks = np.stack([rng.choice(len(free), size=2, replace=False) for _ in range(count)])
    return free[picks]  # [count, A, 2]


@pytest.mark.parametrize(
    ("lookahead", "own", "other"),
    [
        # L = 1 with uniform opponents: true risks are multiples of 1/5.
        (1, None, None),
        # L = 3, the agent stays after its first move and the opponent always moves right:
        # deterministic, risks are 0 or 1.
        (3, [1, 0, 0, 0, 0], [0, 0, 0, 0, 1]),
    ],
)
def test_exact_model_never_picks_an_unsafe_action_when_a_safe_one_exists(lookahead, own, other):
    grid = TinyGrid()
    model = ExactGridModel(grid)
    mode = "uniform" if other is None else "model"
    config = make_config(lookahead=lookahead, shield_opponent_mode=mode)
    shield = make_shield(config, model, own=own, other=other)
    rng = np.random.default_rng(0)
    pos = random_states(grid, 60, rng)
    obs = grid.observe(pos)
    logits = torch.from_numpy(rng.normal(size=(60, N_AGENTS, N_ACTIONS)).astype(np.float32))
    proposed = rng.integers(0, N_ACTIONS, size=(60, N_AGENTS))
    step = rng.integers(1, 50, size=60)
    executed, intervened = shield.filter(obs, proposed, logits, step)
    own_p = np.array(own or [0.2] * 5, dtype=float)
    other_p = np.array(other or [0.2] * 5, dtype=float)
    saw_refusal = saw_no_safe = 0
    for e in range(60):
        for a in range(N_AGENTS):
            risks = np.array(
                [exact_risk(grid, pos[e], a, c, lookahead, own_p, other_p) for c in range(5)]
            )
            safe = risks <= config.max_risk
            chosen = executed[e, a]
            assert intervened[e, a] == (chosen != proposed[e, a])
            if safe.any():
                assert safe[chosen], (e, a, risks, chosen)
                if safe[proposed[e, a]]:
                    assert chosen == proposed[e, a]
                else:
                    saw_refusal += 1
                    # The first safe candidate in order of policy probability.
                    order = [c for c in np.argsort(-logits[e, a].numpy(), kind="stable")]
                    order.remove(proposed[e, a])
                    assert chosen == next(c for c in order if safe[c])
            else:
                saw_no_safe += 1
                assert risks[chosen] == risks.min()
    assert saw_refusal > 0  # the test exercised the fallback to alternatives
    assert shield.stats.decisions == 60 * N_AGENTS
    assert shield.stats.interventions == int(intervened.sum())
    assert shield.stats.no_safe_action >= saw_no_safe


class CountingModel:
    """A world model with constant cost probability that records its batch shapes."""

    def __init__(self, cost_prob: float, members: int = 1) -> None:
        self.ensemble_size = members
        self.cost_prob = cost_prob
        self.shapes: list[tuple[int, ...]] = []

    def predict(self, joint_obs, joint_action):
        self.shapes.append(tuple(joint_obs.shape))
        m, n, _ = joint_obs.shape
        return joint_obs, torch.full((m, n, N_AGENTS), self.cost_prob), torch.zeros(m, n)


def test_one_model_call_per_lookahead_step_per_phase():
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(8, N_AGENTS, OBS_DIM)).astype(np.float32)
    logits = torch.zeros(8, N_AGENTS, N_ACTIONS)
    proposed = np.zeros((8, N_AGENTS), dtype=np.int64)
    step = np.ones(8, dtype=np.int64)
    # K_1 = rollout_count = 64 needs growth 1 (ln(1/delta_1) / max_risk = 35 < 64).
    common = {"lookahead": 3, "rollout_count": 64, "ensemble_size": 4, "screen_fraction": 1.0}
    common["rollout_growth"] = 1.0
    safe = CountingModel(0.0, members=4)
    shield = make_shield(make_config(**common), safe)
    executed, intervened = shield.filter(obs, proposed, logits, step)
    np.testing.assert_array_equal(executed, proposed)
    # Everything accepted: L calls, each with every (copy, agent) block's rollouts.
    assert len(safe.shapes) == 3
    assert safe.shapes[0] == (4, 8 * N_AGENTS * 64 // 4, N_AGENTS * OBS_DIM)
    assert not intervened.any()
    risky = CountingModel(1.0, members=4)
    shield = make_shield(make_config(**common), risky)
    _, intervened = shield.filter(obs, proposed, logits, step)
    # Everything refused: L calls for proposals, L for all alternatives of all agents at once.
    assert len(risky.shapes) == 6
    assert risky.shapes[3][1] == 8 * N_AGENTS * (N_ACTIONS - 1) * 64 // 4
    # No safe action anywhere: all bounds tie, so the proposal (most trusted) is kept.
    assert not intervened.any()
    assert shield.stats.no_safe_action == 8 * N_AGENTS


def test_screening_stops_hopeless_candidates_early():
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(8, N_AGENTS, OBS_DIM)).astype(np.float32)
    logits = torch.zeros(8, N_AGENTS, N_ACTIONS)
    proposed = np.zeros((8, N_AGENTS), dtype=np.int64)
    step = np.ones(8, dtype=np.int64)
    # K_1 = rollout_count = 64 needs growth 1 (ln(1/delta_1) / max_risk = 35 < 64).
    common = {"lookahead": 2, "rollout_count": 64, "ensemble_size": 4, "screen_fraction": 0.25}
    common["rollout_growth"] = 1.0
    safe = CountingModel(0.0, members=4)
    make_shield(make_config(**common), safe).filter(obs, proposed, logits, step)
    # Clean screening (16 rollouts), then the remaining 48: every accepted block saw all 64.
    assert [s[1] * 4 // (8 * N_AGENTS) for s in safe.shapes] == [16, 16, 48, 48]
    risky = CountingModel(1.0, members=4)
    shield = make_shield(make_config(**common), risky)
    shield.filter(obs, proposed, logits, step)
    # Refused at screening: proposals and then alternatives cost 16 rollouts each.
    assert [s[1] * 4 // 16 for s in risky.shapes] == [16, 16, 16 * 4, 16 * 4]
    assert shield.stats.no_safe_action == 8 * N_AGENTS


def test_violation_counts_are_binomial_and_bounds_cover_p():
    """Toy model with known per-rollout violation probability p (L = 1)."""
    p, delta, n = 0.05, 0.1, 128
    config = make_config(
        rollout_count=n,
        shield_reward_mode="frequentist",
        shield_credible_schedule="constant",
        shield_credible_delta=delta,
        max_risk=0.2,
    )
    model = CountingModel(p, members=2)
    shield = make_shield(config, model)
    blocks = 4000
    k = shield._count_violations(
        torch.zeros(blocks, N_AGENTS * OBS_DIM),
        torch.zeros(blocks, dtype=torch.int64),
        torch.zeros(blocks, dtype=torch.int64),
        n,
    )
    assert abs(k.mean() - n * p) < 4 * math.sqrt(n * p * (1 - p) / blocks)
    assert abs(k.var() - n * p * (1 - p)) < 0.15 * n * p * (1 - p)
    bounds = shield.bounds(k, n, np.ones(blocks, dtype=np.int64))
    rate = (bounds < p).mean()
    assert rate <= delta + 3 * math.sqrt(delta * (1 - delta) / blocks)


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_sampling_follows_the_uniform_mixture(weight):
    shield = make_shield(make_config(), CountingModel(0.0))
    logits = torch.tensor([[[2.0, 0.0, -1.0, -float("inf"), 0.5]]]).expand(200_000, 1, 5)
    logits = torch.cat([logits, logits], dim=1)  # [N, A=2, n]
    mix = torch.full((200_000, 2, 1), weight)
    mix[:, 1] = 0.0  # the second agent follows the logits alone
    mixture = (1.0 - mix, mix * torch.arange(1, 6) / 5) if weight > 0 else None
    u = torch.rand(200_000, 2, 1, generator=torch.Generator().manual_seed(0))
    actions = shield._sample(logits.clone(), u, mixture)
    softmax = torch.softmax(logits[0, 0], -1)
    expected = [weight / 5 + (1 - weight) * softmax, softmax]
    for agent in range(2):
        freq = torch.bincount(actions[:, agent], minlength=5).float() / 200_000
        torch.testing.assert_close(freq, expected[agent], atol=4e-3, rtol=0)


def test_lookahead_counts_a_violation_once_and_stops_at_done():
    class DoneAfterFirst:
        ensemble_size = 1

        def predict(self, joint_obs, joint_action):
            m, n, _ = joint_obs.shape
            return joint_obs, torch.full((m, n, N_AGENTS), 0.5), torch.ones(m, n)

    shield = make_shield(make_config(lookahead=10, rollout_count=2000), DoneAfterFirst())
    k = shield._count_violations(
        torch.zeros(1, N_AGENTS * OBS_DIM),
        torch.zeros(1, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64),
        2000,
    )
    # The done after step 1 stops the rollout: P(violation) = 0.5, not 1 - 0.5^10.
    assert abs(k[0] / 2000 - 0.5) < 0.05


def test_filter_is_deterministic_given_the_seed():
    grid = TinyGrid()
    rng = np.random.default_rng(2)
    obs = grid.observe(random_states(grid, 10, rng))
    logits = torch.from_numpy(rng.normal(size=(10, 2, 5)).astype(np.float32))
    proposed = rng.integers(0, 5, size=(10, 2))
    step = np.full(10, 3)
    outs = [
        make_shield(
            make_config(lookahead=2, rollout_count=40), ExactGridModel(grid), seed=7
        ).filter(obs, proposed, logits, step)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(outs[0][0], outs[1][0])


def test_filter_rejects_bad_inputs():
    shield = make_shield(make_config(), CountingModel(0.0))
    obs = np.zeros((2, N_AGENTS, OBS_DIM), dtype=np.float32)
    logits = torch.zeros(2, N_AGENTS, N_ACTIONS)
    ok = np.zeros((2, N_AGENTS), dtype=np.int64)
    step = np.ones(2, dtype=np.int64)
    with pytest.raises(ValueError, match="obs"):
        shield.filter(obs[:, :1], ok, logits, step)
    with pytest.raises(ValueError, match="proposed"):
        shield.filter(obs, ok + N_ACTIONS, logits, step)
    with pytest.raises(ValueError, match="logits"):
        shield.filter(obs, ok, logits[..., :2], step)
    with pytest.raises(ValueError, match="episode_step"):
        shield.filter(obs, ok, logits, step * 0)
