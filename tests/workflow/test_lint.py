"""The workflow passes `snakemake --lint` and `snakefmt --check`."""

from __future__ import annotations

import subprocess

from tests.workflow.conftest import BIN, REPO, snakemake


def test_snakemake_lint_is_clean():
    done = snakemake("--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Lints for" not in done.stdout + done.stderr


def test_snakefmt_check_is_clean():
    done = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
