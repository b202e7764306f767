"""benchmarks.numerics: the side-by-side training cost and the emulated agreement, tiny."""

from __future__ import annotations

import os
from pathlib import Path

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
