"""Resumable training checkpoints under `<run dir>/checkpoint/`, in formats that run no code.

Layout: `checkpoint/update-000012/{tensors.pt, arrays.npz, state.json, complete.json}`. The
trainer's state (`IPPO.state()`, any nesting of dicts, lists and tuples) is split by value
type: tensors and torch state dicts (dicts with non-string keys, e.g. an optimizer's) go to
`tensors.pt` (loaded with `weights_only=True`), NumPy arrays to `arrays.npz` (loaded with
`allow_pickle=False`), everything else (numbers, strings, bools, None) stays in `state.json`,
where a placeholder marks each moved value. Nothing is pickled, so a results folder copied
from elsewhere can be resumed without running code from it; any other file in a checkpoint
folder (e.g. a planted `state.pkl`) is never read.

A checkpoint is written into a hidden temp folder, each file atomically through
`save_to_file`, with `complete.json` last, then renamed into place in one rename
(`containment.replace`, through folder descriptors); older checkpoints are removed only after
that. A kill at any point therefore leaves either the
previous complete checkpoint or the new one, never a half-written one that would be loaded.

A checkpoint resumes only the run that wrote it: `complete.json` holds the run's fingerprint
(`run_fingerprint`: its config and the code that trains it, `training_code`: the import
closure of `src.algos.train` with the run's own algorithm and task, built-in or given by import
path, the files the workflow's train job reruns on), and `train_run` starts afresh from a
checkpoint with another fingerprint (or none), so a run resumed after the code or the config
changed never mixes updates of two versions, while an edit the training never imports (a
figure, the summary, another algorithm) leaves part-way trainings resumable.

The checkpoint folder lies inside the run folder and is deleted and re-created there, so
every path of it goes through `src.containment`: a `checkpoint` that is a symlink (to a folder
outside, whose sub-folders the clean-up would delete), or a symlink, FIFO or device inside it,
is refused with a `ContainmentError` naming it before anything is read or deleted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.containment import check_tree, inside, remove_tree, replace
from src.core.io import fsync_dir, load_from_file, save_to_file
from src.runfiles import RunFiles

__all__ = [
    "CHECKPOINT_FILES",
    "checkpoint_fingerprint",
    "code_fingerprint",
    "join_state",
    "latest_checkpoint",
    "load_checkpoint",
    "remove_checkpoints",
    "run_fingerprint",
    "save_checkpoint",
    "split_state",
    "training_code",
]

_NAME = re.compile(r"^update-(\d{6,})$")
_COMPLETE = "complete.json"
_TENSORS = "tensors.pt"
_ARRAYS = "arrays.npz"
_STATE = "state.json"
CHECKPOINT_FILES = (_TENSORS, _ARRAYS, _STATE, _COMPLETE)
"""The files of one checkpoint, in the order they are written."""

# Placeholder keys in state.json.
_TENSOR, _ARRAY, _TUPLE = "__tensor__", "__array__", "__tuple__"


def split_state(
    tree: Any, path: str = "state"
) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    """Split a state tree into (JSON tree, torch values, arrays); see the module docstring.

    Raises `TypeError` naming the path of a value none of the three formats holds.
    """
    tensors: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}

    def walk(value: Any, where: str) -> Any:
        if value is None or type(value) in (str, bool, int, float):
            return value
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, torch.Tensor):
            key = f"t{len(tensors)}"
            tensors[key] = value
            return {_TENSOR: key}
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                raise TypeError(f"{where} is an object array, which a checkpoint cannot hold")
            key = f"a{len(arrays)}"
            arrays[key] = value
            return {_ARRAY: key}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and not {_TENSOR, _ARRAY, _TUPLE} & set(
                value
            ):
                return {k: walk(v, f"{where}[{k!r}]") for k, v in value.items()}
            # Torch state dicts key by parameter index: torch's own format keeps them as is.
            key = f"t{len(tensors)}"
            tensors[key] = value
            return {_TENSOR: key}
        if isinstance(value, tuple):
            return {_TUPLE: [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        raise TypeError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which a "
            "checkpoint cannot hold (dicts, lists, tuples, numbers, strings, arrays, tensors)"
        )

    return walk(tree, path), tensors, arrays


def join_state(tree: Any, tensors: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of `split_state`."""
    if isinstance(tree, list):
        return [join_state(v, tensors, arrays) for v in tree]
    if isinstance(tree, dict):
        if set(tree) == {_TENSOR}:
            return tensors[tree[_TENSOR]]
        if set(tree) == {_ARRAY}:
            return arrays[tree[_ARRAY]]
        if set(tree) == {_TUPLE}:
            return tuple(join_state(v, tensors, arrays) for v in tree[_TUPLE])
        return {k: join_state(v, tensors, arrays) for k, v in tree.items()}
    return tree


_SOURCE = Path(__file__).resolve().parents[1]
"""The `src` package."""


