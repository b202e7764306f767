"""benchmarks/ladder_depth.py on a tiny trained shield run and its ippo run."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from benchmarks import certificate_check, ladder_depth
from benchmarks.common import markers, play, violating
from src.algos.policy import load_actor
from src.algos.shield.calibration import load_certificate
from src.algos.train import train_run
from src.containment import ContainmentError
from src.seeds import CHECK_STRIDE, LADDER_DEPTH, RESERVED, SeedUse
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with a tiny shield run (six calibration episodes) and the ippo run of
    the same env and index."""
    root = tmp_path_factory.mktemp("results")
    runs = root / "runs" / "hazard_grid"
    shield = tiny_run_config(
        "shield",
        shield_patience=1,
        max_risk=0.5,
        algo_params={"calibration_episodes": 6, "critic_steps": 2},
    )
    train_run(shield, runs / "shield" / "run0", progress=False)
    train_run(tiny_run_config("ippo"), runs / "ippo" / "run0", progress=False)
    return root


def test_each_rung_is_the_multiple_of_the_training_allowance_played_on_the_seeds(results: Path):
    run = results / "runs" / "hazard_grid" / "shield" / "run0"
    seeds = range(LADDER_DEPTH.first, LADDER_DEPTH.first + 6)
    record = ladder_depth.measure_run(
        run, results / "runs" / "hazard_grid" / "ippo" / "run0", multiples=(0.5, 1.0), seeds=seeds
    )
    certificate = load_certificate(run)
    first = load_actor(run).action_filter.config.certify_multiples[0]
    anchor = certificate.tested[0]["allowance"] / first
    assert record["anchor"] == pytest.approx(anchor)
    assert [rung["allowance"] for rung in record["rungs"]] == pytest.approx([anchor / 2, anchor])
    assert record["horizon"] == certificate.horizon == 10 and record["episodes"] == 6
    # Every rung's count is what the deployed policy at that allowance does on these seeds.
    for rung in record["rungs"]:
        actor = load_actor(run)
        actor.action_filter.allowance = rung["allowance"]
        batch = play(actor, actor.config, seeds, max_steps=10, batch_size=6)
        assert rung["violations"] == violating(batch)
        assert rung["return"] == pytest.approx(float(batch.reward.sum(axis=1).mean()))
        assert rung["rate"] <= rung["upper"] <= 1
    ippo = load_actor(results / "runs" / "hazard_grid" / "ippo" / "run0", shielded=False)
    batch = play(ippo, ippo.config, seeds, max_steps=10, batch_size=6)
    assert record["ippo_return"] == pytest.approx(float(batch.reward.sum(axis=1).mean()))


def test_a_run_without_its_ippo_run_has_no_reference(results: Path):
    run = results / "runs" / "hazard_grid" / "shield" / "run0"
    seeds = range(LADDER_DEPTH.first, LADDER_DEPTH.first + 2)
    record = ladder_depth.measure_run(run, None, multiples=(1.0,), seeds=seeds)
    assert record["ippo_return"] is None and len(record["rungs"]) == 1


def test_the_command_writes_the_section_through_a_linked_results_folder(
    results: Path, tmp_path: Path
):
    """A results folder named through a symbolic link (its own path is not inside it) is
    measured, and the section names it as the command did."""
    link = tmp_path / "linked"
    link.symlink_to(results, target_is_directory=True)
    path = tmp_path / "BENCHMARKS.md"
    argv = ["--results", str(link), "--episodes", "3", "--multiples", "0.5", "1", "--write"]
    assert ladder_depth.main(argv, out=tmp_path, path=path) == 0
    section = path.read_text().split(markers("ladder_depth")[0])[1]
    assert section.startswith("\n## How deep the certificate's ladder must go")
    assert "| hazard_grid shield run 0 |" in section and "| m = 0.5 | m = 1 | ippo return |" in (
        section
    )
    saved = json.loads((tmp_path / "ladder_depth.json").read_text())
    assert [r["run"] for r in saved["records"]] == [f"{link}/runs/hazard_grid/shield/run0"]
    assert saved["records"][0]["first_seed"] == LADDER_DEPTH.first


def test_the_certificate_check_takes_a_linked_results_folder(results: Path, tmp_path: Path):
    link = tmp_path / "linked"
    link.symlink_to(results, target_is_directory=True)
    argv = ["--results", str(link), "--episodes", "2", "--seed-offset", "9000000"]
    assert certificate_check.main(argv, out=tmp_path, path=tmp_path / "BENCHMARKS.md") == 0
    saved = json.loads((tmp_path / "certificate_check_quick.json").read_text())
    assert [r["run"] for r in saved["records"]] == [f"{link}/runs/hazard_grid/shield/run0"]


def test_the_measurements_range_is_spent_and_holds_a_hundred_runs():
    assert LADDER_DEPTH in RESERVED and LADDER_DEPTH.spent
    assert LADDER_DEPTH.stop - LADDER_DEPTH.first >= 100 * CHECK_STRIDE


def test_bad_commands_are_refused_naming_what_is_wrong(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    for argv, message in [
        (["--results", str(tmp_path)], f"{tmp_path} holds no shield run with a policy.pt"),
        (["--results", str(results), "--episodes", "0"], "--episodes 0: must be in [1, 10000]"),
        (
            ["--results", str(results), "--multiples", "0.1", "0"],
            "--multiples [0.1, 0.0]: every multiple must be > 0",
        ),
    ]:
        with pytest.raises(SystemExit):
            ladder_depth.main(argv, out=tmp_path, path=tmp_path / "BENCHMARKS.md")
        assert message in capsys.readouterr().err
    assert not (tmp_path / "BENCHMARKS.md").exists()


def test_runs_that_need_seeds_beyond_the_range_are_refused(
    results: Path, capsys: pytest.CaptureFixture[str]
):
    parser = argparse.ArgumentParser()
    small = SeedUse("a small range", first=0, stop=CHECK_STRIDE - 1)
    with pytest.raises(SystemExit):
        certificate_check.runs_to_play(parser, results, episodes=1, within=small)
    assert "1 runs need seeds beyond 0..9998" in capsys.readouterr().err
    fits = SeedUse("a range of one run", first=0, stop=CHECK_STRIDE)
    assert len(certificate_check.runs_to_play(parser, results, episodes=1, within=fits)) == 1


def test_a_linked_ippo_run_is_refused_before_it_is_read(results: Path, tmp_path: Path):
    """The baseline's folder in a results folder handed over: a link there to a run elsewhere
    is refused, not followed."""
    copy = tmp_path / "results"
    shutil.copytree(
        results / "runs" / "hazard_grid" / "shield", copy / "runs" / "hazard_grid" / "shield"
    )
    (copy / "runs" / "hazard_grid" / "ippo").symlink_to(results / "runs" / "hazard_grid" / "ippo")
    argv = ["--results", str(copy), "--episodes", "1", "--multiples", "1"]
    with pytest.raises(ContainmentError, match="ippo"):
        ladder_depth.main(argv, out=tmp_path, path=tmp_path / "BENCHMARKS.md")
    assert not (tmp_path / "BENCHMARKS.md").exists()
