"""How the shield's trainer wires its certificate: the calibration episodes it plays (reset
seeds of each look and of each run, the constraint's horizon as their cap, the allowance of
each episode), the ladder it tests, the allowance it deploys and saves; the env copies' seeds.

The calibration env is `ScriptedCalibrationEnv` (tests/algos/shield/shield_toys.py): per reset
seed, a violation at step 100 from a given allowance on, or at step 101 with any.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from src.algos import metrics as M
from src.algos.policy import load_actor
from src.algos.shield.calibration import load_certificate
from src.algos.shield.trainer import _registry_env
from src.config.run import RunConfig
from src.core.io import save_to_file
from src.seeds import copy_seeds
from tests.algos.shield.shield_toys import scripted_calibration_trainer, shield_config
from tests.tiny_runs import tiny_run_config


def _updates(rows: list[tuple[float, float | None]]) -> list[dict[str, float | None]]:
    """Update rows with (armed, allowance)."""
    return [{M.SHIELD_ARMED: armed, M.SHIELD_ALLOWANCE: value} for armed, value in rows]


# Armed for the last four updates; the second half of those settles at sqrt(0.25 * 1.0) = 0.5.
SETTLED_AT_HALF = _updates([(0, 0.9), (0, 0.9), (1, 0.1), (1, 0.1), (1, 0.25), (1, 1.0)])

FIRST_HALF = [5000, 5001, 5002, 5003]
SECOND_HALF = [5004, 5005, 5006, 5007]
# Per run: (reset seeds, allowance) of every batch of calibration episodes, and the tested
# rungs (allowance, episodes, violations, p-value). Rungs 0.5 x (0.04, 0.08, 0.16); max_risk
# 0.5, delta 0.4, n = 8: the first look passes with 0 of 4 (0.5**4 / 0.2 = 0.3125); else the
# second with k <= 2 of 8 (P(Bin(8, 0.5) <= 1) / 0.8 = 9 / 256 / 0.8 = 0.0439453125,
# <= 2: 37 / 256 / 0.8 = 0.1806640625; <= 3: 93 / 256 / 0.8 = 0.4541015625 fails).
EXPECTED = {
    0: (
        [
            (FIRST_HALF, 0.02),
            (FIRST_HALF, 0.04),  # 5000 violates at step 100 (5001 at 101 does not count)
            (SECOND_HALF, 0.04),  # 5005 at 100 (5004 at 101 does not count)
            (FIRST_HALF, 0.08),
            (SECOND_HALF, 0.08),  # 5005 and 5006: 3 of 8, the sequence stops
        ],
        [(0.02, 4, 0, 0.3125), (0.04, 8, 2, 0.1806640625), (0.08, 8, 3, 0.4541015625)],
    ),
    1: (
        [
            ([5008, 5009, 5010, 5011], 0.02),
            ([5008, 5009, 5010, 5011], 0.04),  # 5009
            ([5012, 5013, 5014, 5015], 0.04),
            ([5008, 5009, 5010, 5011], 0.08),  # 5009
            ([5012, 5013, 5014, 5015], 0.08),  # 5014
        ],
        [(0.02, 4, 0, 0.3125), (0.04, 8, 1, 0.0439453125), (0.08, 8, 2, 0.1806640625)],
    ),
}


def _check_plays(plays: list[dict[str, Any]], run_idx: int) -> None:
    """The recorded batches are run `run_idx`'s, each played for exactly 100 steps."""
    expected, _ = EXPECTED[run_idx]
    assert [play["seeds"] for play in plays] == [seeds for seeds, _ in expected]
    assert [play["allowance"] for play in plays] == pytest.approx([a for _, a in expected])
    assert [play["cap"] for play in plays] == [100] * len(expected)
    assert [play["steps"] for play in plays] == [100] * len(expected)


@pytest.mark.parametrize("run_idx", [0, 1])
def test_certify_plays_each_look_on_its_own_seeds_to_step_100(run_idx: int) -> None:
    """The first look plays seeds s..s+3 and the second s+4..s+7 (s = 5000 + 8 r), every
    episode capped at step 100 (a violation at 101 is not counted), each rung's episodes with
    that rung's allowance; the ladder is anchored at the settled allowance 0.5; the shield
    deploys the last rung that passed."""
    trainer, plays = scripted_calibration_trainer(run_idx=run_idx)
    trainer.updates = list(SETTLED_AT_HALF)
    certificate = trainer.certify()
    _check_plays(plays, run_idx)
    _, rungs = EXPECTED[run_idx]
    tested = certificate.tested
    assert [(r["episodes"], r["violations"]) for r in tested] == [r[1:3] for r in rungs]
    assert [r["allowance"] for r in tested] == pytest.approx([r[0] for r in rungs])
    assert [r["p_value"] for r in tested] == pytest.approx([r[3] for r in rungs])
    assert [r["return"] for r in tested] == [200.0] * 3  # 2 agents x 100 steps
    deployed = {0: 0.04, 1: 0.08}[run_idx]
    assert certificate.certified and certificate.allowance == pytest.approx(deployed)
    assert (certificate.episodes, certificate.violations) == (8, 2)
    assert (certificate.first_seed, certificate.horizon) == (5000 + 8 * run_idx, 100)
    assert trainer.shield.allowance == pytest.approx(deployed)


