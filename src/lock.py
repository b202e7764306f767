"""One lock per results folder, so two workflows never write the same results at once.

Snakemake's own lock guards a working directory; two Snakemake processes started from
different directories with the same `results_dir` would both run and race on the same files.
The workflow therefore takes `ResultsLock` on `{results_dir}/{experiment_tag}/` when it starts
executing jobs and releases it when it ends. The lock file holds the owner's pid, host,
working directory, start time and a random token; the jobs of the workflow inherit the
folder and the token (`LOCK_ENV_VAR`, see `job_environment`) and `check_job_lock` refuses to
write when the folder is held by another workflow.

A lock left by a process that died (SIGKILL, a lost node) is stale: on the same host it is
recognised (its pid is gone) and taken over; from another host the message names the file to
delete once that workflow is known to be gone.

Taking over is atomic. Two workflows that both find the same stale lock must not both win
(one deleting the lock the other has just created), so the stale file is deleted only under
an exclusive `flock` on `.lock.takeover` (a file kept beside it), after reading the lock again
under it: the second contender then finds the first one's live lock and is refused. The new
lock itself is always created with `O_EXCL`. The lock files are read only if they are regular
files (`src.containment`): a `.lock` that is a symlink or a FIFO is refused in one line. The
contender that holds `.lock.takeover` deletes it before releasing it, whatever happens in
between, and a contender that gets the `flock` of a file no longer under that name (deleted by
the previous holder) starts again on the current one: no `.lock.takeover` stays behind.

One trainer per run folder: `RunLock` is an exclusive `flock` on `.train.lock` in the run
folder, taken by `train_run` before it reads the checkpoint and held until training ends. The
kernel releases it when its holder dies, even by SIGKILL, so it is never stale; a second
trainer of the same folder (a rerun while a job of a killed workflow still trains) is refused
in one line naming the folder and the pid that holds it. The file holds the holder's pid, host
and start time, and is deleted by its holder on release (under the lock, with the same
identity check as `.lock.takeover`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import socket
import stat
import time
from pathlib import Path
from typing import Any

from src.containment import ContainmentError, inside, open_regular
from src.processes import pid_alive

__all__ = [
    "LOCK_ENV_VAR",
    "LOCK_NAME",
    "RUN_LOCK_NAME",
    "LockHeldError",
    "ResultsLock",
    "RunLock",
    "check_job_lock",
    "job_environment",
]

LOCK_NAME = ".lock"
TAKEOVER_NAME = ".lock.takeover"
RUN_LOCK_NAME = ".train.lock"
LOCK_ENV_VAR = "SAFE_MARL_RESULTS_LOCK"
_TAKEOVER_WAIT = 10.0  # seconds; another contender holds the takeover lock for microseconds
_RECORD_LIMIT = 65536  # bytes: an owner record is a few hundred


class LockHeldError(RuntimeError):
    """The results folder is locked by another workflow; the message is one line."""


def _read(path: Path, *, shown: Path | None = None) -> dict[str, Any] | None:
    """The owner record of a lock file, None if it vanished; {} if it cannot be parsed.

    Raises `LockHeldError` if the lock file is a symlink or not a regular file, naming it as
    `shown` (the name a user knows, where `path` names it through a held folder).
    """
    try:
        with open_regular(path.parent, path.name) as handle:
            text = handle.read(_RECORD_LIMIT).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except ContainmentError as error:
        why = str(error) if shown is None else str(error).replace(str(path), str(shown))
        raise LockHeldError(f"cannot read the lock: {why}") from None
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _open_lock_file(path: Path, *, folder_fd: int | None = None) -> int:
    """A read-write descriptor of the lock file `path` (created if missing), opened without
    following a symlink (`O_NOFOLLOW`) or blocking on a FIFO (`O_NONBLOCK`) and checked on the
    descriptor: `ContainmentError` if it is not a regular file or has other hard links (a
    write would reach a file outside), `OSError` otherwise. With `folder_fd`, the file is
    `path.name` in the folder that descriptor holds."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        if folder_fd is None:
            fd = os.open(path, flags, 0o644)
        else:
            fd = os.open(path.name, flags, 0o644, dir_fd=folder_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ContainmentError(f"{path}: it is a symbolic link", path=path) from None
        raise
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise ContainmentError(f"{path} is not a regular file", path=path)
    if status.st_nlink > 1:
        os.close(fd)
        raise ContainmentError(
            f"{path} has other hard links: writing it would change a file elsewhere", path=path
        )
    return fd


def _still_named(fd: int, path: Path, *, folder_fd: int | None = None) -> bool:
    """Whether `path` (with `folder_fd`: `path.name` in that folder) still names the file open
    as `fd` (not deleted, nor replaced)."""
    try:
        if folder_fd is None:
            named = os.stat(path, follow_symlinks=False)
        else:
            named = os.stat(path.name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _stale(owner: dict[str, Any]) -> bool:
    """Whether a lock's owner is a process of this host that no longer runs."""
    return (
        owner.get("host") == socket.gethostname()
        and isinstance(owner.get("pid"), int)
        and not pid_alive(owner["pid"])
    )


class ResultsLock:
    """The lock of one results folder (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        """The lock file is `folder/.lock`; nothing is taken yet."""
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.token: str | None = None
        # From `acquire` to `release`: a descriptor of the folder as it was when the lock was
        # taken, through which the lock files are read, created and deleted, so a folder
        # swapped for a link meanwhile leads none of them elsewhere.
        self._folder_fd: int | None = None

    def _file(self, name: str) -> Path:
        """The file `name` of the held folder (its `/proc/<pid>/fd/<fd>` name), or of
        `folder` as named before the folder is held."""
        if self._folder_fd is None:
            return self.folder / name
        return Path(f"/proc/{os.getpid()}/fd/{self._folder_fd}") / name

    def _hold(self) -> None:
        """Open the descriptor of the folder (once)."""
        if self._folder_fd is None:
            flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
            self._folder_fd = os.open(self.folder, flags)

    def _let_go(self) -> None:
        """Close the descriptor of the folder."""
        if self._folder_fd is not None:
            os.close(self._folder_fd)
            self._folder_fd = None

    def _describe(self, owner: dict[str, Any]) -> str:
        if not owner:
            return f"results folder {self.folder} is locked ({self.path} is unreadable)"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
        return (
            f"results folder {self.folder} is in use by snakemake pid {owner.get('pid')} on "
            f"{owner.get('host')} (started {started} in {owner.get('cwd')})"
        )

    def acquire(self) -> str:
        """Take the lock; returns its token. Raises `LockHeldError` if another workflow has it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._hold()
        try:
            return self._acquire()
        except BaseException:
            self._let_go()
            raise

    def _acquire(self) -> str:
        token = secrets.token_hex(16)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "cwd": os.getcwd(),
            "started": time.time(),
            "token": token,
        }
        for _ in range(3):
            try:
                fd = os.open(self._file(LOCK_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = _read(self._file(LOCK_NAME), shown=self.path)
                if owner is None:
                    continue  # released meanwhile: try again
                if _stale(owner):
                    self._remove_stale(owner)
                    continue
                raise LockHeldError(
                    f"{self._describe(owner)}; wait for it to finish, or, if that workflow is "
                    f"gone, delete {self.path}"
                ) from None
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            self.token = token
            return token
        raise LockHeldError(f"could not take {self.path}: it keeps changing; try again")

    def _remove_stale(self, owner: dict[str, Any]) -> None:
        """Delete the lock file if it still holds a stale lock, under the takeover lock.

        The lock is read again under the exclusive `flock`: a contender that judged the same
        stale lock earlier finds the winner's live lock there and deletes nothing. The holder
        deletes `.lock.takeover` before closing it; a contender whose `flock` it was finds the
        name gone (or another file under it) and starts again.
        """
        takeover = self._file(TAKEOVER_NAME)
        deadline = time.monotonic() + _TAKEOVER_WAIT
        while True:
            try:
                fd = _open_lock_file(takeover)
            except ContainmentError as error:
                raise LockHeldError(
                    f"cannot take over the stale lock {self.path} ({self._describe(owner)}): "
                    f"{error}"
                ) from None
            except OSError as error:
                raise LockHeldError(
                    f"cannot take over the stale lock {self.path} ({self._describe(owner)}): "
                    f"{takeover}: {error.strerror}"
                ) from None
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise LockHeldError(
                                f"cannot take over the stale lock {self.path}: another workflow "
                                f"has been taking it over for {_TAKEOVER_WAIT:g} s; try again"
                            ) from None
                        time.sleep(0.01)
                    except OSError as error:
                        # No file locks here (some network file systems): no safe takeover,
                        # and a takeover file of no use to anyone.
                        if _still_named(fd, takeover):
                            with contextlib.suppress(OSError):
                                os.unlink(takeover)
                        raise LockHeldError(
                            f"{self._describe(owner)}, which is gone, but {self.path} cannot "
                            f"be taken over safely here ({error.strerror}); delete {self.path}"
                        ) from None
                if not _still_named(fd, takeover):
                    continue  # deleted by the previous holder after use: take the current one
                try:
                    current = _read(self._file(LOCK_NAME), shown=self.path)
                    if current is not None and _stale(current):
                        with contextlib.suppress(FileNotFoundError):
                            self._file(LOCK_NAME).unlink()
                finally:
                    # Still under the flock: whoever opens the name next gets a new file.
                    with contextlib.suppress(OSError):
                        os.unlink(takeover)
                return
            finally:
                os.close(fd)  # releases the flock

    def release(self) -> None:
        """Remove the lock file if this object holds it (another owner's lock is kept)."""
        if self.token is None:
            return
        try:
            owner = _read(self._file(LOCK_NAME), shown=self.path)
            if owner and owner.get("token") == self.token:
                with contextlib.suppress(FileNotFoundError):
                    self._file(LOCK_NAME).unlink()
        finally:
            self.token = None
            self._let_go()


def job_environment(lock: ResultsLock) -> str:
    """The value of `LOCK_ENV_VAR` that the jobs of the workflow holding `lock` inherit."""
    return json.dumps({"folder": str(lock.folder.resolve()), "token": lock.token})


def check_job_lock() -> None:
    """Inside a workflow job: refuse to write into a results folder held by another workflow.

    The workflow's folder and token arrive in `LOCK_ENV_VAR`; without it (a job started by
    hand, or an executor that does not pass the environment on) there is nothing to compare
    and the check passes.
    """
    value = os.environ.get(LOCK_ENV_VAR)
    if not value:
        return
    try:
        mine = json.loads(value)
        lock, token = ResultsLock(mine["folder"]), mine["token"]
    except (ValueError, KeyError, TypeError):
        raise LockHeldError(f"{LOCK_ENV_VAR}={value!r}: not a lock of this workflow") from None
    owner = _read(lock.path)
    if owner is not None and owner.get("token") != token:
        raise LockHeldError(
            f"{lock._describe(owner)}: this job belongs to another workflow and writes nothing"
        )


def _holder(fd: int) -> dict[str, Any]:
    """The owner record in a run lock held by another process ({} if it holds none yet: the
    holder writes it right after taking the lock, so it is read again for a moment)."""
    deadline = time.monotonic() + 1.0
    while True:
        try:
            owner = json.loads(os.pread(fd, _RECORD_LIMIT, 0).decode("utf-8", errors="replace"))
        except ValueError:
            owner = None
        if isinstance(owner, dict) and isinstance(owner.get("pid"), int):
            return owner
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.02)


class RunLock:
    """The lock of one run folder, held by the process that trains it (module docstring).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with RunLock(folder) as held:
    ...     RunLock(folder).acquire()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    src.lock.LockHeldError: run folder ... is already being trained by pid ...
    """

    def __init__(self, folder: str | Path) -> None:
        """The lock file is `folder/.train.lock`; nothing is taken yet."""
        self.folder = Path(folder)
        self._fd: int | None = None
        self._path: Path | None = None
        # The run folder as it was when the lock was taken: the lock file is opened, checked
        # and deleted relative to it, so a folder swapped for a link later leads nowhere.
        self._folder_fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def _describe(self, owner: dict[str, Any], path: Path) -> str:
        if not owner:
            return (
                f"run folder {self.folder} is already being trained by another process "
                f"({path} is locked); wait for it to finish, then rerun"
            )
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
        pid = owner["pid"]
        where = f"on {owner.get('host')} " if owner.get("host") != socket.gethostname() else ""
        return (
            f"run folder {self.folder} is already being trained by pid {pid} {where}"
            f"(since {started}); wait for it to finish, or stop it (kill {pid}) and rerun to "
            "resume from its last checkpoint"
        )

    def acquire(self) -> bool:
        """Take the lock: True once held. Raises `LockHeldError` (one line naming the folder
        and the pid holding it) if another process holds it, `ContainmentError` if the lock
        file is a symlink or not a regular file. False, holding nothing, where the file system
        has no file locks (some network file systems): nothing to refuse a second trainer by.
        """
        if self._fd is not None:
            return True
        path = inside(self.folder, RUN_LOCK_NAME)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            if self._take(path, folder):
                self._folder_fd, folder = folder, -1
                return True
            return False
        finally:
            if folder >= 0:
                os.close(folder)

    def _take(self, path: Path, folder: int) -> bool:
        """`acquire` on the lock file `path`, named in the folder held as `folder`."""
        for _ in range(100):
            fd = _open_lock_file(path, folder_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _holder(fd)
                os.close(fd)
                raise LockHeldError(self._describe(owner, path)) from None
            except OSError:
                os.close(fd)
                return False
            if not _still_named(fd, path, folder_fd=folder):
                os.close(fd)  # deleted by its previous holder meanwhile: take the current one
                continue
            record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            data = json.dumps(record).encode("utf-8")
            # Written over any record of a holder that died, then cut: never empty meanwhile.
            # Without it (a full disk) the lock holds all the same; a refusal names no pid.
            with contextlib.suppress(OSError):
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            self._fd, self._path = fd, path
            return True
        raise LockHeldError(f"could not take {self.folder / RUN_LOCK_NAME}: it keeps changing")

    def release(self) -> None:
        """Delete the lock file and release the lock, if this object holds it."""
        fd, path, folder = self._fd, self._path, self._folder_fd
        if fd is None or path is None:
            return
        self._fd = self._path = self._folder_fd = None
        try:
            if _still_named(fd, path, folder_fd=folder):
                with contextlib.suppress(FileNotFoundError):
                    if folder is None:
                        os.unlink(path)
                    else:
                        os.unlink(path.name, dir_fd=folder)
        finally:
            os.close(fd)
            if folder is not None:
                os.close(folder)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
