"""Containment: nothing planted in a results folder reaches outside it.

A results folder is input too (a shared scratch, a colleague's archive, a synced folder), so
whoever can write into it must not be able to make the pipeline delete, overwrite, copy, read
or inflate anything beyond it. Every such operation on a path under a folder the pipeline owns
goes through this module:

- `inside(root, path)`: the path, after checking that it stays inside `root`: no `..` above
  it, no component below `root` that is a symbolic link, and its resolved form inside the
  resolved `root`. `root` itself may be a symlink (e.g. results on scratch storage); nothing
  below it may be.
- `check_tree(root)`: every entry below `root` is a folder or a regular file (no symbolic
  link, FIFO, socket or device), without following anything; `check_results_folder` also
  refuses a file with hard links outside the folder (a file written in place, such as
  Snakemake's benchmark and log files, would change elsewhere too).
- `regular_file`, `open_regular`, `copy_file`: read and copy regular files only, opened
  without following a symlink and without blocking on a FIFO.
- `remove_tree(root, path)`, `replace(root, source, destination)`: delete, or rename into
  place, a file or folder inside `root` through folder descriptors: every component from the
  job's results folder (`set_results_root`), or from `root`, down to the entry is opened
  without following a link (`O_NOFOLLOW`), and the entry is deleted or renamed relative to its
  folder's descriptor, so a folder swapped for a link in the middle of a run is refused, never
  followed; links further down a deleted folder are removed, never followed.
- Archives (`.npz`, zip-based `.pt`): `check_archive` refuses members that would inflate past
  `archive_limit()`, half the job's memory (`set_memory_budget`, from the job's `mem_mb`), from
  the zip's central directory, before anything is inflated. Outside a workflow job the limit
  is `DEFAULT_READ_LIMIT_MB` (512 MB), raised by the environment variable
  `SAFE_MARL_READ_LIMIT_MB`.

Every refusal is a `ContainmentError` (a `ValueError`) whose message is one line naming the
file and what is wrong with it. The module is a leaf (standard library only), so the
persistence layer can use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import IO

__all__ = [
    "DEFAULT_READ_LIMIT_MB",
    "READ_LIMIT_ENV_VAR",
    "TOOL_TREES",
    "ContainmentError",
    "archive_limit",
    "below_results_root",
    "check_archive",
    "check_paths",
    "check_results_folder",
    "check_results_links",
    "check_tree",
    "copy_file",
    "held_folder",
    "inside",
    "is_regular",
    "memory_bound",
    "memory_budget",
    "open_regular",
    "regular_file",
    "remove_tree",
    "replace",
    "results_root",
    "set_memory_budget",
    "set_results_root",
]

_MB = 1024.0**2
_COPY_CHUNK = 1 << 20


class ContainmentError(ValueError):
    """A path under a results folder that the pipeline refuses to follow, delete, copy or
    inflate; the message is one line naming the file and what is wrong."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        """`message` (one line) and the refused `path`."""
        super().__init__(" ".join(message.split()))
        self.path = None if path is None else Path(path)

    def __reduce__(self) -> tuple:
        # Refusals raised in worker processes (the wandb upload's pool) travel back pickled.
        return (_rebuild_error, (type(self), self.args[0], self.path))


def _rebuild_error(
    cls: type[ContainmentError], message: str, path: Path | None
) -> ContainmentError:
    return cls(message, path=path)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _link_error(path: Path) -> ContainmentError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return ContainmentError(
        f"{path} is a symbolic link{target}: a results folder may not hold symbolic links, "
        "so it is neither followed nor deleted",
        path=path,
    )


# ------------------------------------------------------------------------------ paths


def inside(root: str | Path, path: str | Path) -> Path:
    """`path` as an absolute path, after checking that it stays inside `root`.

    A relative `path` is taken relative to `root` (like `filename` of `save_to_file`), so a
    path built from `root` itself is passed absolute (`Path.absolute()`) or as its part
    below `root`; an absolute one must lie below it. `..`
    may not climb above `root`, no existing component between `root` (exclusive) and `path`
    (inclusive) may be a symbolic link, and the resolved path must lie inside the resolved
    `root`. Components that do not exist yet are fine (a file about to be written). Use the
    returned path: it is the one that was checked (`..` already folded). Raises
    `ContainmentError` naming the path.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> inside(root, "runs/run0/policy.pt") == root / "runs" / "run0" / "policy.pt"
    True
    >>> inside(root, "../elsewhere")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    src.containment.ContainmentError: ../elsewhere leaves ...
    """
    if "\x00" in os.fspath(path):
        raise ContainmentError(f"{os.fspath(path)!r} contains a NUL character", path=None)
    base = Path(os.path.abspath(root))
    given = Path(path)
    target = Path(os.path.abspath(base / given))
    try:
        relative = target.relative_to(base)
    except ValueError:
        raise ContainmentError(f"{given} leaves {base}", path=target) from None
    probe = base
    for part in relative.parts:
        probe = probe / part
        try:
            mode = os.lstat(probe).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break  # the rest does not exist yet: nothing there to follow
        if stat.S_ISLNK(mode):
            raise _link_error(probe)
    if not target.resolve().is_relative_to(base.resolve()):
        raise ContainmentError(f"{target} resolves outside {base}", path=target)
    return target


def is_regular(path: str | Path) -> bool:
    """Whether `path` itself (not what a symlink points to) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def regular_file(root: str | Path, path: str | Path) -> Path:
    """`inside(root, path)`, which must be a regular file (not a symlink, FIFO, socket,
    device or folder). Raises `FileNotFoundError` if it does not exist, else
    `ContainmentError`, both naming the path."""
    target = inside(root, path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file", str(target)) from None
    if not stat.S_ISREG(mode):
        raise ContainmentError(
            f"{target} is {_kind(mode)}, not a regular file: it is neither read nor copied",
            path=target,
        )
    return target


def open_regular(root: str | Path, path: str | Path, *, limit: int | None = None) -> IO[bytes]:
    """Open `inside(root, path)` for reading, refusing anything but a regular file.

    The file is opened without following a symlink (`O_NOFOLLOW`) and without blocking on a
    FIFO (`O_NONBLOCK`), and checked on the open descriptor, so a file swapped after a check
    is still refused. With `limit` (bytes), a larger file is refused too, before any of it
    is read.
    """
    target = inside(root, path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _link_error(target) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ContainmentError(
                f"{target} is {_kind(mode)}, not a regular file: it is neither read nor copied",
                path=target,
            )
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise ContainmentError(
                f"{target} holds {size / _MB:.1f} MB, above the limit of {limit / _MB:.1f} MB "
                "for this file: it is not read",
                path=target,
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def copy_file(
    root: str | Path, source: str | Path, destination: str | Path, *, limit: int | None = None
) -> Path:
    """Copy the regular file `inside(root, source)` to `destination`, a new file.

    The source is opened with `open_regular` (a symlink to `/dev/zero` is refused, never
    read); `destination` must not exist yet (it is created exclusively, so a planted link
    there is not followed either). With `limit` (bytes), a larger source is refused before
    anything is copied, and one that grows past it while being copied is refused too (the
    partial copy is deleted). Returns `destination`.
    """
    out = Path(destination)
    target = inside(root, source)
    with open_regular(root, target, limit=limit) as src, open(out, "xb") as dst:
        copied = 0
        while chunk := src.read(_COPY_CHUNK):
            copied += len(chunk)
            if limit is not None and copied > limit:
                dst.close()
                out.unlink()
                raise ContainmentError(
                    f"{target} grew past the limit of {limit / _MB:.1f} MB while being "
                    "copied: the copy is deleted",
                    path=target,
                )
            dst.write(chunk)
    return out


def check_tree(
    root: str | Path,
    path: str | Path = ".",
    *,
    skip: Iterable[str] = (),
    links_inside: bool = False,
) -> None:
    """Refuse the first symlink or non-regular file below `inside(root, path)`.

    Walks the folder without following anything; folders and regular files pass. `skip`
    names sub-folders (relative to `root`, POSIX form) whose contents are not examined. A
    missing folder passes; a regular file passes. With `links_inside`, a regular file with
    more than one hard link is refused too unless every link lies in the walked folder (the
    skipped sub-folders included): a tool that writes the file in place (Snakemake's log and
    benchmark files) would change it under its names elsewhere.
    """
    top = inside(root, path)
    base = Path(os.path.abspath(root))
    skipped = {PurePosixPath(name) for name in skip}
    try:
        # Following a link is fine here: inside() refused every link below the root, and the
        # root itself may be one.
        mode = os.stat(top).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if not stat.S_ISDIR(mode):
        raise ContainmentError(f"{top} is {_kind(mode)}, not a regular file", path=top)
    # (device, inode) of a file with several links -> [a checked name or None, links, seen]
    linked: dict[tuple[int, int], list] = {}
    pending = [(top, False)]
    while pending:
        folder, quiet = pending.pop()
        if not quiet and PurePosixPath(folder.relative_to(base).as_posix()) in skipped:
            if not links_inside:
                continue
            quiet = True  # walked only to count the links of files outside it
        with os.scandir(folder) as entries:
            for entry in entries:
                entry_path = Path(entry.path)
                if quiet:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry_path, True))
                    elif entry.is_file(follow_symlinks=False):
                        _count_link(linked, entry, None)
                    continue
                if entry.is_symlink():
                    raise _link_error(entry_path)
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry_path, False))
                elif not entry.is_file(follow_symlinks=False):
                    kind = _kind(entry.stat(follow_symlinks=False).st_mode)
                    raise ContainmentError(
                        f"{entry_path} is {kind}, not a regular file: a results folder holds "
                        "folders and regular files only",
                        path=entry_path,
                    )
                elif links_inside:
                    _count_link(linked, entry, entry_path)
    for name, links, seen in linked.values():
        if name is not None and seen < links:
            raise ContainmentError(
                f"{name} has {links} hard links, {links - seen} of them outside {base}: "
                "Snakemake writes its log and benchmark files in place, so a rerun would "
                "change the file under its other names too (a `cp -al` copy, say); give it a "
                "copy of its own (cp --no-preserve=links) or delete it",
                path=name,
            )