def test_certify_plays_episodes_of_the_configs_constraint_horizon() -> None:
    """A 200-step episode with a 60-step constraint: every calibration episode is capped at 60
    steps (the scripted violations at steps 100 and 101 are then never seen), and the
    certificate names that horizon."""
    trainer, plays = scripted_calibration_trainer(constraint_horizon=60)
    trainer.updates = list(SETTLED_AT_HALF)
    certificate = trainer.certify()
    assert {play["cap"] for play in plays} == {60} and {play["steps"] for play in plays} == {60}
    assert certificate.horizon == 60 and certificate.violations == 0


def test_a_certificate_of_a_family_tests_at_its_share_of_delta() -> None:
    """Two certificates share delta 0.4: each tests at 0.2, so the first rung's first look
    (p = 0.3125) no longer decides and it plays all 8 episodes (0 violate, p = 1 / 256 / 0.8);
    the later rungs' p-values are as at 0.4, and the certificate records 0.2."""
    trainer, plays = scripted_calibration_trainer(family=2)
    trainer.updates = list(SETTLED_AT_HALF)
    certificate = trainer.certify()
    assert [len(play["seeds"]) for play in plays[:2]] == [4, 4]
    assert [play["allowance"] for play in plays[:2]] == pytest.approx([0.02, 0.02])
    tested = certificate.tested
    assert [(r["episodes"], r["violations"]) for r in tested] == [(8, 0), (8, 2), (8, 3)]
    assert [r["p_value"] for r in tested] == pytest.approx(
        [1 / 256 / 0.8, 0.1806640625, 0.4541015625]
    )
    assert certificate.delta == pytest.approx(0.2) and certificate.allowance == pytest.approx(0.04)


def test_a_constraint_longer_than_the_episode_is_refused() -> None:
    with pytest.raises(ValueError, match="constraint_horizon=101: at most the episode cap"):
        scripted_calibration_trainer(constraint_horizon=101)


def test_train_deploys_and_saves_the_last_passing_allowance_not_the_last_tested(
    tmp_path: Path,
) -> None:
    """After `train`, the shield and policy.pt hold 0.04 (the last rung that passed), not 0.08
    (the rung that failed and was played last)."""
    trainer, plays = scripted_calibration_trainer()
    trainer.train(progress=False)
    _check_plays(plays, 0)
    assert trainer.certificate.tested[-1]["allowance"] == pytest.approx(0.08)
    assert trainer.certificate.allowance == pytest.approx(0.04)
    assert trainer.shield.allowance == pytest.approx(0.04)
    save_to_file(trainer.policy_state(), tmp_path, "policy.pt")
    assert load_actor(tmp_path, shielded=True).action_filter.allowance == pytest.approx(0.04)
    assert load_certificate(tmp_path).allowance == pytest.approx(0.04)


def test_the_settled_allowance_is_the_geometric_mean_of_the_second_half_of_armed_updates() -> None:
    """Unarmed updates and the first half of the armed ones do not count; nulls are skipped;
    without an armed update, the current allowance."""
    trainer, _ = scripted_calibration_trainer()
    trainer.updates = list(SETTLED_AT_HALF)
    assert trainer._settled_allowance() == pytest.approx(0.5)  # sqrt(0.25 * 1.0)
    # Five armed updates: the last three, the null skipped: sqrt(0.05 * 0.4).
    trainer.updates = _updates(
        [(0, 0.9), (0, 0.9), (1, 0.1), (1, 0.3), (1, 0.05), (1, 0.4), (1, None)]
    )
    assert trainer._settled_allowance() == pytest.approx(0.1414213562)
    trainer.updates = _updates([(0, 0.9), (0, 0.7)])
    trainer.shield.allowance = 0.123
    assert trainer._settled_allowance() == 0.123


def test_runs_calibrate_on_consecutive_disjoint_blocks_of_seeds() -> None:
    """Run r's calibration seeds are offset + r n + i, i < n."""
    config = shield_config()
    assert (config.calibration_seed_offset, config.calibration_episodes) == (20_000_000, 200)
    assert config.calibration_seeds(0) == range(20_000_000, 20_000_200)
    assert config.calibration_seeds(1) == range(20_000_200, 20_000_400)
    assert config.calibration_seeds(2) == range(20_000_400, 20_000_600)
    small = shield_config(calibration_seed_offset=10, calibration_episodes=3)
    assert [list(small.calibration_seeds(r)) for r in range(3)] == [
        [10, 11, 12],
        [13, 14, 15],
        [16, 17, 18],
    ]


@pytest.mark.parametrize("num_envs", [1, 2, 32])
def test_env_copies_of_neighbouring_runs_reset_from_disjoint_seeds(num_envs: int) -> None:
    """The copies of runs seeded 0..7, 1000..1001 and 2**31..2**31+1 share no reset seed."""
    runs = [*range(8), 1000, 1001, 2**31, 2**31 + 1]
    seeds = [copy_seeds(seed, num_envs) for seed in runs]
    assert all(len(mine) == num_envs for mine in seeds)
    assert len({s for mine in seeds for s in mine}) == len(runs) * num_envs
    assert copy_seeds(3, num_envs) == copy_seeds(3, num_envs)
    # Above every other use's default range (src.seeds.TRAINING_FLOOR), within 32 bits.
    assert all(2**31 <= s < 2**32 for mine in seeds for s in mine)


def test_the_registrys_calibration_env_has_the_asked_copies_and_cap() -> None:
    """`make_calibration_env(copies, 100)` builds the run's env with 100 as its cap."""
    config = RunConfig.from_dict(tiny_run_config("shield"))
    vec = _registry_env(config, 3, 100)
    try:
        assert (vec.num_envs, vec.max_steps, vec.name) == (3, 100, "hazard_grid")
    finally:
        vec.close()
