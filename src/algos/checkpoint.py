"""Resumable training checkpoints under `<run dir>/checkpoint/`.

Layout: `checkpoint/update-000012/{trainer.pt, state.pkl, complete.json}`. A checkpoint is
written into a hidden temp folder, each file atomically through `save_to_file`, with
`complete.json` last, then renamed into place in one `os.rename`; older checkpoints are
removed only after that. A kill at any point therefore leaves either the previous complete
checkpoint or the new one, never a half-written one that would be loaded.

`trainer.pt` holds torch state (weights, optimiser, torch RNGs; `weights_only=True`);
`state.pkl` holds what needs pickle (env state, NumPy and Python RNG states, history so far,
subclass state). Both are written by the trainer itself, so unpickling them is trusted.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from src.core.io import load_from_file, save_to_file

__all__ = [
    "CHECKPOINT_DIR",
    "latest_checkpoint",
    "load_checkpoint",
    "remove_checkpoints",
    "save_checkpoint",
]

CHECKPOINT_DIR = "checkpoint"
_NAME = re.compile(r"^update-(\d{6,})$")
_COMPLETE = "complete.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(trainer: Any, run_dir: str | Path) -> Path:
    """Write the trainer's state after update `trainer.update`; returns the checkpoint folder."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"update-{trainer.update:06d}"
    final, tmp = root / name, root / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_to_file(trainer.torch_state(), tmp, "trainer.pt")
    save_to_file(trainer.other_state(), tmp, "state.pkl")
    save_to_file({"update": trainer.update}, tmp, _COMPLETE)
    if final.exists():
        # Left by a run killed after this rename but before the clean-up below.
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for other in root.iterdir():
        if other != final:
            shutil.rmtree(other, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None if there is none."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return None
    found = []
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match and (path / _COMPLETE).is_file():
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def load_checkpoint(trainer: Any, path: str | Path) -> None:
    """Restore `trainer` from a checkpoint folder written by `save_checkpoint`."""
    path = Path(path)
    marker = load_from_file(path, _COMPLETE)
    torch_state = load_from_file(path, "trainer.pt")
    other = load_from_file(path, "state.pkl")
    if int(marker["update"]) != int(other["update"]):
        raise ValueError(
            f"checkpoint {path} is inconsistent: marker says update {marker['update']}, "
            f"state says {other['update']}"
        )
    trainer.load_state(torch_state, other)


def remove_checkpoints(run_dir: str | Path) -> None:
    """Delete the run's checkpoint folder (after training completed)."""
    shutil.rmtree(Path(run_dir) / CHECKPOINT_DIR, ignore_errors=True)