def _count_link(linked: dict[tuple[int, int], list], entry: os.DirEntry, name: Path | None) -> None:
    """Count one name of a regular file with several hard links (`check_tree`); `name`: the
    path to refuse it by (None: a name in a skipped folder, counted only)."""
    info = entry.stat(follow_symlinks=False)
    if info.st_nlink < 2:
        return
    record = linked.setdefault((info.st_dev, info.st_ino), [None, info.st_nlink, 0])
    record[2] += 1
    if record[0] is None:
        record[0] = name


TOOL_TREES = ("wandb/wandb",)
"""Folders of a results folder (relative, POSIX) whose contents belong to a tool that makes
symlinks of its own: wandb's offline runs, with its `latest-run` and log aliases (one of them
into `~/.cache/wandb`). `check_results_folder` does not look inside them; the pipeline reads
from them only the offline runs its manifest lists, checked when they are used
(`src.analysis.wandb_upload`)."""


def check_results_folder(folder: str | Path) -> None:
    """Refuse a results folder (`{results_dir}/{experiment_tag}`) holding a symlink, a
    non-regular file, or a file with hard links outside the folder, anywhere outside
    `TOOL_TREES`; one line naming the first one found.

    The folder itself may be a symlink (results on scratch storage) or missing. Hard links
    inside the folder pass (training keeps a second name of its running log).
    """
    check_tree(folder, skip=TOOL_TREES, links_inside=True)


