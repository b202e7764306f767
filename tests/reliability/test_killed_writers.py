"""A writer SIGKILLed in the middle of an atomic write: the old file stays, the temp goes.

Each writer runs in a child process that `fault_injection/sitecustomize.py` stops just before
the `os.replace` that would publish the new content, and is then SIGKILLed. The target must
still hold the previous content, and the next write of the same file (by a live process) must
leave no temporary file of the dead writer behind, so that repeated kills on a long cluster
run do not pile up hidden files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reliability.helpers import child_env

FAULTS = Path(__file__).resolve().parent / "fault_injection"


def _kill_before_publish(code: str, target: Path, tmp_path: Path) -> None:
    """Run `code` (which writes `target`) in a child, SIGKILL it just before it publishes."""
    marker = tmp_path / "paused.marker"
    env = child_env(RELIABILITY_PAUSE_BEFORE_REPLACE=f"{target.name}|{marker}")
    env["PYTHONPATH"] = os.pathsep.join((str(FAULTS), env["PYTHONPATH"]))
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(target)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
    assert marker.exists(), f"the writer never reached os.replace: {stderr.decode()[-2000:]}"


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_save_to_file_killed_before_publishing(tmp_path: Path):
    from src.core.io import load_from_file, save_to_file

    target = save_to_file({"version": 1}, tmp_path, "state.json")
    code = (
        "import sys\nfrom pathlib import Path\nfrom src.core.io import save_to_file\n"
        "p = Path(sys.argv[1])\nsave_to_file({'version': 2}, p.parent, p.name)\n"
    )
    _kill_before_publish(code, target, tmp_path)
    assert load_from_file(tmp_path, "state.json") == {"version": 1}
    assert len(_hidden(tmp_path)) == 1  # the dead writer's complete but unpublished temp

    save_to_file({"version": 3}, tmp_path, "state.json")
    assert load_from_file(tmp_path, "state.json") == {"version": 3}
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("writer", ["write_text", "write_parquet"])
def test_analysis_writer_killed_before_publishing(tmp_path: Path, writer: str):
    import pyarrow as pa

    from src.analysis.files import write_text
    from src.schemas import write_parquet

    name = "summary.md" if writer == "write_text" else "history.parquet"
    target = tmp_path / name
    table = pa.table({"x": [1, 2, 3]})
    if writer == "write_text":
        write_text("old\n", target)
        code = (
            "import sys\nfrom src.analysis.files import write_text\n"
            "write_text('new\\n', sys.argv[1])\n"
        )
    else:
        write_parquet(table, target)
        code = (
            "import sys\nimport pyarrow as pa\nfrom src.schemas import write_parquet\n"
            "write_parquet(pa.table({'x': [4]}), sys.argv[1])\n"
        )
    before = target.read_bytes()
    _kill_before_publish(code, target, tmp_path)
    assert target.read_bytes() == before
    assert len(_hidden(tmp_path)) == 1

    if writer == "write_text":
        write_text("newer\n", target)
    else:
        write_parquet(table, target)
    assert _hidden(tmp_path) == []
