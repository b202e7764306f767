"""One trainer per run folder, and a results-lock takeover that leaves nothing behind.

A train job orphaned by a killed Snakemake keeps training; after `--unlock` the rerun starts a
second trainer of the same run folder. It must be refused in one line naming the folder and
the pid of the first, which finishes undisturbed; and once the first is killed (SIGKILL), its
lock is gone with it and a rerun resumes from its checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from src.algos.checkpoint import latest_checkpoint
from src.containment import ContainmentError
from src.lock import TAKEOVER_NAME, LockHeldError, ResultsLock
from tests.reliability.helpers import REPO, child_env
from tests.tiny_runs import four_update_config

FAULTS = REPO / "tests" / "reliability" / "fault_injection"
TRAIN_JOB = Path(__file__).resolve().parent / "train_job.py"
TIMEOUT = 300.0
RUN_LOCK_NAME = ".train.lock"


def _tiny_config() -> dict[str, Any]:
    """4 updates of hazard_grid, a checkpoint after each."""
    return four_update_config()


def _start(results: Path, run_dir: Path, **env: str) -> subprocess.Popen:
    """The workflow's train job of `run_dir` (tests/reliability/train_job.py), in a child."""
    return subprocess.Popen(
        [sys.executable, str(TRAIN_JOB), str(results), str(run_dir), json.dumps(_tiny_config())],
        cwd=results.parent.parent,
        env=child_env(PYTHONPATH=os.pathsep.join((str(REPO), str(FAULTS))), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _paused(results: Path, run_dir: Path, marker: Path, **env: str) -> subprocess.Popen:
    """A train job that stops after the checkpoint of update 2 (until `env` releases it)."""
    child = _start(
        results, run_dir, RELIABILITY_PAUSE_TRAINING=f"after_checkpoint:1:{marker}", **env
    )
    deadline = time.monotonic() + TIMEOUT
    while not marker.exists():
        if child.poll() is not None:
            raise AssertionError(f"the first trainer ended early:\n{child.communicate()[1]}")
        assert time.monotonic() < deadline, "the first trainer never paused"
        time.sleep(0.05)
    return child


def _console(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def run_folder(tmp_path: Path) -> tuple[Path, Path]:
    """(results folder, run folder) of one tiny run."""
    results = tmp_path / "results" / "test"
    run_dir = results / "runs" / "hazard_grid" / "ippo" / "run0"
    return results, run_dir


def test_a_second_trainer_is_refused_in_one_line_and_the_first_finishes(
    run_folder: tuple[Path, Path], tmp_path: Path
):
    results, run_dir = run_folder
    release = tmp_path / "release"
    first = _paused(results, run_dir, tmp_path / "paused", RELIABILITY_PAUSE_RELEASE=str(release))
    try:
        second = _start(results, run_dir)
        out, err = second.communicate(timeout=TIMEOUT)
        assert second.returncode == 1, err
        (line,) = _console(err)
        assert "Traceback" not in err + out
        head = f"[refused] refused: run folder {run_dir} is already being trained by pid "
        assert f"{head}{first.pid} (since " in line, line
        assert line.endswith(
            f"; wait for it to finish, or stop it (kill {first.pid}) and rerun to resume from "
            "its last checkpoint"
        ), line
        # Its log (a new file: the job's log is deleted before a job starts) says the same.
        assert _console((run_dir / "logs" / "train.log").read_text(encoding="utf-8")) == [line]
        # The first trainer's checkpoint is untouched: nothing half-written beside it.
        assert [p.name for p in (run_dir / "checkpoint").iterdir()] == ["update-000002"]
        assert (run_dir / RUN_LOCK_NAME).is_file()
    finally:
        release.touch()
        out, err = first.communicate(timeout=TIMEOUT)
    assert first.returncode == 0, err
    assert (run_dir / "policy.pt").is_file() and not (run_dir / "checkpoint").exists()
    assert not (run_dir / RUN_LOCK_NAME).exists()
    # Its own log lost its name `logs/train.log` to the refused job's: kept as train.1.log.
    kept = (run_dir / "logs" / "train.1.log").read_text(encoding="utf-8")
    assert "[train] training ippo on hazard_grid" in kept and "[train] finished" in kept
    assert "refused" not in kept
    assert not (run_dir / "logs" / ".train.attempt.log").exists()


def test_the_run_lock_dies_with_its_holder_and_a_rerun_resumes(
    run_folder: tuple[Path, Path], tmp_path: Path
):
    results, run_dir = run_folder
    first = _paused(results, run_dir, tmp_path / "paused")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert (run_dir / RUN_LOCK_NAME).is_file()  # the file stays; the flock died with its pid
    assert latest_checkpoint(run_dir).name == "update-000002"

    rerun = _start(results, run_dir)
    _, err = rerun.communicate(timeout=TIMEOUT)
    assert rerun.returncode == 0, err
    (line,) = _console(err)
    expected = (
        f"[train] resumed {run_dir} from its checkpoint after update 2 of 4 "
        "(checkpoint/update-000002); attempt 2; the log of attempt 1 is logs/train.1.log"
    )
    assert line.endswith(expected), line
    log = (run_dir / "logs" / "train.log").read_text(encoding="utf-8")
    assert expected in log and "[train] finished" in log
    kept = (run_dir / "logs" / "train.1.log").read_text(encoding="utf-8")
    assert "[train] training ippo on hazard_grid" in kept and "resumed" not in kept
    assert (run_dir / "policy.pt").is_file()
    leftovers = {".train.lock", "checkpoint", ".train.attempt.log"}
    assert not [p for p in run_dir.rglob("*") if p.name in leftovers]


def test_a_run_lock_in_the_same_process_is_refused_naming_the_pid(tmp_path: Path):
    from src.lock import RunLock

    folder = tmp_path / "run0"
    folder.mkdir()
    with RunLock(folder) as held:
        assert held
        with pytest.raises(LockHeldError) as error:
            RunLock(folder).acquire()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"run folder {folder} is already being trained by pid {os.getpid()}")
    assert not (folder / RUN_LOCK_NAME).exists()
    with RunLock(folder) as held:  # released: taken again
        assert held


@pytest.mark.parametrize("kind", ["symlink", "FIFO", "hard link"])
def test_a_run_lock_that_is_a_link_or_fifo_is_refused(tmp_path: Path, kind: str):
    from src.lock import RunLock

    folder = tmp_path / "run0"
    folder.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    lock = folder / RUN_LOCK_NAME
    if kind == "FIFO":
        os.mkfifo(lock)
    elif kind == "hard link":
        os.link(outside, lock)
    else:
        lock.symlink_to(outside)
    with pytest.raises(ContainmentError) as error:
        RunLock(folder).acquire()
    assert str(lock) in str(error.value) and "\n" not in str(error.value)
    assert outside.read_text() == "precious"


# ------------------------------------------------------------------ results-lock takeover


def _stale_lock(folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owner = {"pid": int(done.stdout), "host": socket.gethostname(), "started": 0, "token": "x"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".lock").write_text(json.dumps(owner))


def test_a_takeover_removes_its_takeover_file(tmp_path: Path):
    folder = tmp_path / "results" / "test"
    _stale_lock(folder)
    (folder / TAKEOVER_NAME).write_text("")  # left by an earlier version: taken, then removed
    lock = ResultsLock(folder)
    token = lock.acquire()
    assert json.loads((folder / ".lock").read_text())["token"] == token
    assert not (folder / TAKEOVER_NAME).exists()
    lock.release()
    assert sorted(p.name for p in folder.iterdir()) == []


def test_a_failed_takeover_removes_its_takeover_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from src import lock as lock_module

    folder = tmp_path / "results" / "test"
    _stale_lock(folder)
    real_read = lock_module._read
    calls = []

    def read(path: Path, *, shown: Path | None = None) -> dict[str, Any] | None:
        calls.append(path)
        if len(calls) == 2:  # the second look, under the takeover lock
            raise LockHeldError(f"cannot read the lock: {shown or path} vanished into a FIFO")
        return real_read(path, shown=shown)

    monkeypatch.setattr(lock_module, "_read", read)
    with pytest.raises(LockHeldError, match="FIFO"):
        ResultsLock(folder).acquire()
    assert len(calls) == 2
    assert not (folder / TAKEOVER_NAME).exists()
