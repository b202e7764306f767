"""Dry runs of the shipped configs: the DAG has the expected jobs (the long form, every job
listed: `--quiet host`; a plain dry run prints the counts only, tests/workflow/
test_console_output.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.workflow.conftest import REPO, job_counts, snakemake

LONG = ("--quiet", "host")
"""A dry run that lists every job (its files, wildcards, resources)."""
PER_RUN_RULES = ("train", "evaluate", "render", "export")
PER_ENV_RULES = ("floor",)
PER_EXPERIMENT_RULES = (
    "aggregate",
    "marl_eval",
    "figures",
    "summary",
    "video_page",
    "wandb_upload",
    "all",
)


def _expected(config_path: Path) -> dict[str, int]:
    config = yaml.safe_load(config_path.read_text())
    runs = len(config["envs"]) * len(config["algos"]) * config["num_runs"]
    counts = (
        dict.fromkeys(PER_RUN_RULES, runs)
        | dict.fromkeys(PER_ENV_RULES, len(config["envs"]))
        | dict.fromkeys(PER_EXPERIMENT_RULES, 1)
    )
    counts["total"] = sum(counts.values())
    return counts


@pytest.mark.parametrize(
    ("config_file", "runs"),
    [
        ("config/config.yaml", 24),
        ("config/paper.yaml", 60),
        ("config/mamujoco.yaml", 9),
        # The README's example (a task and an algorithm of examples/) and mpe2 from a config.
        ("examples/corridor.yaml", 8),
        ("examples/mpe2.yaml", 12),
        # An algorithm written against src.algos.api (docs/algorithms.md) next to ippo.
        ("examples/reinforce.yaml", 4),
    ],
)
def test_dry_run_job_counts(config_file: str, runs: int, results_dir: Path):
    done = snakemake(
        "-n", *LONG, "--configfile", config_file, "--config", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    counts = job_counts(done.stdout)
    # One fingerprint job per code name (src/code_inputs.py), before any job that runs it.
    fingerprints = counts.pop("code_fingerprint")
    counts["total"] -= fingerprints
    names = set(re.findall(r"/\.code/([\w-]+)\.sha256", done.stdout))
    assert fingerprints == len(names)
    assert counts == _expected(REPO / config_file)
    assert counts["train"] == runs
    assert not results_dir.exists()


def test_default_config_is_used_without_configfile(results_dir: Path):
    done = snakemake("-n", *LONG, "--config", f"results_dir={results_dir}")
    assert done.returncode == 0, done.stderr + done.stdout
    assert job_counts(done.stdout)["train"] == 24
    assert f"{results_dir}/default/runs/hazard_grid/ippo/run0/policy.pt" in done.stdout


def test_configfile_replaces_the_default_instead_of_merging(results_dir: Path):
    # The test config names one env; the default's other envs must not leak in.
    done = snakemake(
        "-n", *LONG, "--configfile", ".test/config.yaml", "--config", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert job_counts(done.stdout)["train"] == 3
    assert "runs/intersection" not in done.stdout
