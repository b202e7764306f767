"""Atomic writes: the target appears only when the write succeeds."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from src.analysis.files import write_text
from src.core.io import atomic_output as atomic_path


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "table.csv"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    write_text("old", target)
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("new")
        raise RuntimeError("killed")
    assert target.read_text() == "old"


def test_written_file_has_the_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    write_text("x", target)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