def _hash_files(paths: list[Path], digest: Any, base: Path) -> None:
    """Add each file's name (its path under `base`, or its absolute path outside) and its
    content's SHA-256 to `digest`."""
    for path in paths:
        name = path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 of the `src` package: every `.py` file's path and content."""
    digest = hashlib.sha256()
    _hash_files(sorted(_SOURCE.rglob("*.py")), digest, base=_SOURCE)
    return digest.hexdigest()


def training_code(config: Any) -> list[Path]:
    """The files of the code that trains a run (`RunConfig`, or its flat form): the import
    closure of `src.algos.train` with the modules of the run's algorithm and task (a built-in
    algorithm's own module, the user's task or algorithm given by import path and what they
    import), as `src.code_inputs.job_code` lists them for the workflow's train job."""
    from src.code_inputs import job_code  # here: code_inputs imports the algorithm registry

    flat = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    env, algo, custom = str(flat["env_name"]), str(flat["algo"]), flat.get("custom", {})
    _, files = job_code(
        _SOURCE / "algos" / "train.py",
        envs={env: custom["env"]} if "env" in custom else {},
        algos={algo: custom["algo"]} if "algo" in custom else {},
        env=env,
        algo=algo,
    )
    return files


def run_fingerprint(config: Any) -> str:
    """SHA-256 of what a run's numbers depend on: its config in flat form (`RunConfig.to_dict`,
    or a mapping of it) and the code that trains it (`training_code`; files inside the
    repository by their path in it, the user's elsewhere by their absolute path)."""
    flat = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode())
    _hash_files(training_code(flat), digest, _SOURCE.parent)
    return digest.hexdigest()


def checkpoint_fingerprint(path: str | Path) -> str | None:
    """The run fingerprint a complete checkpoint folder was written with (None: none
    recorded, a checkpoint from before fingerprints)."""
    marker = load_from_file(Path(path), _COMPLETE)
    value = marker.get("fingerprint") if isinstance(marker, dict) else None
    return value if isinstance(value, str) else None


def _checkpoint_root(run_dir: str | Path) -> Path:
    """The run's checkpoint folder, refused if it (or anything above it in the run folder)
    is a symlink."""
    files = RunFiles(run_dir)
    return inside(files.root, files.NAMES["checkpoint"])


def save_checkpoint(trainer: Any, run_dir: str | Path, *, fingerprint: str | None = None) -> Path:
    """Write the trainer's state after update `trainer.update`; returns the checkpoint folder.

    `fingerprint`: the run's (`run_fingerprint`), by default that of `trainer.config`."""
    if fingerprint is None:
        fingerprint = run_fingerprint(trainer.config)
    root = _checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"update-{trainer.update:06d}"
    final, tmp = root / name, root / f".tmp-{name}"
    remove_tree(root, tmp.name)
    tmp.mkdir()
    tree, tensors, arrays = split_state(trainer.state())
    save_to_file(tensors, tmp, _TENSORS)
    save_to_file(arrays, tmp, _ARRAYS)
    save_to_file(tree, tmp, _STATE)
    save_to_file({"update": trainer.update, "fingerprint": fingerprint}, tmp, _COMPLETE)
    # Left by a run killed after this rename but before the clean-up below.
    remove_tree(root, name)
    replace(root, tmp, final)
    fsync_dir(root)
    for other in root.iterdir():
        if other != final:
            # A failed removal of an old checkpoint is harmless (the newest is complete), but a
            # planted symlink is refused (ContainmentError is no OSError).
            with contextlib.suppress(OSError):
                remove_tree(root, other.name)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None if there is none.

    Refuses (`ContainmentError`) a checkpoint folder that is, or holds, a symlink or another
    non-regular file, before anything in it is read.
    """
    root = _checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    check_tree(root)
    found = []
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match and (path / _COMPLETE).is_file():
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def load_checkpoint(trainer: Any, path: str | Path) -> None:
    """Restore `trainer` from a checkpoint folder written by `save_checkpoint`."""
    path = Path(path)
    check_tree(path)  # its files are read only if none of them leads elsewhere
    marker = load_from_file(path, _COMPLETE)
    tensors = load_from_file(path, _TENSORS)
    arrays = load_from_file(path, _ARRAYS)
    tree = load_from_file(path, _STATE)
    state = join_state(tree, tensors, arrays)
    if not isinstance(state, dict) or "update" not in state:
        raise ValueError(f"checkpoint {path / _STATE} holds no trainer state")
    if int(marker["update"]) != int(state["update"]):
        raise ValueError(
            f"checkpoint {path} is inconsistent: marker says update {marker['update']}, "
            f"state says {state['update']}"
        )
    trainer.load_state(state)


def remove_checkpoints(run_dir: str | Path) -> None:
    """Delete the run's checkpoint folder (after training completed).

    A checkpoint folder that is a symlink is refused (`ContainmentError`), never followed.
    """
    with contextlib.suppress(OSError):
        remove_tree(RunFiles(run_dir).root, RunFiles.NAMES["checkpoint"])
