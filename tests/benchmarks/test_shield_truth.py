"""The shield-truth benchmark: true risks of hand-made states, and a check of a tiny shield run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks import shield_truth
from benchmarks.common import markers
from src.algos.policy import load_actor
from src.algos.shield import diagnostics
from src.algos.shield.diagnostics import backup_actions, true_deployed_risk, true_plan_risk
from src.algos.shield.search import joint_actions
from src.algos.train import train_run
from src.envs import make_vector_env
from tests.tiny_runs import tiny_run_config

# 5x5 hazard_grid, cells row-major: one hazard at (1, 1); agent 0 at (1, 2) next to it, agent 1
# far away in a corner. A slip keeps the agent in place.
SIZE, HAZARD, NEXT_TO_HAZARD, CORNER = 5, 6, 7, 20
LEFT, STAY = 3, 0
SLIP = 0.5


def _next_to_a_hazard(copies: int) -> Any:
    """`copies` copies of the hand-made state: stepping left is a violation unless it slips."""
    env = make_vector_env(
        "hazard_grid",
        num_envs=copies,
        n_agents=2,
        size=SIZE,
        n_hazards=1,
        slip_prob=SLIP,
        slip_mode="stay",
        max_steps=50,
    )
    env.reset(seed=list(range(copies)))
    state = env.get_state()
    hazard = np.zeros((copies, SIZE * SIZE), dtype=bool)
    hazard[:, HAZARD] = True
    state.update(
        hazard=hazard,
        cell=np.tile([NEXT_TO_HAZARD, CORNER], (copies, 1)),
        goal=np.tile([24, 4], (copies, 1)),
        at_goal=np.zeros((copies, 2), dtype=bool),
        vel=np.zeros((copies, 2, 2), dtype=np.float32),
        steps=np.full(copies, 5),
    )
    env.set_state(state)
    return env


class PushLeft:
    """A follower that always steps agent 0 left (into the hazard) and keeps agent 1 still."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, np.ndarray]] = []
        self.num_envs = 0

    def reset(self, num_envs: int, seed: int) -> None:
        self.num_envs = num_envs

    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        self.calls.append((len(obs), np.asarray(episode_step).copy()))
        return np.tile([LEFT, STAY], (self.num_envs, 1))


def test_deployed_risk_of_a_hand_made_state_is_the_slips_closed_form() -> None:
    env = _next_to_a_hazard(3)
    rollouts = 4000
    follower = PushLeft()
    # Step left within 1 and 3 steps: 1 - SLIP ** w; stay first, then left twice: 1 - SLIP ** 2.
    risk = true_deployed_risk(
        env,
        follower,
        np.array([[LEFT, STAY], [LEFT, STAY], [STAY, STAY]]),
        horizon=np.array([1, 3, 3]),
        episode_step=np.array([6, 6, 6]),
        rollouts=rollouts,
        seed=1,
        follower_seed=2,
    )
    expected = np.array([1 - SLIP, 1 - SLIP**3, 1 - SLIP**2])
    assert np.abs(risk - expected).max() < 4 * np.sqrt(0.25 / rollouts)
    # The follower acted on every clone from the step after the first, for the longest window.
    assert [n for n, _ in follower.calls] == [3 * rollouts] * 2
    assert (follower.calls[0][1] == 7).all() and (follower.calls[1][1] == 8).all()
    assert env.get_state()["cell"].tolist() == [[NEXT_TO_HAZARD, CORNER]] * 3  # not changed


def test_backup_risk_counts_only_the_window() -> None:
    env = _next_to_a_hazard(2)
    rollouts = 4000
    # One-step windows never consult the backup: the risk is the first action's alone.
    risk = true_plan_risk(
        env, None, np.array([[LEFT, STAY], [STAY, STAY]]), horizon=1, rollouts=rollouts, seed=3
    )
    assert abs(risk[0] - (1 - SLIP)) < 4 * np.sqrt(0.25 / rollouts) and risk[1] == 0.0


