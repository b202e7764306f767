"""Helpers of the reliability tests: filling a disk, damaging bytes, child environments."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fill_disk(folder: Path) -> Path:
    """Write a filler file into `folder` until the file system reports ENOSPC; return it."""
    filler = folder / f"filler-{uuid.uuid4().hex}"
    # Unbuffered, so the ENOSPC surfaces here and not later when a buffer is flushed on close.
    with open(filler, "wb", buffering=0) as handle:
        for chunk in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\xff" * chunk)
    probe = folder / f"probe-{uuid.uuid4().hex}"
    try:
        with open(probe, "wb", buffering=0) as handle:
            handle.write(b"\xff" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
    else:
        raise AssertionError(f"{folder} still accepts writes after filling it")
    finally:
        probe.unlink(missing_ok=True)
    return filler


def sample_positions(size: int, count: int = 60) -> list[int]:
    """About `count` byte offsets spread over a file of `size` bytes, both ends included."""
    if size <= 0:
        return []
    step = max(1, size // count)
    return sorted({*range(0, size, step), *range(min(size, 16)), size - 1})


def flipped(data: bytes, position: int) -> bytes:
    """`data` with every bit of the byte at `position` inverted."""
    damaged = bytearray(data)
    damaged[position] ^= 0xFF
    return bytes(damaged)


def garbage(size: int, seed: int = 0) -> bytes:
    """`size` pseudo-random bytes (fixed seed: the same damage in every test run)."""
    import numpy as np

    return (
        np.random.default_rng(seed).integers(0, 256, size=max(size, 64), dtype=np.uint8).tobytes()
    )


def folder_state(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (relative path -> bytes): to show that nothing was written."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a subprocess: this interpreter's, the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(part for part in (str(REPO), env.get("PYTHONPATH")) if part)
    env.update(extra)
    return env


def checkpoint_after_two_updates(config: dict, run_dir: Path) -> Path:
    """Train `config` until update 2, leave its checkpoint in `run_dir` and stop (no policy)."""
    from src.algos.checkpoint import save_checkpoint
    from src.algos.train import build_trainer, make_vector_env_for
    from src.config.run import RunConfig

    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))

    class StopAfterTwo:
        def on_epoch_end(self, trainer: object, epoch: int) -> None:
            pass

        def on_update_end(self, trainer: object) -> None:
            if trainer.update == 2:
                save_checkpoint(trainer, run_dir)
                raise KeyboardInterrupt

    with contextlib.suppress(KeyboardInterrupt):
        trainer.train(callbacks=[StopAfterTwo()], progress=False)
    assert (run_dir / "checkpoint").is_dir()
    return run_dir
