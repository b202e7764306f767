"""benchmarks/certificate_check.py on a tiny trained shield run."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import src.algos.shield.trainer as trainer_module
from benchmarks import certificate_check
from benchmarks.common import markers
from src.algos.shield.calibration import Certificate, load_certificate
from src.algos.train import train_run
from src.core.io import save_to_file
from tests.algos.shield.shield_toys import ScriptedCalibrationEnv, scripted_calibration_trainer
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with one tiny shield run (six calibration episodes)."""
    root = tmp_path_factory.mktemp("results")
    config = tiny_run_config(
        "shield",
        shield_patience=1,
        max_risk=0.5,
        algo_params={"calibration_episodes": 6, "critic_steps": 2},
    )
    train_run(config, root / "runs" / "hazard_grid" / "shield" / "run0", progress=False)
    return root


def test_the_certificate_is_reproduced_and_checked_on_fresh_seeds(results: Path):
    run = certificate_check.shield_runs(results)
    assert run == [(results / "runs" / "hazard_grid" / "shield" / "run0").absolute()]
    record = certificate_check.check_run(run[0], episodes=8, first_seed=9_000_000)
    certificate = load_certificate(run[0])
    assert record["reproduced"] is True
    assert record["calibration"] == f"{certificate.violations}/{certificate.episodes}"
    assert 0 <= record["fresh_violations"] <= 8 and record["fresh_episodes"] == 8
    assert record["fresh_rate"] <= record["fresh_upper"] <= 1
    assert record["calibration_seconds"] > 0 and record["evaluation_seconds"] > 0


def test_the_command_checks_every_run_and_writes_the_section(results: Path, tmp_path: Path):
    path = tmp_path / "BENCHMARKS.md"
    argv = ["--results", str(results), "--episodes", "4", "--seed-offset", "9000000", "--write"]
    assert certificate_check.main(argv, out=tmp_path, path=path) == 0
    section = path.read_text().split(markers("certificate_check")[0])[1]
    assert section.startswith("\n## Certificates on fresh seeds\n")
    assert f"| {results}/runs/hazard_grid/shield/run0 |" in section and "| yes | " in section
    assert "| hazard_grid, shield | " in section and "| all | " in section
    saved = json.loads((tmp_path / "certificate_check.json").read_text())
    assert [r["fresh_episodes"] for r in saved["records"]] == [4]


def test_a_changed_certificate_is_not_reproduced(results: Path):
    run = certificate_check.shield_runs(results)[0]
    certificate = load_certificate(run)
    tested = [dict(rung, violations=rung["violations"] + 1) for rung in certificate.tested]
    forged = type(certificate)(**{**certificate.to_dict(), "tested": tested})
    same, _ = certificate_check.replay_calibration(run, forged)
    assert same is False


def test_every_shielded_algorithms_runs_are_checked(tmp_path: Path):
    for algo, run in [("shield", 0), ("shield_dec", 1), ("ippo", 0), ("shield_dec", 2)]:
        folder = tmp_path / "runs" / "intersection" / algo / f"run{run}"
        folder.mkdir(parents=True)
        if run != 2:  # run 2 is unfinished: no policy.pt
            (folder / "policy.pt").write_bytes(b"")
    runs = certificate_check.shield_runs(tmp_path)
    assert [run.relative_to(tmp_path.absolute()).parts[2:] for run in runs] == [
        ("shield", "run0"),
        ("shield_dec", "run1"),
    ]


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """The toy shield's small models on one thread (on a busy CPU, more only spin and wait)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _scripted_certificate(run_dir: Path) -> tuple[Certificate, list[dict[str, Any]]]:
    """policy.pt of an untrained toy shield certified on scripted calibration episodes
    (tests/algos/shield/shield_toys.py: rungs 0.02, 0.04, 0.08), and the trainer's plays."""
    trainer, plays = scripted_calibration_trainer()
    trainer.certificate = trainer.certify()
    save_to_file(trainer.policy_state(), run_dir, "policy.pt")
    return trainer.certificate, plays


def _replay(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, list[dict[str, Any]]]:
    """`replay_calibration` of the run on the scripted calibration episodes, and its plays
    (each reset with the allowance of the loaded shield)."""
    actors: list[Any] = []
    plays: list[dict[str, Any]] = []
    load = certificate_check.load_actor

    def load_actor(run_dir: Path, *, shielded: bool = True) -> Any:
        actors.append(load(run_dir, shielded=shielded))
        return actors[-1]

    def make_vector_env(name: str, *, num_envs: int, seed: object, **params: Any) -> Any:
        assert (name, seed) == ("tiny_grid", None)
        shield = actors[-1].action_filter
        return ScriptedCalibrationEnv(
            num_envs, int(params["max_steps"]), plays=plays, allowance=lambda: shield.allowance
        )

    monkeypatch.setattr(certificate_check, "load_actor", load_actor)
    monkeypatch.setattr(certificate_check, "make_vector_env", make_vector_env)
    same, _ = certificate_check.replay_calibration(run_dir, load_certificate(run_dir))
    return same, plays


@pytest.mark.usefixtures("one_torch_thread")
def test_the_replay_plays_the_trainers_calibration_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay resets the same seeds with the same allowances for 100 steps each, and
    reproduces the certificate."""
    certificate, trained = _scripted_certificate(tmp_path)
    assert certificate.certified and len(certificate.tested) == 3
    same, replayed = _replay(tmp_path, monkeypatch)
    assert same is True
    assert [play["seeds"] for play in replayed] == [play["seeds"] for play in trained]
    assert [play["seeds"][0] for play in replayed] == [5000, 5000, 5004, 5000, 5004]
    assert [play["allowance"] for play in replayed] == [play["allowance"] for play in trained]
    assert [play["steps"] for play in replayed] == [100] * 5


@pytest.mark.usefixtures("one_torch_thread")
def test_a_fault_in_the_trainers_calibration_episodes_is_not_reproduced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`calibration_outcomes` playing every episode one seed late, wherever it is imported,
    gives a certificate that the replay (its own episode loop) does not reproduce."""
    correct = trainer_module.calibration_outcomes

    def one_seed_late(actor: Any, *, make_vec: Any, seeds: range, horizon: int) -> Any:
        late = range(seeds.start + 1, seeds.stop + 1)
        return correct(actor, make_vec=make_vec, seeds=late, horizon=horizon)

    for module in list(sys.modules.values()):
        if getattr(module, "calibration_outcomes", None) is correct:
            monkeypatch.setattr(module, "calibration_outcomes", one_seed_late)
    certificate, trained = _scripted_certificate(tmp_path)
    assert trained[0]["seeds"] == [5001, 5002, 5003, 5004]
    # Seed 5000 (a violation at step 100 from 0.03 on) is missed: 0.04 passes on 4 episodes.
    assert (certificate.tested[1]["episodes"], certificate.tested[1]["violations"]) == (4, 0)
    same, _ = _replay(tmp_path, monkeypatch)
    assert same is False
