"""What a results folder from elsewhere and an oversized config can and cannot do.

- No file the pipeline reads runs code: a planted pickle in a checkpoint is never read, and a
  pickle payload under the name of a checkpoint or policy file is refused, naming the file.
- Oversized or malformed configs are refused before any job, in one line naming the key, the
  value and the limit, quickly and without allocating.
- One workflow per results folder: a second Snakemake on the same `results_dir` from another
  working directory is refused while the first runs.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from src.algos.checkpoint import latest_checkpoint
from src.algos.train import train_run
from src.config.workflow import WorkflowConfigError, check_workflow_config
from src.containment import ContainmentError
from src.core.io import CorruptFileError, UnsafeFormatError, load_from_file
from src.evaluation.evaluate import evaluate_run
from tests.reliability.helpers import REPO, checkpoint_after_two_updates, child_env
from tests.tiny_runs import four_update_config

TEST_CONFIG = REPO / ".test" / "config.yaml"
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
FAULTS = REPO / "tests" / "reliability" / "fault_injection"


class Payload:
    """Unpickling it creates the marker file: the code a planted pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _plant_torch_pickle(path: Path, marker: Path) -> None:
    """A real torch zip file whose pickle would run the payload if unpickled in full."""
    path.unlink(missing_ok=True)
    torch.save({"weights": Payload(marker)}, path)
    assert zipfile.is_zipfile(path)


def _tiny_config() -> dict[str, Any]:
    return four_update_config(final_policy_eval_episodes=4, final_policy_eval_horizons=(1, 10))


@pytest.fixture
def checkpointed(tmp_path: Path) -> Path:
    """A run folder holding a complete checkpoint after update 2 and no policy yet."""
    return checkpoint_after_two_updates(_tiny_config(), tmp_path / "run0")


def test_a_planted_pickle_in_a_checkpoint_is_never_read(checkpointed: Path, tmp_path: Path):
    marker = tmp_path / "payload-ran"
    checkpoint = latest_checkpoint(checkpointed)
    assert checkpoint is not None
    import pickle

    for name in ("state.pkl", "trainer.pkl", "env.pkl"):
        (checkpoint / name).write_bytes(pickle.dumps(Payload(marker)))
    train_run(_tiny_config(), checkpointed, progress=False)
    assert not marker.exists()
    assert (checkpointed / "policy.pt").is_file()


@pytest.mark.parametrize("name", ["tensors.pt", "arrays.npz"])
def test_a_pickle_payload_in_a_checkpoint_file_is_refused(
    checkpointed: Path, tmp_path: Path, name: str
):
    marker = tmp_path / "payload-ran"
    path = latest_checkpoint(checkpointed) / name
    if name.endswith(".pt"):
        _plant_torch_pickle(path, marker)
    else:
        # An object array: np.load would unpickle it with allow_pickle=True.
        array = np.empty(1, dtype=object)
        array[0] = Payload(marker)
        with zipfile.ZipFile(path, "w") as archive, archive.open("a0.npy", "w") as member:
            np.lib.format.write_array(member, array, allow_pickle=True)
    with pytest.raises(CorruptFileError, match=str(path).replace(".", r"\.")):
        train_run(_tiny_config(), checkpointed, progress=False)
    assert not marker.exists()
    assert not (checkpointed / "policy.pt").exists()


def test_a_pickle_payload_as_policy_is_refused(tmp_path: Path):
    run_dir = tmp_path / "run0"
    train_run(_tiny_config(), run_dir, progress=False)
    marker = tmp_path / "payload-ran"
    _plant_torch_pickle(run_dir / "policy.pt", marker)
    with pytest.raises(CorruptFileError, match=r"policy\.pt"):
        evaluate_run(run_dir, run_dir / "eval.parquet")
    assert not marker.exists() and not (run_dir / "eval.parquet").exists()


def test_pickles_are_refused_by_the_loader_naming_the_file(tmp_path: Path):
    import pickle

    marker = tmp_path / "payload-ran"
    (tmp_path / "history.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(UnsafeFormatError, match=r"history\.pkl"):
        load_from_file(tmp_path, "history.pkl")
    assert not marker.exists()


def test_a_fifo_in_place_of_a_run_file_fails_at_once(tmp_path: Path):
    run_dir = tmp_path / "run0"
    run_dir.mkdir()
    os.mkfifo(run_dir / "config.json")
    started = time.monotonic()
    with pytest.raises((OSError, ContainmentError), match=r"config\.json.*not a regular file"):
        evaluate_run(run_dir, run_dir / "eval.parquet")
    assert time.monotonic() - started < 10


# ------------------------------------------------------------------ limits before any job


def _test_config() -> dict[str, Any]:
    return yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))


