"""Helpers to run the workflow's Snakemake from tests, in a subprocess with the venv's tools."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def snakemake(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the venv's `snakemake` in the repository with `args`; output captured as text."""
    full_env = {**os.environ, **(env or {})}
    # Tests must not upload anything, whatever the developer's shell says.
    full_env.pop("WANDB_API_KEY", None)
    return subprocess.run(
        [str(BIN / "snakemake"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table of a Snakemake run or dry run, as rule -> count."""
    match = re.search(r"Job stats:\n(.*?)\n\n", output + "\n\n", re.S)
    assert match, f"no job stats in the output:\n{output}"
    counts = {}
    for line in match.group(1).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A results root of the test's own (the config key `results_dir`)."""
    return tmp_path / "results"


RECORDER = Path(__file__).resolve().parent / "record_imports"
TEST_CONFIG = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())


@dataclass(frozen=True)
class WorkflowRun:
    """A finished Snakemake run of `.test/config.yaml` (whether or not it succeeded)."""

    results_dir: Path
    """The results root (config key `results_dir`)."""
    imports: Path
    """One JSON record per job of the src files its script imported."""
    args: tuple[str, ...]
    """The config arguments of the run, for further Snakemake calls on the same results."""
    done: subprocess.CompletedProcess
    """The run's process: return code, stdout and stderr."""

    @property
    def experiment(self) -> Path:
        """The experiment folder, `{results_dir}/{experiment_tag}`."""
        return self.results_dir / TEST_CONFIG["experiment_tag"]


def run_recorded(root: Path, config_file: str) -> WorkflowRun:
    """Run the workflow on `config_file` with results under `root`, every job recording the
    files its script imports (tests/workflow/record_imports)."""
    imports = root / "imports"
    imports.mkdir()
    env = {
        "SAFE_MARL_RECORD_IMPORTS": str(imports),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(RECORDER), os.environ.get("PYTHONPATH")) if p
        ),
    }
    args = ("--configfile", config_file, "--config", f"results_dir={root / 'results'}")
    done = snakemake("--cores", "2", *args, timeout=1200, env=env)
    return WorkflowRun(results_dir=root / "results", imports=imports, args=args, done=done)


@pytest.fixture(scope="session")
def test_config_run(tmp_path_factory: pytest.TempPathFactory) -> WorkflowRun:
    """One real run of `.test/config.yaml`, shared by the tests that read its outputs."""
    return run_recorded(tmp_path_factory.mktemp("test_config_run"), ".test/config.yaml")


@pytest.fixture(scope="session")
def test_config_report(test_config_run: WorkflowRun) -> Path:
    """`snakemake --report` of the run of `.test/config.yaml`: the path of its zip."""
    run = test_config_run
    assert run.done.returncode == 0, run.done.stdout[-5000:] + run.done.stderr[-5000:]
    report = run.experiment / "report.zip"
    made = snakemake(*run.args, "--report", str(report))
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return report
