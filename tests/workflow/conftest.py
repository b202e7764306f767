"""Helpers to run the workflow's Snakemake from tests, in a subprocess with the venv's tools."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