def check_results_links(
    results_dir: str | Path, experiment_tag: str, *, allowed: bool = False
) -> None:
    """Refuse a results folder reached through a symbolic link that the config hands over:
    `results_dir` itself, any component of a relative `results_dir` below the working
    directory, or the experiment folder `{results_dir}/{experiment_tag}`; one line naming
    the link and its target. The workflow deletes and rewrites folders there (`figures/`,
    `tables/`, `video_page/`), so a link to someone's own folder would lose their files.
    `allowed` (the config's `results_symlink_ok`) lets links through (results on scratch
    storage).
    """
    if allowed:
        return
    given = Path(results_dir)
    probes = [given]
    if not given.is_absolute():
        probes = [Path(*given.parts[: index + 1]) for index in range(len(given.parts))]
    probes += [given / part for part in Path(experiment_tag).parts]
    for probe in probes:
        if probe.name in ("", ".", ".."):
            continue
        try:
            mode = os.lstat(probe).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing below exists yet, so nothing there to follow
        if stat.S_ISLNK(mode):
            raise ContainmentError(
                f"results folder {os.path.abspath(probe)} is a symbolic link to "
                f"{os.path.realpath(probe)}: the workflow deletes and rewrites figures/, "
                "tables/ and video_page/ in it, so it does not follow the link; point "
                "results_dir at the folder itself, or set results_symlink_ok: true if the "
                "link is yours",
                path=probe,
            )


