"""The CPUs a training job asks SLURM for through `profiles/slurm`: the config's `threads`
(4 here), however few cores the machine Snakemake is started on has. Checked on
dry runs, which need no cluster; tests/slurm/test_slurm.py checks the same on a real one.

Snakemake 9 caps every job's `threads` at `--cores`, cluster jobs included, and
profiles/default, which Snakemake adds to `--profile profiles/slurm` and which wins over it,
sets `cores: all`: the submitting machine's CPUs. The SLURM executor asks for the job's capped
threads (`--cpus-per-task`, for sbatch and for the srun of the job step) unless the job has a
`cpus_per_task` resource. `max-threads` and `set-threads` only lower threads, and the cluster
profile cannot read the config's `threads`, so rule train asks for its CPUs itself: its
`cpus_per_task` resource is the config's `threads`.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting

from src.runfiles import RunFiles
from tests.slurm.test_groups import Job, listed_submissions
from tests.workflow.conftest import TEST_CONFIG, snakemake

THREADS = 4
"""Training threads more than the 2-core machine has, given to `.test/config.yaml` with --config."""


def train_target(results_dir: Path, config: dict = TEST_CONFIG) -> Path:
    """The policy of the first run of `config`'s first env and algorithm under `results_dir`:
    as a Snakemake target, one training job (and the code fingerprint it needs)."""
    run = Path(results_dir, config["experiment_tag"], "runs", config["envs"][0])
    return RunFiles(run / config["algos"][0] / "run0").policy


def train_args(results_dir: Path, *args: str) -> tuple[str, ...]:
    """Snakemake arguments of that one training job of `.test/config.yaml` with
    `THREADS` threads, through the cluster profile, with the extra `args`."""
    return (
        str(train_target(results_dir)),
        "--profile",
        "profiles/slurm",
        *args,
        "--configfile",
        ".test/config.yaml",
        "--config",
        f"threads={THREADS}",
        f"results_dir={results_dir}",
    )


class _Resources(dict):
    """Job resources as the executor reads them: `resources.get(name)` and
    `resources.name`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(name) from error


def slurm_cpus(job: Job) -> int:
    """The CPUs the SLURM executor asks for `job`, as a dry run lists it: the plugin's own
    `--cpus-per-task` setting, used by sbatch and by the job step's srun alike."""
    resources = _Resources(
        {name: int(value) if value.isdigit() else value for name, value in job.resources.items()}
    )
    setting = get_cpu_setting(SimpleNamespace(threads=job.threads, resources=resources), False)
    match = re.fullmatch(r"--cpus-per-task=(\d+)", setting)
    assert match, setting
    return int(match.group(1))


@pytest.mark.parametrize(
    "cores",
    [
        # Enough cores, or `--cores 4` given on a smaller machine: asks for the 4 threads.
        pytest.param("4", id="4-cores"),
        pytest.param("2", id="2-cores"),
        pytest.param("1", id="1-core"),
    ],
)
def test_a_training_job_asks_slurm_for_the_configs_threads(cores: str, tmp_path: Path) -> None:
    # `--cores N` stands for a submitting machine of N cores (`cores: all` there).
    results_dir = tmp_path / "results"
    # --quiet host lists every job (a plain dry run prints the counts per rule); last, since
    # --quiet takes every value that follows it.
    done = snakemake("-n", *train_args(results_dir, "--cores", cores), "--quiet", "host")
    assert done.returncode == 0, done.stderr + done.stdout
    assert not results_dir.exists()
    jobs = [job for s in listed_submissions(done.stdout) for job in s.jobs]
    assert [job.rule for job in jobs] == ["train"], done.stdout
    assert slurm_cpus(jobs[0]) == THREADS, done.stdout
