"""The test workflow through `profiles/slurm` on a real SLURM cluster.

Runs only inside tests/slurm/run_slurm_test.sh, which starts a single-node cluster and sets
SAFE_MARL_SLURM_TEST=1; elsewhere it is skipped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.workflow.conftest import job_counts, snakemake
from tests.workflow.test_real_run import CONFIG, check_experiment

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SAFE_MARL_SLURM_TEST") != "1",
        reason="needs the cluster started by tests/slurm/run_slurm_test.sh",
    ),
]


def test_cluster_is_up():
    done = subprocess.run(
        ["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "idle" in done.stdout.split()


def test_test_config_runs_through_the_slurm_profile(tmp_path: Path):
    results_dir = tmp_path / "results"
    done = snakemake(
        "--profile",
        "profiles/slurm",
        "--configfile",
        ".test/config.yaml",
        "--config",
        f"results_dir={results_dir}",
        timeout=1800,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    runs = len(CONFIG["envs"]) * len(CONFIG["algos"]) * CONFIG["num_runs"]
    assert job_counts(output)["train"] == runs
    # Jobs went through sbatch (the executor logs each submission with its SLURM job id).
    assert output.count("has been submitted with SLURM jobid") >= runs, output[-8000:]
    check_experiment(results_dir / CONFIG["experiment_tag"])
