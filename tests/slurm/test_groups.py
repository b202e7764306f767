"""How many jobs `profiles/slurm` asks the scheduler for: one group job per run for the small
jobs that follow its training. Checked on dry runs, which need no cluster.

A dry run lists every job; the jobs of a group job are listed, indented, under one "Group job"
header. The headers and the jobs outside of any group, less the jobs that stay on the
submitting machine, are the sbatch submissions of a real run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import yaml

from tests.workflow.conftest import REPO, snakemake

GROUPED_RULES = ("evaluate", "export", "render")
# Experiment-level rules submitted on their own (floor once per env).
PER_ENV_RULES = ("floor",)
PER_EXPERIMENT_RULES = ("aggregate", "figures", "marl_eval", "summary", "video_page")
RUN_WILDCARDS = ("env", "algo", "idx")

_GROUP = re.compile(r"^(?:\[[^\]]*\] )?Group job (\S+) \(jobs in lexicogr\. order\):$")
_RULE = re.compile(r"^(\s*)(?:local)?(?:rule|checkpoint) (\w+):$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
_RESOURCES = re.compile(r"^\s+resources: (.*)$")
_THREADS = re.compile(r"^\s+threads: (\d+)$")


@dataclass
class Job:
    """One job listed by a run or a dry run: its rule, wildcards, resources and threads as
    printed (Snakemake lists no threads for a single-threaded job)."""

    rule: str
    wildcards: dict[str, str]
    resources: dict[str, str]
    threads: int = 1

    @property
    def run(self) -> tuple[str, ...] | None:
        """(env, algo, idx) of a per-run job, None for the others."""
        if not all(name in self.wildcards for name in RUN_WILDCARDS):
            return None
        return tuple(self.wildcards[name] for name in RUN_WILDCARDS)


@dataclass
class Submission:
    """One sbatch submission: a group job (`group` set) or a single job."""

    group: str | None
    jobs: list[Job]

    @property
    def rules(self) -> list[str]:
        """The rules of its jobs, sorted."""
        return sorted(job.rule for job in self.jobs)

    @property
    def runs(self) -> set[tuple[str, ...] | None]:
        """The runs its jobs belong to."""
        return {job.run for job in self.jobs}


def _pairs(text: str) -> dict[str, str]:
    """`a=1, b=x` as a dict."""
    return dict(item.split("=", 1) for item in text.split(", ") if "=" in item)


def local_rules() -> set[str]:
    """Rules whose jobs run on the submitting machine, never through sbatch: the default
    target (it only collects the final files) and every rule declared `localrule: True`."""
    rules = {"all"}
    for path in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"^(?=rule )", path.read_text(), flags=re.M):
            name = re.match(r"rule (\w+):", block)
            if name and re.search(r"^\s+localrule: True$", block, flags=re.M):
                rules.add(name.group(1))
    return rules


def listed_submissions(output: str) -> list[Submission]:
    """The submissions listed in the output of a run or a dry run (`snakemake -n`): each group
    job, and each job outside of any group that is not a local rule's."""
    submissions: list[Submission] = []
    group: Submission | None = None
    job: Job | None = None
    for line in output.splitlines():
        if match := _GROUP.match(line):
            group = Submission(group=match.group(1), jobs=[])
            submissions.append(group)
            job = None
        elif match := _RULE.match(line):
            job = Job(rule=match.group(2), wildcards={}, resources={})
            if match.group(1):
                assert group is not None, f"indented job outside of a group: {line}"
                group.jobs.append(job)
            else:
                group = None
                submissions.append(Submission(group=None, jobs=[job]))
        elif job is not None and (match := _WILDCARDS.match(line)):
            job.wildcards = _pairs(match.group(1))
        elif job is not None and (match := _RESOURCES.match(line)):
            job.resources = _pairs(match.group(1))
        elif job is not None and (match := _THREADS.match(line)):
            job.threads = int(match.group(1))
    local = local_rules()
    return [s for s in submissions if s.group is not None or s.jobs[0].rule not in local]