def test_sampled_steps_leave_every_window_before_the_cap() -> None:
    steps = shield_truth.sample_steps(horizon=10, count=9, cap=100)
    assert steps[0] == 1 and steps[-1] == 91 and len(steps) == 9
    assert (np.diff(steps) > 0).all()
    # More steps asked than there are: each step once.
    assert shield_truth.sample_steps(horizon=10, count=20, cap=20).tolist() == list(range(1, 12))
    with pytest.raises(ValueError, match="horizon <= 100"):
        shield_truth.sample_steps(horizon=101, count=2, cap=100)
    # A 200-step constraint leaves windows up to step 191.
    assert shield_truth.sample_steps(horizon=10, count=2, cap=200)[-1] == 191


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained shield run on hazard_grid (two policy updates, horizon 4)."""
    return _tiny_run(tmp_path_factory.mktemp("truth") / "run0", "shield")


def _tiny_run(path: Path, algo: str, **params: Any) -> Path:
    """Train a tiny run of `algo` on hazard_grid into `path` (horizon 4, extra shield
    `params`)."""
    config = tiny_run_config(
        algo,
        shield_patience=1,
        algo_params={
            "calibration_episodes": 2,
            "certify_multiples": [1.0],
            "critic_steps": 2,
            "horizon": 4,
            **params,
        },
    )
    train_run(config, path, progress=False)
    return path


def test_check_run_of_a_tiny_run(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resets: list[tuple[int, int, int]] = []  # (actor, num_envs, seed)
    loaded: list[Any] = []

    def spy(run: Path, *, shielded: bool = True) -> Any:
        actor = load_actor(run, shielded=shielded)
        index, reset = len(loaded), actor.reset
        loaded.append(actor)

        def record(num_envs: int, seed: int) -> None:
            resets.append((index, num_envs, seed))
            reset(num_envs, seed)

        actor.reset = record
        return actor

    monkeypatch.setattr(shield_truth, "load_actor", spy)
    episodes, rollouts = 3, 6
    record = shield_truth.check_run(
        run_dir, episodes=episodes, steps=3, rollouts=rollouts, backup_rollouts=4, seed=0
    )
    steps = record["steps"]
    # Decisions with a whole 4-step window before the run's constraint horizon, its episode
    # cap of 10 steps: 1..7.
    assert steps == [1, 4, 7] and record["horizon"] == 4
    # Every copy is a decision at every sampled step.
    assert record["decisions"] == episodes * len(steps)
    per = {k: np.asarray(v, dtype=np.float64) for k, v in record["per_decision"].items()}
    assert all(len(v) == record["decisions"] for v in per.values())
    # The deployed truth ran on a second actor, reset once per sampled step for every clone.
    assert len(loaded) == 2 and loaded[0].action_filter is not loaded[1].action_filter
    assert [(i, n) for i, n, _ in resets] == [(0, episodes)] + [(1, episodes * rollouts)] * 3
    assert len({seed for _, _, seed in resets}) == 4
    for truth, n in (("deployed", rollouts), ("backup", 4)):
        estimate, low = per[truth], per[f"{truth}_low"]
        assert ((estimate >= 0) & (estimate <= 1)).all()
        assert np.allclose(estimate * n, np.rint(estimate * n))  # counts over n clones
        assert ((low >= 0) & (low <= estimate)).all()
        assert 0 <= record[f"{truth}_exceeds"] <= record[f"{truth}_exceeds_point"] <= 1
        assert record[f"{truth}_mean"] == pytest.approx(estimate.mean())
    assert ((per["certified"] > 0) & (per["certified"] <= 1)).all()
    assert record["certified_mean"] == pytest.approx(per["certified"].mean())
    assert 0 <= record["fallbacks"] <= record["decisions"]
    assert record["bound_gap"] < 1e-5  # the reported U is the models' g(q)


def test_check_run_of_a_decentralised_shield(tmp_path: Path) -> None:
    """Its q assumes the team's safest continuation, as the central one's: both truths are
    measured; its U is not recomputed (not a function of the joint action alone)."""
    run = _tiny_run(tmp_path / "run0", "shield_dec")
    record = shield_truth.check_run(run, episodes=2, steps=2, rollouts=4, backup_rollouts=4, seed=0)
    per = {k: np.asarray(v, dtype=np.float64) for k, v in record["per_decision"].items()}
    assert record["decisions"] == 4 and record["backup_rollouts"] == 4
    assert np.isnan(record["bound_gap"])
    for truth in ("deployed", "backup"):
        assert ((per[truth] >= 0) & (per[truth] <= 1)).all()
        assert record[f"{truth}_mean"] == pytest.approx(per[truth].mean())


def test_backup_actions_share_one_call_per_distinct_state(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    actor = load_actor(run_dir, shielded=True)
    shield = actor.action_filter
    params = actor.config.env.constructor_params(max_steps=10)
    env = make_vector_env("hazard_grid", num_envs=3, **params)
    obs = env.reset(seed=[0, 1, 2])
    rows = obs[[0, 1, 0, 2, 1]]
    remaining = np.array([4, 4, 4, 4, 2])
    every = joint_actions(shield.n_agents, shield.n_actions)
    k = every.shape[0]
    with torch.inference_mode():
        joint = torch.from_numpy(rows.reshape(len(rows), -1))
        risks = shield.certified(
            joint.repeat_interleave(k, dim=0),
            every.repeat(len(rows), 1),
            torch.from_numpy(remaining).float().repeat_interleave(k),
        ).view(len(rows), k)
    expected = every[risks.argmin(dim=1)].numpy()
    # Four distinct (state, remaining) rows, judged two at a time.
    monkeypatch.setattr(diagnostics, "BACKUP_BLOCK_ROWS", 2 * k)
    assert (backup_actions(shield, rows, remaining) == expected).all()


def test_write_replaces_the_section(run_dir: Path, tmp_path: Path) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    start, end = markers("shield_truth")
    markdown.write_text(f"# Benchmarks\n\n{start}\nold table\n{end}\n\nafter\n")
    args = ["--runs", str(run_dir), str(run_dir), "--episodes", "2", "--steps", "1"]
    args += ["--rollouts", "3", "--backup-rollouts", "0", "--write"]
    assert shield_truth.main(args, out=tmp_path / "out", path=markdown) == 0
    text = markdown.read_text()
    assert "old table" not in text and text.endswith("after\n")
    block = text.split(start)[1].split(end)[0]
    assert "python -m benchmarks.shield_truth --runs" in block and "--rollouts 3" in block
    assert (
        block.count("| hazard_grid |") == 2
        and "| **2 runs pooled** | **hazard_grid, shield** | 4 |" in block
    )
    saved = json.loads((tmp_path / "out" / "shield_truth.json").read_text())
    assert saved["pooled"][0]["decisions"] == 4 and len(saved["records"]) == 2
