"""benchmarks/shield_traps.py on a tiny trained shield run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import shield_traps
from src.algos.shield.diagnostics import clone_env
from src.seeds import TUNING
from tests.tiny_runs import train_tiny_shield

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with one tiny shield run."""
    root = tmp_path_factory.mktemp("results")
    train_tiny_shield(root)
    return root


def test_a_deployed_shield_is_traced_on_the_spent_tuning_seeds(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = results / "runs" / "hazard_grid" / "shield" / "run0"
    # At an allowance nothing meets, every decision falls back; with HOT at 0 each is judged
    # against every joint action, whose least q is at most the executed one's.
    monkeypatch.setattr(shield_traps, "HOT", 0.0)
    row = shield_traps.trace(run, episodes=3, allowance=1e-9)
    assert row["allowance"] == 1e-9 and row["episodes"] == 3 and 0 <= row["violations"] <= 3
    assert row["fallback_share"] == 1.0 and row["exhaustive"]
    assert row["hot"] > 0 and row["hot_way_out"] == 0.0
    assert 0.0 <= row["hot_real_way_out"] <= 1.0  # the witness, on clones of the true env
    assert row["hot_least_q"] <= row["hot_executed_q"] + 1e-6
    assert (row["seen_coming"] is None) == (row["violations"] == 0)
    deployed = shield_traps.trace(run, episodes=3)
    assert deployed["allowance"] > 1e-9 and deployed["fallback_share"] < 1.0
    assert TUNING.contains(TUNING.first + shield_traps.TRAPS_SHIFT + 2)
    monkeypatch.setattr(shield_traps, "BATCH", 2)  # two batches of copies: 2 episodes, then 1
    batched = shield_traps.trace(run, episodes=3)
    assert batched["episodes"] == 3 and 0 <= batched["violations"] <= 3
    assert 0.0 <= batched["fallback_share"] <= 1.0
    text = shield_traps.render_markdown(
        {
            "command": "python -m benchmarks.shield_traps --results r",
            "machine": {"date": "d", "platform": "p", "cpus": 2},
            "minutes": 0.1,
            "results": "r",
            "episodes": 3,
            "first_seed": TUNING.first + shield_traps.TRAPS_SHIFT,
            "rows": [row],
        }
    )
    assert "| hazard_grid | shield | 0 | 1e-09 |" in text and "40,900,000" in text


def test_the_one_step_risk_is_the_models_risk_of_one_step(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r is every member's q with one step left (the critic's V_0 = 0); with NEAR below 0
    every decision is compared with its step in the real env."""
    import torch

    from src.algos.policy import load_actor
    from src.envs.registry import make_vector_env

    run = results / "runs" / "hazard_grid" / "shield" / "run0"
    actor = load_actor(run)
    shield = actor.action_filter
    params = actor.config.env.constructor_params(max_steps=10)
    vec = make_vector_env("hazard_grid", num_envs=4, seed=None, **params)
    obs = vec.reset(seed=list(range(4)))
    actions = np.random.default_rng(0).integers(0, shield.n_actions, (4, shield.n_agents))
    r = shield_traps.one_step_risk(shield, obs, actions)
    with torch.inference_mode():
        q = shield.member_q(
            torch.as_tensor(obs, dtype=torch.float32).reshape(4, -1),
            torch.as_tensor(actions),
            torch.ones(4),
        )
    np.testing.assert_allclose(r, q.double().numpy(), rtol=1e-5, atol=1e-7)
    vec.close()
    monkeypatch.setattr(shield_traps, "NEAR", -1.0)
    row = shield_traps.trace(run, episodes=3)
    assert row["near"] >= 3 and row["near_worst_r"] >= row["near_mean_r"]
    assert 0.0 <= row["near_violated"] <= 1.0
    assert (row["near_violated"] == 0.0) == (row["violations"] == 0)


def test_bad_arguments_are_named_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, named in (
        (["--results", str(tmp_path), "--episodes", "0"], "expected an integer >= 1, got 0"),
        (
            ["--results", str(tmp_path), "--allowance", "2"],
            "expected an allowance in (0, 1], got 2",
        ),
        (["--results", str(tmp_path)], f"{tmp_path}: no runs/ folder"),
    ):
        with pytest.raises(SystemExit):
            shield_traps.main(argv)
        assert named in capsys.readouterr().err


def test_the_witness_goes_on_from_a_cloned_state_of_the_true_env() -> None:
    from src.envs.registry import make_vector_env

    # spread's steps are deterministic: a clone of a copy replays it under the same actions.
    env = make_vector_env("spread", num_envs=4, seed=None, n_agents=3, max_steps=50)
    env.reset(seed=[1, 2, 3, 4])
    for _ in range(3):
        env.step(np.zeros((4, 3), dtype=np.int64))
    clear = shield_traps.witness_clear(env, np.array([0, 2]), steps=10, seed=0)
    assert clear is not None and clear.shape == (2,) and clear.dtype == bool
    rows = np.array([1, 3])
    sim = clone_env(env, rows, seed=0)
    actions = np.array([[1, 2, 3], [4, 0, 1]])
    mine = sim.step(actions)
    full = np.zeros((4, 3), dtype=np.int64)
    full[rows] = actions
    theirs = env.step(full)
    np.testing.assert_array_equal(mine.obs, theirs.obs[rows])
    np.testing.assert_array_equal(mine.cost, theirs.cost[rows])
    env.close()
