"""A folder swapped for a link while the pipeline works in it is refused, never followed.

A results folder handed over may be shared with someone who renames a `checkpoint` folder (or
a whole run folder) away and puts a symbolic link to a folder of the user's in its place while
training runs. Deleting by name would then walk through the link: `remove_tree` checked the
path and deleted it a moment later, and about one call in five hundred deleted the outside
folder instead. Here a swapper process flips the folder between the real one and a link to an
outside folder thousands of times while the deletes run over and over; nothing outside may go.
The outside folders share the results root's prefix (`results-evil` next to `results`). A
result written in a job is renamed into place the same way, so it never lands in the folder a
swapped run folder leads to.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.containment import ContainmentError, remove_tree, results_root
from src.core.io import atomic_output, save_to_file
from src.lock import LOCK_NAME, RUN_LOCK_NAME, ResultsLock, RunLock
from tests.reliability.helpers import folder_state

DELETES = 2000  # delete calls of one race at least
FLIPS = 2000  # flips of the folder during one race at least
TIME_LIMIT = 15.0  # seconds for one race at most

# Flips `folder` between the real folder and a link to `target` until `stop` exists, writing
# one byte to stdout after every 100 flips.
SWAPPER = r"""
import os, sys
folder, away, target, stop = sys.argv[1:5]
done = 0
while not os.path.exists(stop):
    os.rename(folder, away)
    os.symlink(target, folder)
    os.unlink(folder)
    os.rename(away, folder)
    done += 1
    if done % 100 == 0:
        os.write(1, b".")
"""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _plant(base: Path, parts: tuple[str, ...], files: tuple[str, ...]) -> None:
    """Create `base/parts.../files` one component at a time without following a link; give
    up quietly where a component is a link or missing (the swapper is between two steps)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth, part in enumerate(parts):
            if depth == len(parts) - 1:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    return
                raise
            os.close(fd)
            fd = child
        for name in files:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def _available(fd: int) -> int:
    """The bytes waiting in the non-blocking pipe `fd`, read."""
    try:
        return len(os.read(fd, 1 << 16))
    except BlockingIOError:
        return 0


def _race(
    swapped: Path, target: Path, calls: list[tuple[Path, str]], plant: tuple[Path, tuple[str, ...]]
) -> tuple[int, int]:
    """Delete every (root, path) of `calls` over and over while a swapper process flips
    `swapped` to a link to `target`, until both did their share (`DELETES` calls, `FLIPS`
    flips); re-plant what was deleted (`plant`: base folder, components below it) between
    rounds. Returns (flips, delete calls)."""
    stop = swapped.parent / "stop"
    deletes = flips = 0
    deadline = time.monotonic() + TIME_LIMIT
    base, parts = plant
    command = [sys.executable, "-c", SWAPPER, str(swapped), f"{swapped}.away", str(target)]
    swapper = subprocess.Popen([*command, str(stop)], stdout=subprocess.PIPE)
    assert swapper.stdout is not None
    os.set_blocking(swapper.stdout.fileno(), False)
    try:
        while (deletes < DELETES or flips < FLIPS) and time.monotonic() < deadline:
            assert swapper.poll() is None, "the swapper stopped"
            _plant(base, parts, ("precious.txt",))
            for root, path in calls:
                with contextlib.suppress(ContainmentError, OSError):
                    remove_tree(root, path)
                deletes += 1
            flips += 100 * _available(swapper.stdout.fileno())
    finally:
        stop.touch()
        swapper.wait(timeout=30)
    # The swapper stops between two flips: the folder is the real one again.
    assert swapped.is_dir() and not swapped.is_symlink()
    return flips, deletes


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A user's folder next to the results folder, sharing its prefix, shaped like a run
    folder's checkpoint folder (and a checkpoint folder itself), with files to lose."""
    folder = tmp_path / "results-evil"
    for name in ("update-000001", "checkpoint/update-000001"):
        (folder / name).mkdir(parents=True)
        (folder / name / "precious.txt").write_text("must survive")
    return folder


def test_a_checkpoint_folder_flipped_to_a_link_never_leads_a_delete_outside(
    tmp_path: Path, outside: Path
):
    run = tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    checkpoint = run / "checkpoint"
    checkpoint.mkdir(parents=True)
    before = folder_state(outside)
    calls = [
        (run, "checkpoint/update-000001"),
        (run, "checkpoint/update-000001/precious.txt"),
        (checkpoint, "update-000001"),  # the clean-up of save_checkpoint, rooted at the folder
        (checkpoint, "update-000001/precious.txt"),
    ]
    flips, deletes = _race(checkpoint, outside, calls, (run, ("checkpoint", "update-000001")))
    assert folder_state(outside) == before, "a delete went through the link"
    assert flips >= FLIPS and deletes >= DELETES, f"{flips} flips, {deletes} deletes: too few"