def check_paths(root: str | Path, paths: Iterable[str | Path]) -> None:
    """Check every path of `paths` that lies lexically under `root` with `inside`, and what
    exists there with `check_tree` (a folder's whole contents); other paths are ignored.

    This is the check of a workflow job's inputs, outputs and logs against its results
    folder.
    """
    base = Path(os.path.abspath(root))
    for path in paths:
        candidate = Path(os.path.abspath(path))
        if candidate == base or candidate.is_relative_to(base):
            check_tree(base, inside(base, candidate))


# ---------------------------------------------------------------- folders by descriptor

_results_root: Path | None = None

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def set_results_root(folder: str | Path | None) -> None:
    """Set the results folder of the current job (`{results_dir}/{experiment_tag}`), or None.

    `remove_tree` and `replace` on a path below it walk down from it, so a run folder or a
    checkpoint folder swapped for a link while the job runs is refused even where it is the
    `root` they are given. The folder itself is opened as named (it may be a link the config
    allows, `results_symlink_ok`; the workflow's start check decides that).
    """
    global _results_root
    _results_root = None if folder is None else Path(os.path.abspath(folder))


@contextlib.contextmanager
def results_root(folder: str | Path | None) -> Iterator[None]:
    """`set_results_root(folder)` for the duration of a block, then the previous folder."""
    previous = _results_root
    set_results_root(folder)
    try:
        yield
    finally:
        set_results_root(previous)


def below_results_root(path: str | Path) -> bool:
    """Whether `path` lies below the results folder of the current job (`set_results_root`)."""
    anchor = _results_root
    target = Path(os.path.abspath(path))
    return anchor is not None and target != anchor and target.is_relative_to(anchor)


def _walk_start(base: Path) -> tuple[Path, tuple[str, ...]]:
    """(folder opened as named, names walked below it without following links) for the root
    folder `base`: from the results folder when `base` lies at or below it, else from the
    parent of `base` (so `base` itself is no link either)."""
    anchor = _results_root
    if anchor is not None and (base == anchor or base.is_relative_to(anchor)):
        return anchor, base.relative_to(anchor).parts
    if base.parent == base:
        return base, ()
    return base.parent, (base.name,)