def _with(path: str, value: Any) -> dict[str, Any]:
    config = copy.deepcopy(_test_config())
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return config


OVERSIZED: dict[str, tuple[str, Any, str]] = {
    # name: (key, value, the limit the message names)
    "num_runs": ("num_runs", 100_000, "1000"),
    "threads": ("threads", 100_000, "256"),
    "num_envs": ("base.num_envs", 10_000_000, "4096"),
    "rollouts": ("base.rollouts", 10**9, "100000"),
    "timesteps": ("base.timesteps", 10**15, "1000000000"),
    "evaluation episodes": ("base.final_policy_eval_episodes", 10**10, "1000000"),
    "horizon": ("base.final_policy_eval_horizons", [1, 10**9], "100000"),
    "hidden sizes": ("algo_params.ippo", {"hidden_sizes": [10**7]}, "4096"),
    "replay": ("algo_params.shield", {"replay_size": 10**12}, "10000000"),
    "training memory": ("resources.train.mem_mb", 100, "MB"),
    "results_dir braces": ("results_dir", "results/{tag}", "'{'"),
    "wandb project": ("wandb.project", "a/b#c", "wandb project name"),
}


@pytest.mark.parametrize("name", sorted(OVERSIZED))
def test_oversized_or_malformed_values_are_refused_in_one_line(name: str):
    key, value, limit = OVERSIZED[name]
    started = time.monotonic()
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(_with(key, value))
    message = str(error.value)
    assert "\n" not in message and key in message and limit in message, message
    assert time.monotonic() - started < 10


def test_memory_too_small_for_a_job_names_the_estimate():
    config = _with("resources.evaluate.mem_mb", 100)
    with pytest.raises(WorkflowConfigError, match=r"resources\.evaluate\.mem_mb' = 100: .*MB"):
        check_workflow_config(config)


def _snakemake(*args: str, cwd: Path) -> list[str]:
    return [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--directory", str(cwd), *args]


def test_dry_run_of_a_huge_grid_is_refused_fast_and_small(tmp_path: Path):
    config_path = tmp_path / "huge.yaml"
    config_path.write_text(yaml.safe_dump(_with("num_runs", 100_000)), encoding="utf-8")
    # A fresh interpreter runs the dry run, so its children's peak memory is Snakemake's alone.
    probe = (
        "import resource, subprocess, sys, time\n"
        "started = time.monotonic()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(done.stderr)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(done.returncode, time.monotonic() - started, peak)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            probe,
            *_snakemake("-n", "--configfile", str(config_path), cwd=tmp_path),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    returncode, elapsed, peak_mb = done.stdout.split()
    assert int(returncode) != 0
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("invalid config:")]
    assert "num_runs" in line and "100000" in line and "1000" in line
    assert float(elapsed) < 30, elapsed
    assert float(peak_mb) < 500, peak_mb


# ------------------------------------------------------------------ one lock per results folder


def test_a_second_workflow_on_the_same_results_folder_is_refused(tmp_path: Path):
    results = tmp_path / "shared-results"
    config = _with("results_dir", str(results))
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    marker = tmp_path / "paused"
    env = child_env(
        RELIABILITY_PAUSE_TRAINING=f"after_checkpoint:1:{marker}",
        PYTHONPATH=os.pathsep.join((str(REPO), str(FAULTS))),
    )
    first = subprocess.Popen(
        _snakemake("--cores", "1", "--configfile", str(config_path), cwd=first_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert first.poll() is None, "the first workflow ended before training paused"
            assert time.monotonic() < deadline, "training never paused"
            time.sleep(0.1)
        second = subprocess.run(
            _snakemake("--cores", "1", "--configfile", str(config_path), cwd=second_dir),
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=300,
        )
        assert second.returncode != 0
        (line,) = [ln for ln in second.stderr.splitlines() if ln.startswith("refused:")]
        assert f"pid {first.pid}" in line and str(results / "test" / ".lock") in line, line
        assert "delete" in line
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    # Killed, its lock is stale: the next workflow on this host takes it over.
    lock = results / "test" / ".lock"
    assert lock.exists()
    shutil.rmtree(first_dir / ".snakemake", ignore_errors=True)
    third = subprocess.run(
        _snakemake(
            "--cores",
            "1",
            "--configfile",
            str(config_path),
            "--until",
            "train",
            "--rerun-incomplete",
            cwd=first_dir,
        ),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=600,
    )
    assert third.returncode == 0, third.stderr[-3000:]
    assert not lock.exists()