def test_a_run_folder_flipped_to_a_link_never_leads_a_delete_outside(tmp_path: Path, outside: Path):
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "ippo" / "run0"
    (run / "checkpoint").mkdir(parents=True)
    before = folder_state(outside)
    calls = [
        (run, "checkpoint/update-000001"),
        (run / "checkpoint", "update-000001/precious.txt"),
    ]
    plant = (results, ("runs", "hazard_grid", "ippo", "run0", "checkpoint", "update-000001"))
    with results_root(results):
        flips, deletes = _race(run, outside, calls, plant)
    assert folder_state(outside) == before, "a delete went through the link"
    assert flips >= FLIPS and deletes >= DELETES, f"{flips} flips, {deletes} deletes: too few"


def test_a_linked_folder_is_refused_in_one_line_naming_it(tmp_path: Path, outside: Path):
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "ippo" / "run0"
    run.parent.mkdir(parents=True)
    before = folder_state(outside)
    # The checkpoint folder itself is the link, and it is the root the clean-up is given.
    run.mkdir()
    (run / "checkpoint").symlink_to(outside)
    with pytest.raises(ContainmentError) as refused:
        remove_tree(run / "checkpoint", "update-000001")
    message = str(refused.value)
    assert "\n" not in message and str(run / "checkpoint") in message and str(outside) in message
    # The run folder is the link: refused below the job's results folder.
    (run / "checkpoint").unlink()
    run.rmdir()
    run.symlink_to(outside)
    with results_root(results), pytest.raises(ContainmentError) as refused:
        remove_tree(run, "checkpoint")
    message = str(refused.value)
    assert "\n" not in message and str(run) in message and "symbolic link" in message
    assert folder_state(outside) == before


def test_a_result_is_not_placed_through_a_run_folder_swapped_for_a_link(
    tmp_path: Path, outside: Path
):
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "ippo" / "run0"
    (run / "checkpoint").mkdir(parents=True)
    save_to_file({"update": 1}, run / "checkpoint", "state.json")
    before = folder_state(outside)
    # Renamed away and replaced by a link to the user's folder while the job runs.
    run.rename(run.with_name("run0.away"))
    run.symlink_to(outside)
    with results_root(results):
        for write in (
            lambda: save_to_file({"update": 2}, run / "checkpoint", "state.json"),
            lambda: save_to_file({"update": 2}, run, "history.json"),
        ):
            with pytest.raises(ContainmentError) as refused:
                write()
            message = str(refused.value)
            assert "\n" not in message and str(run) in message and "symbolic link" in message
    assert folder_state(outside) == before
    # Outside a job (no results folder set) a linked folder is written as before.
    save_to_file({"update": 3}, run, "notes.json")
    assert (outside / "notes.json").is_file()


def test_a_run_folder_swapped_while_a_result_is_written_receives_nothing_outside(
    tmp_path: Path, outside: Path
):
    """The swap comes after the write started: the writer (by name, as ffmpeg or pyarrow
    write) still puts its temp into the real folder, and the rename refuses the link."""
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "ippo" / "run0"
    run.mkdir(parents=True)
    before = folder_state(outside)
    with (
        results_root(results),
        pytest.raises(ContainmentError),
        atomic_output(run / "figure.png") as tmp,
    ):
        run.rename(run.with_name("run0.away"))
        run.symlink_to(outside)
        # A child process writes by name, as the video and figure writers do.
        subprocess.run(
            [sys.executable, "-c", f"open({str(tmp)!r}, 'wb').write(b'frame')"], check=True
        )
    assert folder_state(outside) == before
    assert list(run.with_name("run0.away").iterdir()) == []  # the temp went with the refusal


def test_a_run_lock_released_after_its_folder_was_swapped_deletes_nothing_outside(
    tmp_path: Path, outside: Path
):
    run = tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    run.mkdir(parents=True)
    (outside / RUN_LOCK_NAME).write_text("a user's file of that name")
    before = folder_state(outside)
    lock = RunLock(run)
    assert lock.acquire()
    run.rename(run.with_name("run0.away"))
    run.symlink_to(outside)
    lock.release()
    assert folder_state(outside) == before
    assert not (run.with_name("run0.away") / RUN_LOCK_NAME).exists()  # its own lock went


def test_a_results_lock_released_after_its_folder_was_swapped_deletes_nothing_outside(
    tmp_path: Path, outside: Path
):
    results = tmp_path / "results" / "test"
    lock = ResultsLock(results)
    token = lock.acquire()
    results.rename(results.with_name("test.away"))
    results.symlink_to(outside)
    # The user's file even holds this workflow's token: the release must still not reach it.
    (outside / LOCK_NAME).write_text(json.dumps({"token": token}))
    before = folder_state(outside)
    lock.release()
    assert folder_state(outside) == before
    assert not (results.with_name("test.away") / LOCK_NAME).exists()  # its own lock went
