"""benchmarks.numerics: the side-by-side training cost and the emulated agreement, tiny."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks import numerics
from src.numerics import PINNED


def test_children_set_their_own_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child imports `src` from its tree and pins that tree's kernels, not this process's."""
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    env = numerics._child_env(Path("/some/tree"))
    assert env["PYTHONPATH"] == "/some/tree" and not set(PINNED) & set(env)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert os.environ["MKL_CBWR"] == "COMPATIBLE"


def test_cost_of_one_tiny_run_against_the_same_tree(tmp_path: Path) -> None:
    """This tree against itself: one row, positive seconds, a ratio near 1 in the table."""
    config = yaml.safe_load((numerics.ROOT / "config" / "config.yaml").read_text())
    config["base"].update(num_envs=4, timesteps=128, rollouts=16, mini_batches=2)
    config["env_params"]["hazard_grid"]["max_steps"] = 12
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(config))
    results = numerics.measure(
        numerics.ROOT,
        config_file=config_file,
        repeats=1,
        emulate=[],
        runs=["*"],
        pairs=[("hazard_grid", "ippo")],
    )
    row = results["cost"]["hazard_grid/ippo"]
    assert set(row) == {"common", "reference"} and min(row.values()) > 0
    assert results["agreement"] == {}
    results.update(repeats=1, runs=["*"], cpu_model="test CPU", machine={"date": "today"})
    text = numerics.markdown(results, "abc1234")
    assert "| hazard_grid/ippo |" in text and "| **all** |" in text and "test CPU" in text


def _config() -> dict[str, Any]:
    return yaml.safe_load((numerics.ROOT / "config" / "config.yaml").read_text())


def test_the_reference_is_given_the_configured_shield_in_its_own_names() -> None:
    """The reference's backup defaulted to exhaustive: it is given the coordinate descent, the
    models it called v1, and no key it does not have; the current tree's config is untouched."""
    config = _config()
    written = copy.deepcopy(config)
    reference = numerics.reference_config(config)
    assert config == written
    expected = copy.deepcopy(written)
    expected["base"].update(wm_version="v1", shield_version="v1")
    del expected["algo_params"]["ippo_lag"]  # its only key, risk_target_ratio, is unknown there
    del expected["algo_params"]["shield_dec"]["common_plan"]  # unknown there as well
    del expected["joint_certificates"]  # so is the workflow's joint_certificates
    for algo in ("shield", "shield_dec"):
        expected["algo_params"][algo]["backup"] = "coordinate"
    assert reference == expected


def test_the_reference_tree_trains_its_own_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the reference commit's tree gets the translated config; this tree trains the given."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(_config()))
    assert numerics.write_reference_config(numerics.ROOT, config_file, tmp_path) == config_file
    head = subprocess.run(
        ["git", "-C", str(numerics.ROOT), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    monkeypatch.setattr(numerics, "REFERENCE", head[:7])  # as if this tree were the reference
    reference_file = numerics.write_reference_config(numerics.ROOT, config_file, tmp_path)
    assert yaml.safe_load(reference_file.read_text()) == numerics.reference_config(_config())
    trained: list[tuple[Path, Path]] = []

    def train(tree: Path, env: str, algo: str, config_file: Path) -> float:
        trained.append((tree, config_file))
        return 1.0

    monkeypatch.setattr(numerics, "train_cpu_seconds", train)
    numerics.measure(
        tmp_path / "reference",
        config_file=config_file,
        reference_config_file=reference_file,
        repeats=1,
        emulate=[],
        runs=["*"],
        pairs=[("hazard_grid", "shield")],
    )
    assert trained == [(numerics.ROOT, config_file), (tmp_path / "reference", reference_file)]


def test_the_reference_commit_trains_the_coordinate_backup(tmp_path: Path) -> None:
    """The reference commit's own code accepts its config and resolves every shield run with
    the coordinate backup and the shield the current code calls v0."""
    tree = tmp_path / "reference"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(numerics.ROOT), "archive", numerics.REFERENCE, "src", "workflow"],
        capture_output=True,
    )
    if archive.returncode != 0:
        pytest.skip(f"{numerics.REFERENCE} is not in this clone")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    config_file = tmp_path / "reference.yaml"
    config_file.write_text(yaml.safe_dump(numerics.reference_config(_config())))
    resolve = (
        "import json, sys, yaml\n"
        "from src.config.workflow import resolve_run_config, validate_workflow_config\n"
        "config = validate_workflow_config(yaml.safe_load(open(sys.argv[1])))\n"
        "runs = {f'{e}/{a}': resolve_run_config(config, e, a, 0)\n"
        "        for e in config['envs'] for a in config['algos']}\n"
        "print(json.dumps({k: r.shield and [r.shield.shield_version, r.shield.backup]\n"
        "                  for k, r in runs.items()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", resolve, str(config_file)],
        cwd=tree,
        env=numerics._child_env(tree),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shields = json.loads(done.stdout.strip().splitlines()[-1])
    assert shields == {
        f"{env}/{algo}": ["v1", "coordinate"] if algo.startswith("shield") else None
        for env in numerics.TASKS
        for algo in numerics.ALGOS
    }
