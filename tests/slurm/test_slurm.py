"""The test workflow through `profiles/slurm` on a real SLURM cluster.

Runs only inside tests/slurm/run_slurm_test.sh, which starts a single-node cluster and sets
SAFE_MARL_SLURM_TEST=1; elsewhere it is skipped.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.slurm.test_groups import GROUPED_RULES, expected_submissions, listed_submissions
from tests.slurm.test_threads import THREADS, train_args, train_target
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

# snakemake-executor-plugin-slurm logs every sbatch submission with the job's log file, which
# lies in a folder named after the rule (rule_{name}) or the group job (group_{name}).
_SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")


@dataclass(frozen=True)
class ClusterRun:
    """The finished run of `.test/config.yaml` through the cluster profile."""

    results_dir: Path
    output: str
    returncode: int


@dataclass(frozen=True)
class Request:
    """What a SLURM job asked for, as `scontrol show job` reports it."""

    minutes: int
    megabytes: int
    cpus: int


def _minutes(limit: str) -> int:
    """A SLURM time limit, `[days-]hours:minutes:seconds`, in minutes (sbatch -t was given in
    minutes, so the seconds are 0)."""
    days, _, clock = limit.rpartition("-")
    hours, minutes, _ = (int(part) for part in clock.split(":"))
    return (int(days or 0) * 24 + hours) * 60 + minutes


def _megabytes(size: str) -> int:
    """A SLURM memory size such as `2000M` or `4G`, in megabytes."""
    scale = {"M": 1, "G": 1024, "T": 1024 * 1024}
    return int(float(size[:-1]) * scale[size[-1]])


def _job(slurm_jobid: str) -> dict[str, str]:
    """The fields of the SLURM job `slurm_jobid` in `scontrol show job` (finished jobs stay
    listed for MinJobAge)."""
    done = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", slurm_jobid],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return dict(item.split("=", 1) for item in done.stdout.split() if "=" in item)


def _request(slurm_jobid: str) -> Request:
    """What the SLURM job `slurm_jobid` asked for."""
    fields = _job(slurm_jobid)
    return Request(
        minutes=_minutes(fields["TimeLimit"]),
        megabytes=_megabytes(fields["MinMemoryNode"]),
        cpus=int(fields["NumCPUs"]),
    )


def _spans(slurm_log: str) -> dict[str, tuple[int, int]]:
    """Rule -> (line of its job's first start, line of its last "Finished") in the SLURM log
    of a group job. Each job is logged by the Snakemake that runs the group in the allocation
    and again by the one its job step runs; the span covers both."""
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for number, line in enumerate(slurm_log.splitlines()):
        if match := re.match(r"(?:\[[^\]]*\] )?(?:local)?rule (\w+):\s*$", line):
            starts.setdefault(match.group(1), number)
        elif match := re.search(r"Finished jobid: \S+ \(Rule: (\w+)\)", line):
            ends[match.group(1)] = number
    assert starts.keys() == ends.keys(), slurm_log[-4000:]
    return {rule: (starts[rule], ends[rule]) for rule in starts}


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    root = tmp_path_factory.mktemp("slurm")
    results_dir = root / "results"
    done = snakemake(
        "--profile",
        "profiles/slurm",
        "--configfile",
        ".test/config.yaml",
        "--config",
        f"results_dir={results_dir}",
        # The SLURM logs of every job, kept for the checks of the group jobs.
        "--slurm-logdir",
        str(root / "slurm_logs"),
        "--slurm-keep-successful-logs",
        timeout=1800,
    )
    return ClusterRun(
        results_dir=results_dir, output=done.stdout + done.stderr, returncode=done.returncode
    )


def test_cluster_is_up() -> None:
    done = subprocess.run(
        ["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "idle" in done.stdout.split()


def test_test_config_runs_through_the_slurm_profile(cluster_run: ClusterRun) -> None:
    output = cluster_run.output
    assert cluster_run.returncode == 0, output[-8000:]
    runs = len(CONFIG["envs"]) * len(CONFIG["algos"]) * CONFIG["num_runs"]
    assert job_counts(output)["train"] == runs
    # Jobs went through sbatch (the executor logs each submission with its SLURM job id).
    assert output.count("has been submitted with SLURM jobid") >= runs, output[-8000:]
    check_experiment(cluster_run.results_dir / CONFIG["experiment_tag"])


def test_the_small_jobs_of_a_run_are_one_group_job(cluster_run: ClusterRun) -> None:
    output = cluster_run.output
    assert cluster_run.returncode == 0, output[-8000:]
    submitted = _SUBMITTED.findall(output)
    # Two submissions per run and the experiment-level ones (a retry resubmits the same job).
    assert len({job for job, _, _ in submitted}) == expected_submissions(CONFIG), output[-8000:]

    groups = {
        f"group_{s.group}_{'_'.join(s.rules)}": s
        for s in listed_submissions(output)
        if s.group is not None
    }
    runs = len(CONFIG["envs"]) * len(CONFIG["algos"]) * CONFIG["num_runs"]
    assert len(groups) == runs
    assert all(s.rules == sorted(GROUPED_RULES) for s in groups.values())

    checked = set()
    for _, slurm_jobid, log in submitted:
        folder = next(part for part in Path(log).parts if part.startswith(("rule_", "group_")))
        if folder not in groups:
            continue
        # Its jobs ran one after another in the allocation, each finished before the next
        # started ...
        spans = sorted(_spans(Path(log).read_text()).values())
        assert len(spans) == len(GROUPED_RULES), (folder, spans)
        assert all(end < start for (_, end), (start, _) in itertools.pairwise(spans)), folder
        # ... and the group job asked for that: the largest memory, the summed runtime, one
        # CPU (the jobs are single-threaded).
        jobs = groups[folder].jobs
        assert _request(slurm_jobid) == Request(
            minutes=sum(int(job.resources["runtime"]) for job in jobs),
            megabytes=max(int(job.resources["mem_mb"]) for job in jobs),
            cpus=1,
        ), folder
        checked.add(folder)
    assert checked == set(groups)


@pytest.mark.parametrize(
    "cores",
    [
        # `--cores 4` on the command line, whatever this machine has: the job asks for 4.
        pytest.param(("--cores", "4"), id="cores-4"),
        # A submitting machine of 2 cores, whatever this one has.
        pytest.param(("--cores", "2"), id="cores-2"),
        # The profiles as they are: profiles/default's `cores: all`, this machine's CPUs.
        pytest.param((), id="profile"),
    ],
)
def test_a_training_job_gets_the_configs_threads_from_slurm(
    cores: tuple[str, ...], tmp_path: Path
) -> None:
    # One training job of `.test/config.yaml` with `threads: 4`.
    results_dir = tmp_path / "results"
    done = snakemake(
        *train_args(results_dir, *cores),
        "--slurm-logdir",
        str(tmp_path / "slurm_logs"),
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    assert train_target(results_dir).is_file()
    trainings = [
        slurm_jobid
        for _, slurm_jobid, log in _SUBMITTED.findall(output)
        if "rule_train" in Path(log).parts
    ]
    assert len(trainings) == 1, output[-8000:]
    job = _job(trainings[0])
    assert job["JobState"] == "COMPLETED", job
    # SLURM gave the job the CPUs it asked for: NumCPUs is its allocation, CPUs/Task what
    # sbatch --cpus-per-task asked (the job step's srun asks the same).
    assert (_request(trainings[0]).cpus, job["CPUs/Task"]) == (THREADS, str(THREADS)), job
