"""src.containment: paths stay inside their folder, only regular files are read or copied,
symlinks are refused rather than followed, archives are bounded by the job's memory."""

from __future__ import annotations

import doctest
import os
import pickle
import socket
from pathlib import Path

import pytest

from src import containment
from src.containment import (
    ContainmentError,
    archive_limit,
    check_archive,
    check_paths,
    check_results_folder,
    check_tree,
    copy_file,
    inside,
    memory_budget,
    open_regular,
    regular_file,
    remove_tree,
    set_memory_budget,
)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder `root` and a folder `outside` it holding a sub-folder and a file."""
    root = tmp_path / "results"
    (root / "runs" / "run0").mkdir(parents=True)
    (root / "runs" / "run0" / "policy.pt").write_bytes(b"policy")
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "data.txt").write_text("precious")
    return root, outside


def _one_line_naming(error: BaseException, path: Path) -> None:
    message = str(error)
    assert "\n" not in message and str(path) in message, message


def test_the_module_examples_hold():
    result = doctest.testmod(containment)
    assert result.attempted > 0 and result.failed == 0


def test_paths_inside_pass_and_fold_dots(layout: tuple[Path, Path]):
    root, _ = layout
    assert inside(root, "runs/run0/policy.pt") == root / "runs" / "run0" / "policy.pt"
    assert inside(root, "runs/./x/../run0") == root / "runs" / "run0"
    assert inside(root, root / "runs" / "new" / "file.json") == root / "runs" / "new" / "file.json"


@pytest.mark.parametrize("path", ["..", "../outside", "runs/../../outside", "/etc/passwd"])
def test_paths_leaving_the_folder_are_refused(layout: tuple[Path, Path], path: str):
    root, _ = layout
    with pytest.raises(ContainmentError, match="leaves") as error:
        inside(root, path)
    assert "\n" not in str(error.value)


def test_relative_roots_take_names_below_them_or_absolute_paths(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
):
    root, _ = layout
    monkeypatch.chdir(root.parent)
    policy = Path("results/runs/run0/policy.pt")
    expected = root / "runs" / "run0" / "policy.pt"
    assert inside("results", "runs/run0/policy.pt") == expected
    assert inside("results", policy.absolute()) == expected
    assert regular_file("results", policy.absolute()) == expected
    assert not inside("results", policy).exists()  # relative means below the root


def test_a_nul_character_is_refused_as_a_path(layout: tuple[Path, Path]):
    root, _ = layout
    with pytest.raises(ContainmentError, match="NUL"):
        inside(root, "runs/x\x00y")


def test_a_symlinked_component_is_refused_naming_it(layout: tuple[Path, Path]):
    root, outside = layout
    link = root / "runs" / "run1"
    link.symlink_to(outside, target_is_directory=True)
    for path in ("runs/run1", "runs/run1/keep/data.txt", "runs/run1/new"):
        with pytest.raises(ContainmentError, match="symbolic link") as error:
            inside(root, path)
        _one_line_naming(error.value, link)
        assert str(outside) in str(error.value)  # where it points


def test_the_root_itself_may_be_a_symlink(layout: tuple[Path, Path], tmp_path: Path):
    root, _ = layout
    alias = tmp_path / "scratch-alias"
    alias.symlink_to(root, target_is_directory=True)
    assert inside(alias, "runs/run0/policy.pt") == alias / "runs" / "run0" / "policy.pt"
    check_results_folder(alias)


def test_check_tree_refuses_links_and_special_files(layout: tuple[Path, Path]):
    root, _ = layout
    check_tree(root)
    fifo = root / "runs" / "run0" / "eval.parquet"
    os.mkfifo(fifo)
    with pytest.raises(ContainmentError, match="FIFO") as error:
        check_tree(root)
    _one_line_naming(error.value, fifo)
    fifo.unlink()
    sock_path = root / "runs" / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(ContainmentError, match="socket"):
            check_tree(root)
    sock_path.unlink()
    link = root / "runs" / "run0" / "video.mp4"
    link.symlink_to("/dev/zero")
    with pytest.raises(ContainmentError, match="symbolic link") as error:
        check_tree(root)
    _one_line_naming(error.value, link)


def test_results_folder_check_leaves_wandbs_own_tree_alone(layout: tuple[Path, Path]):
    root, outside = layout
    own = root / "wandb" / "wandb"
    own.mkdir(parents=True)
    (own / "latest-run").symlink_to(outside)
    check_results_folder(root)
    (root / "wandb" / "elsewhere").symlink_to(outside)
    with pytest.raises(ContainmentError, match="symbolic link"):
        check_results_folder(root)
    check_results_folder(root.parent / "missing")  # nothing there yet: nothing to refuse


def test_regular_files_only_are_read_and_copied(layout: tuple[Path, Path], tmp_path: Path):
    root, _ = layout
    policy = root / "runs" / "run0" / "policy.pt"
    assert regular_file(root, policy) == policy
    with open_regular(root, policy) as handle:
        assert handle.read() == b"policy"
    copied = copy_file(root, policy, tmp_path / "copy.pt")
    assert copied.read_bytes() == b"policy"
    with pytest.raises(FileExistsError):
        copy_file(root, policy, copied)  # never over an existing file (or a planted link)

    zero = root / "runs" / "run0" / "zero.mp4"
    zero.symlink_to("/dev/zero")
    fifo = root / "runs" / "run0" / "fifo.mp4"
    os.mkfifo(fifo)
    for bad in (zero, fifo):
        for call in (
            lambda bad=bad: regular_file(root, bad),
            lambda bad=bad: open_regular(root, bad),
            lambda bad=bad: copy_file(root, bad, tmp_path / "never.mp4"),
        ):
            with pytest.raises(ContainmentError) as error:
                call()
            _one_line_naming(error.value, bad)
    assert not (tmp_path / "never.mp4").exists()
    with pytest.raises(FileNotFoundError, match=r"missing\.mp4"):
        regular_file(root, "runs/run0/missing.mp4")
    with pytest.raises(ContainmentError, match="folder"):
        regular_file(root, "runs/run0")


def test_remove_tree_deletes_inside_only(layout: tuple[Path, Path]):
    root, outside = layout
    run = root / "runs" / "run0"
    (run / "checkpoint" / "update-000001").mkdir(parents=True)
    # A link inside a deleted folder is removed, not followed.
    (run / "checkpoint" / "update-000001" / "elsewhere").symlink_to(outside)
    assert remove_tree(root, "runs/run0/checkpoint") is True
    assert not (run / "checkpoint").exists()
    assert (outside / "keep" / "data.txt").read_text() == "precious"
    assert remove_tree(root, "runs/run0/checkpoint") is False

    link = run / "checkpoint"
    link.symlink_to(outside, target_is_directory=True)
    for path in ("runs/run0/checkpoint", "/tmp", "../outside", ".", str(root)):
        with pytest.raises(ContainmentError):
            remove_tree(root, path)
    assert link.is_symlink() and (outside / "keep" / "data.txt").read_text() == "precious"


def test_check_paths_looks_only_under_the_root(layout: tuple[Path, Path], tmp_path: Path):
    root, outside = layout
    (tmp_path / "code.py").symlink_to(outside)  # outside the results folder: not its business
    check_paths(root, [tmp_path / "code.py", root / "runs" / "run0", root / "runs" / "x.json"])
    (root / "runs" / "run0" / "link").symlink_to(outside)
    with pytest.raises(ContainmentError, match="symbolic link"):
        check_paths(root, [root / "runs" / "run0"])


def test_errors_survive_pickling(tmp_path: Path):
    error = ContainmentError("x is a symbolic link", path=tmp_path / "x")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ContainmentError and str(copy) == str(error) and copy.path == error.path


def test_archive_limit_is_half_the_budget():
    with memory_budget(1000):
        limit, why = archive_limit()
        assert limit == 500 * 1024**2 and "1000" in why
        check_archive([("a.npy", 400 * 1024**2), ("b.npy", 100 * 1024**2)], on_disk=1000)
        with pytest.raises(ContainmentError) as error:
            check_archive([("a.npy", 1024**3), ("b.npy", 10)], on_disk=1024**2)
        message = str(error.value)
        assert "\n" not in message
        assert "1024.0 MB" in message and "a.npy" in message and "500.0 MB" in message
        with memory_budget(None):
            assert "machine" in archive_limit()[1]
        assert archive_limit()[0] == limit
    for bad in (0, -5, True, "1000"):
        with pytest.raises(ValueError, match="mem_mb"):
            set_memory_budget(bad)