def expected_submissions(config: dict) -> int:
    """Submissions of a whole run of `config` through the cluster profile: two per run
    (training, then the group job of its small jobs) and the experiment-level jobs."""
    runs = len(config["envs"]) * len(config["algos"]) * config["num_runs"]
    return 2 * runs + len(PER_ENV_RULES) * len(config["envs"]) + len(PER_EXPERIMENT_RULES)


DryRun = Callable[..., str]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    """`dry_run(config_file, *args)`: the output of `snakemake -n` on `config_file` with the
    extra `args`, each combination run once per module."""
    results_dir = tmp_path_factory.mktemp("groups") / "results"
    outputs: dict[tuple[str, ...], str] = {}

    def run(config_file: str, *args: str) -> str:
        key = (config_file, *args)
        if key not in outputs:
            done = snakemake(
                "-n",
                "--quiet",
                "host",  # every job listed (a plain dry run prints the counts per rule)
                *args,
                "--configfile",
                config_file,
                "--config",
                f"results_dir={results_dir}",
            )
            assert done.returncode == 0, done.stderr + done.stdout
            assert not results_dir.exists()
            outputs[key] = done.stdout
        return outputs[key]

    return run


SLURM = ("--profile", "profiles/slurm")


@pytest.mark.parametrize("config_file", ["config/paper.yaml", ".test/config.yaml"])
def test_the_slurm_profile_asks_for_two_jobs_per_run(config_file: str, dry_run: DryRun) -> None:
    config = yaml.safe_load((REPO / config_file).read_text())
    submissions = listed_submissions(dry_run(config_file, *SLURM))

    by_run: dict[tuple[str, ...] | None, list[Submission]] = defaultdict(list)
    for submission in submissions:
        # A group job holds the jobs of one run only, never of several.
        assert len(submission.runs) == 1, (submission.group, submission.runs)
        by_run[next(iter(submission.runs))].append(submission)

    runs = {run for run in by_run if run is not None}
    assert len(runs) == len(config["envs"]) * len(config["algos"]) * config["num_runs"]
    for run in runs:
        # Training, then one group job with every small job of the run.
        assert len(by_run[run]) <= 2, (run, [s.rules for s in by_run[run]])
        assert sorted((s.group is not None, s.rules) for s in by_run[run]) == [
            (False, ["train"]),
            (True, sorted(GROUPED_RULES)),
        ], run
    experiment_level = sorted(rule for s in by_run[None] for rule in s.rules)
    assert all(s.group is None for s in by_run[None])
    assert experiment_level == sorted(
        [*PER_EXPERIMENT_RULES, *(rule for rule in PER_ENV_RULES for _ in config["envs"])]
    )
    assert len(submissions) == expected_submissions(config)
    if config_file == "config/paper.yaml":
        assert len(submissions) == 128  # 60 runs: 60 training jobs, 60 group jobs, and 8 more


def test_grouped_jobs_take_the_groups_one_serial_slot(dry_run: DryRun) -> None:
    # The group job is sized for its jobs run one after another (the largest mem_mb, the
    # summed runtime, the most threads) because each holds the group's one `serial` slot.
    output = dry_run(".test/config.yaml", *SLURM)
    groups = [s for s in listed_submissions(output) if s.group is not None]
    assert groups
    for group in groups:
        assert all(job.resources.get("serial") == "1" for job in group.jobs), group.group
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "profile.yaml").read_text())
    assert profile["resources"]["serial"] == 1
    assert profile["set-resource-scopes"]["serial"] == "local"


def test_local_runs_have_no_groups(dry_run: DryRun) -> None:
    # Without the cluster profile every job is on its own, as before the groups.
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    runs = len(config["envs"]) * len(config["algos"]) * config["num_runs"]
    output = dry_run("config/paper.yaml")
    assert "Group job" not in output
    submissions = listed_submissions(output)
    assert all(s.group is None and len(s.jobs) == 1 for s in submissions)
    assert sum(s.jobs[0].rule in GROUPED_RULES for s in submissions) == len(GROUPED_RULES) * runs
    assert not any("serial" in s.jobs[0].resources for s in submissions)