def _open_folder(start: Path, names: Sequence[str]) -> int | None:
    """A descriptor of `start/names...`: `start` opened as named, every name below it with
    `O_NOFOLLOW | O_DIRECTORY` relative to the folder above; None when one of them does not
    exist or is no folder. A link among them is refused (`ContainmentError` naming it)."""
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    where = start
    try:
        for name in names:
            where = where / name
            try:
                child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as error:
                if error.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise
                _refuse_link(fd, name, where)
                os.close(fd)
                return None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_link(fd: int, name: str, where: Path) -> None:
    """Raise the link error of `where` if the entry `name` of the folder `fd` is a link."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):
        raise _link_error(where)


@contextlib.contextmanager
def _parent_folder(root: str | Path, path: str | Path) -> Iterator[tuple[Path, int | None, str]]:
    """(checked path, descriptor of its folder or None if that folder is missing, its name),
    for a path inside `root` that is not `root` itself; the descriptor is closed after."""
    target = inside(root, path)
    base = Path(os.path.abspath(root))
    if target == base:
        raise ContainmentError(f"{path!s} names {target} itself, not a path inside it", path=target)
    start, names = _walk_start(base)
    fd = _open_folder(start, (*names, *target.relative_to(base).parts[:-1]))
    try:
        yield target, fd, target.name
    finally:
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def held_folder(path: str | Path) -> Iterator[Path]:
    """The folder `path` below the job's results folder (`set_results_root`), opened through
    descriptors as `remove_tree` walks (no link followed on the way), held open for the block.

    Yields a name of that very folder, `/proc/<pid>/fd/<fd>`, which a writer (this process or
    a child it starts) can put files into by name: a folder swapped for a link at `path` while
    the block runs does not redirect them. Raises `FileNotFoundError` when the folder is
    missing, `ContainmentError` when a link is on the way.
    """
    target = Path(os.path.abspath(path))
    if not below_results_root(target):
        raise ContainmentError(f"{target} is not below the job's results folder", path=target)
    start, names = _walk_start(target)
    fd = _open_folder(start, names)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(target))
    try:
        yield Path(f"/proc/{os.getpid()}/fd/{fd}")
    finally:
        os.close(fd)


def remove_tree(root: str | Path, path: str | Path) -> bool:
    """Delete the file or folder `inside(root, path)`; False if there was nothing to delete.

    Works through descriptors: the folders from the results folder (`set_results_root`), or
    from `root`, down to the entry are opened one at a time without following a link, the
    entry is examined and deleted relative to its folder's descriptor, and a folder's contents
    are deleted by `shutil.rmtree` on that descriptor (which never follows a link either). So
    `root` itself, a symlink at any step, or a folder swapped for one while this runs is
    refused, never followed nor deleted. Raises `ContainmentError` naming the path.
    """
    with _parent_folder(root, path) as (target, fd, name):
        if fd is None:
            return False
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(mode):
            raise _link_error(target)
        if not stat.S_ISDIR(mode):
            try:
                os.unlink(name, dir_fd=fd)  # a link swapped in meanwhile goes, not its target
            except FileNotFoundError:
                return False
            return True
        try:
            # On a descriptor, rmtree opens each folder without following links and checks
            # that it is the folder it examined (shutil.rmtree.avoids_symlink_attacks).
            shutil.rmtree(name, dir_fd=fd)
        except FileNotFoundError:
            return False
        except OSError:
            _refuse_link(fd, name, target)  # swapped for a link after the check above
            raise
        return True


def replace(root: str | Path, source: str | Path, destination: str | Path) -> None:
    """Rename `inside(root, source)` onto `inside(root, destination)` (`os.replace`), both
    named relative to descriptors of their folders walked as in `remove_tree`, so neither is
    reached through a link. A link at either name is refused (`ContainmentError`)."""
    with (
        _parent_folder(root, source) as (old, old_fd, old_name),
        _parent_folder(root, destination) as (new, new_fd, new_name),
    ):
        for fd, name, where in ((old_fd, old_name, old), (new_fd, new_name, new)):
            if fd is None:
                raise FileNotFoundError(errno.ENOENT, "no such folder", str(where.parent))
            _refuse_link(fd, name, where)
        os.replace(old_name, new_name, src_dir_fd=old_fd, dst_dir_fd=new_fd)


# ---------------------------------------------------------------------------- archives

_budget_mb: float | None = None


def set_memory_budget(mem_mb: float | None) -> None:
    """Set the memory (MB) the current job was granted (a workflow job's `mem_mb`); None
    falls back to the read limit outside a job. `archive_limit` is half of it."""
    global _budget_mb
    if mem_mb is not None and (
        isinstance(mem_mb, bool) or not isinstance(mem_mb, int | float) or not mem_mb > 0
    ):
        raise ValueError(f"mem_mb must be a positive number of MB, got {mem_mb!r}")
    _budget_mb = None if mem_mb is None else float(mem_mb)


@contextlib.contextmanager
def memory_budget(mem_mb: float | None) -> Iterator[None]:
    """`set_memory_budget(mem_mb)` for the duration of a block, then the previous budget."""
    previous = _budget_mb
    set_memory_budget(mem_mb)
    try:
        yield
    finally:
        set_memory_budget(previous)


def memory_bound() -> tuple[float, str]:
    """(MB, where the number comes from): the memory the current job may use, its `mem_mb`
    (`set_memory_budget`); outside a workflow job the machine's physical memory."""
    if _budget_mb is not None:
        return _budget_mb, f"the job's mem_mb of {_budget_mb:g}"
    machine = _machine_mb()
    return machine, f"the machine's {machine:.0f} MB (no mem_mb set)"


def _machine_mb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / _MB
    except (ValueError, OSError):
        return 8192.0


DEFAULT_READ_LIMIT_MB = 512.0
"""The most (MB) an archive may inflate to, or a Parquet file's columns decode to, outside a
workflow job (no `mem_mb`: `src.core.io.load_from_file` called from a notebook or a script),
capped at half the machine's memory. Raise it by setting this attribute or, for a whole
process and its children, the environment variable `SAFE_MARL_READ_LIMIT_MB`."""

READ_LIMIT_ENV_VAR = "SAFE_MARL_READ_LIMIT_MB"
"""The environment variable that sets the read limit (MB) outside a workflow job; a job's
`mem_mb` takes precedence."""


def archive_limit() -> tuple[int, str]:
    """(bytes, where the number comes from): the most an archive's members may inflate to,
    or a Parquet file's columns decode to, before anything is inflated or decoded.

    Half the job's memory: a checkpoint is loaded next to the trainer it restores, which
    holds about as much again. Without a budget (outside a workflow job), the environment
    variable `SAFE_MARL_READ_LIMIT_MB` when set, else `DEFAULT_READ_LIMIT_MB` (at most half
    the machine's physical memory). A value of the variable that is not a positive number
    raises `ValueError` naming it.
    """
    if _budget_mb is not None:
        return int(_budget_mb / 2 * _MB), f"half the job's mem_mb of {_budget_mb:g}"
    raised = os.environ.get(READ_LIMIT_ENV_VAR, "").strip()
    if raised:
        try:
            value = float(raised)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{READ_LIMIT_ENV_VAR}={raised!r}: expected a positive number of MB")
        return int(value * _MB), f"{READ_LIMIT_ENV_VAR}={raised}, no mem_mb set"
    machine = _machine_mb()
    limit_mb = min(float(DEFAULT_READ_LIMIT_MB), machine / 2)
    return int(limit_mb * _MB), (
        f"the default of {limit_mb:g} MB outside a workflow job, at most half the machine's "
        f"{machine:.0f} MB; raise it with {READ_LIMIT_ENV_VAR}"
    )


def check_archive(members: Sequence[tuple[str, int]], on_disk: int) -> None:
    """Refuse an archive whose members (name, uncompressed size from the zip's central
    directory) would inflate past `archive_limit()`, before anything is inflated.

    The message (one line) gives the total, the largest member, the size on disk and the
    limit; the caller adds the file's name.
    """
    total = sum(size for _, size in members)
    limit, why = archive_limit()
    if total <= limit:
        return
    name, largest = max(members, key=lambda member: member[1])
    raise ContainmentError(
        f"its members would inflate to {total / _MB:.1f} MB (largest {name}: "
        f"{largest / _MB:.1f} MB) from {on_disk / _MB:.1f} MB on disk, above the limit of "
        f"{limit / _MB:.1f} MB ({why}); nothing was inflated"
    )
