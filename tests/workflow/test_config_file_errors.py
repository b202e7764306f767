"""A config file that is not valid YAML is refused in one line naming the file, the line and
the column, where the workflow reads it itself (the default experiment, config/config.yaml).

A file given with --configfile is read by Snakemake before the workflow starts, with its own
message ("Config file is not valid JSON or YAML"), which names no line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from src.config.workflow import WorkflowConfigError, read_config_file
from tests.workflow.conftest import BIN, REPO

BROKEN = {
    # An unclosed flow sequence: the parser notices on the next line.
    "envs: [hazard_grid\nalgos: [ippo]\n": (
        ":2:6: expected ',' or ']', but got ':' (while parsing a flow sequence that starts at 1:7)"
    ),
    # A key indented deeper than its neighbour.
    "base:\n  timesteps: 256\n   rollouts: 32\n": ":3:12: mapping values are not allowed here",
    # A tab where YAML takes only spaces.
    "base:\n\ttimesteps: 256\n": (
        ":2:1: found character '\\t' that cannot start any token (while scanning for the next "
        "token)"
    ),
}


@pytest.mark.parametrize("text", sorted(BROKEN))
def test_a_yaml_syntax_error_names_file_line_and_column(text: str, tmp_path: Path):
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(WorkflowConfigError) as excinfo:
        read_config_file(path)
    assert str(excinfo.value) == f"{path}{BROKEN[text]}"


def test_a_valid_config_file_reads_as_yaml(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text("base:\n  learning_rate: 1.0e-3\n", encoding="utf-8")
    assert read_config_file(path) == {"base": {"learning_rate": 0.001}}


def test_a_broken_default_config_stops_the_workflow_in_one_line(tmp_path: Path):
    # A copy of the workflow whose config/config.yaml, the default experiment, is broken.
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Snakefile", "workflow", "src", "profiles"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, root / name)
    (root / "config").mkdir()
    default = root / "config" / "config.yaml"
    text = (REPO / "config" / "config.yaml").read_text(encoding="utf-8")
    default.write_text(text.replace("envs: [", "envs: [[", 1), encoding="utf-8")

    done = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--config", f"results_dir={tmp_path / 'results'}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )

    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("invalid config:")]
    # The unclosed sequence of `envs` (line n) shows on the next line, where a key begins.
    n = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("envs: ["))
    assert errors == [
        f"invalid config: {default}:{n + 1}:1: expected ',' or ']', but got '<scalar>' (while "
        f"parsing a flow sequence that starts at {n}:7)"
    ], done.stdout + done.stderr
    assert "Traceback" not in done.stderr
