"""Fixtures of the reliability tests: a small disk to fill and a trained run to damage."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

TMPFS_SIZE = "1m"


# ----------------------------------------------------------------------------- full disk


def _mount_tmpfs(target: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` on `target`; None on success, else why it could not."""
    if shutil.which("mount") is None:
        return "the mount command is not available"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"mount -t tmpfs failed (needs root): {done.stderr.strip() or done.returncode}"
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A freshly mounted 1 MiB tmpfs under tmp_path, unmounted afterwards.

    Skipped, with the reason, where mounting is not allowed (not root).
    """
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    reason = _mount_tmpfs(mount_point, TMPFS_SIZE)
    if reason is not None:
        pytest.skip(f"cannot mount a small tmpfs to fill: {reason}")
    try:
        yield mount_point
    finally:
        # A lazy unmount still detaches the file system when a test left a file open.
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


# ---------------------------------------------------------------------- a real run


@pytest.fixture(scope="session")
def trained_run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny ippo run on hazard_grid with every file the pipeline writes into a run folder:
    config.json, policy.pt, history.json, updates.json, eval.parquet, history.parquet and
    updates.parquet. Tests copy it (`trained_run`) before damaging anything."""
    from src.algos.train import train_run
    from src.analysis.export import export_run
    from src.config.run import make_run_config
    from src.evaluation.evaluate import evaluate_run

    run_dir = tmp_path_factory.mktemp("template") / "runs" / "hazard_grid" / "ippo" / "run0"
    config = make_run_config(
        env_name="hazard_grid",
        algo="ippo",
        num_envs=2,
        timesteps=128,
        rollouts=32,
        mini_batches=2,
        env_params={"max_steps": 20},
        final_policy_eval_episodes=4,
        final_policy_eval_horizons=(1, 10),
    )
    train_run(config, run_dir, progress=False)
    evaluate_run(run_dir, run_dir / "eval.parquet")
    export_run(run_dir, run_dir / "history.parquet", run_dir / "updates.parquet")
    return run_dir


@pytest.fixture
def trained_run(trained_run_template: Path, tmp_path: Path) -> Path:
    """A private copy of the trained run folder."""
    run_dir = tmp_path / "runs" / "hazard_grid" / "ippo" / "run0"
    shutil.copytree(trained_run_template, run_dir)
    return run_dir
