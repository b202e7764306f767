"""Damaged files: a clear error naming the file, never silently different data, nothing written.

Two layers. `src.core.io.load_from_file` on `.pt`, `.parquet`, `.json` and `.npz` files that
are empty, cut short, overwritten with garbage or have a byte flipped must raise
`CorruptFileError` naming the path and the format, or (for damage to bytes that carry no data)
return exactly the saved values. Then the functions the workflow runs on a run folder
(`load_actor`, `evaluate_run`, `render_run`, `export_run`, `aggregate`, `load_history`,
`train_run` resuming from a checkpoint, `upload_experiment`, the summary and figures) must fail
with an error naming the damaged file and leave every existing output untouched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from src.core.io import (
    CorruptFileError,
    load_from_file,
    load_from_file_if_exists,
    save_to_file,
)
from tests.reliability.helpers import (
    REPO,
    child_env,
    flipped,
    folder_state,
    garbage,
    sample_positions,
)

FORMATS = (".pt", ".parquet", ".json", ".npz")

# Its sitecustomize pauses training where RELIABILITY_PAUSE_TRAINING says.
FAULTS = REPO / "tests" / "reliability" / "fault_injection"


def _good_object(suffix: str) -> Any:
    """A value like the ones the pipeline writes in each format."""
    rng = np.random.default_rng(1)
    if suffix == ".pt":
        return {
            "actor_critic": {
                "body.0.weight": torch.from_numpy(rng.normal(size=(16, 8)).astype(np.float32)),
                "body.0.bias": torch.zeros(16),
                "steps": torch.tensor([3, 4], dtype=torch.int64),
            },
            "network": {"obs_dim": 8, "hidden_sizes": [16], "cost_critic": False},
            "config": {"algo": "ippo", "seed": 0},
        }
    if suffix == ".parquet":
        frame = pd.DataFrame(
            {
                "horizon": np.array([1, 10, 50, 100], dtype=np.int64),
                "p_violation": rng.random(4),
                "shielded": [True, False, True, False],
                "algo": ["ippo", "ippo_lag", "shield", "shield"],
            }
        )
        frame.attrs["config"] = {"seed": 0}
        return frame
    if suffix == ".json":
        return {
            "episodes": [{"episode": i, "team_return": float(i) / 3} for i in range(20)],
            "env": "hazard_grid",
        }
    if suffix == ".npz":
        return {
            "obs": rng.normal(size=(8, 2, 5)).astype(np.float32),
            "actions": np.arange(16, dtype=np.int64),
        }
    raise AssertionError(suffix)


def _equal(expected: Any, found: Any) -> bool:
    """Exact equality of loaded values: dtypes, shapes, column names and index included.

    `DataFrame.attrs` are left out: they live in the Parquet footer's key-value metadata, which
    has no checksum (see src.core.io), so damage there can drop them while every column loads
    intact. The round trip itself is checked with attrs.
    """
    if isinstance(expected, pd.DataFrame):
        return (
            isinstance(found, pd.DataFrame)
            and list(expected.columns) == list(found.columns)
            and expected.dtypes.equals(found.dtypes)
            and expected.index.equals(found.index)
            and expected.equals(found)
        )
    if isinstance(expected, torch.Tensor):
        return (
            isinstance(found, torch.Tensor)
            and expected.dtype == found.dtype
            and torch.equal(expected, found)
        )
    if isinstance(expected, np.ndarray):
        return (
            isinstance(found, np.ndarray)
            and expected.dtype == found.dtype
            and np.array_equal(expected, found)
        )
    if isinstance(expected, dict):
        return (
            isinstance(found, dict)
            and list(expected) == list(found)
            and all(_equal(expected[k], found[k]) for k in expected)
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(expected) == len(found)
            and all(_equal(a, b) for a, b in zip(expected, found, strict=True))
        )
    return type(expected) is type(found) and expected == found


def _assert_names(error: BaseException, path: Path) -> None:
    assert str(path) in str(error), f"the error does not name {path}: {error}"


def _damages(data: bytes, suffix: str) -> dict[str, bytes]:
    return {
        "empty": b"",
        "one byte": data[:1],
        "half": data[: len(data) // 2],
        "all but the last 8 bytes": data[:-8],
        "garbage": garbage(len(data)),
        "text": f"this is not a {suffix} file\n".encode(),
        "zeros": bytes(len(data)),
        "middle byte flipped": flipped(data, len(data) // 2),
    }


@pytest.mark.parametrize("suffix", FORMATS)
def test_damaged_file_raises_corrupt_file_error_naming_it(tmp_path: Path, suffix: str):
    name = f"state{suffix}"
    target = save_to_file(_good_object(suffix), tmp_path, name)
    good = target.read_bytes()
    for kind, data in _damages(good, suffix).items():
        target.write_bytes(data)
        before = folder_state(tmp_path)
        for load in (load_from_file, load_from_file_if_exists):
            with pytest.raises(CorruptFileError) as excinfo:
                load(tmp_path, name)
            error = excinfo.value
            assert isinstance(error, ValueError), kind
            assert error.path == target and error.format == suffix, kind
            _assert_names(error, target)
            assert suffix in str(error), kind
        # Loading wrote nothing: the damaged file is kept as it is for inspection.
        assert folder_state(tmp_path) == before, kind


@pytest.mark.parametrize("suffix", FORMATS)
def test_no_damage_loads_as_different_data(tmp_path: Path, suffix: str):
    """Cut or flip a byte anywhere: an error naming the file, or exactly the saved values."""
    name = f"state{suffix}"
    original = _good_object(suffix)
    target = save_to_file(original, tmp_path, name)
    good = target.read_bytes()
    loaded = load_from_file(tmp_path, name)
    assert _equal(original, loaded)
    assert getattr(loaded, "attrs", None) == getattr(original, "attrs", None)

    silent: list[str] = []
    refused = 0
    for position in sample_positions(len(good)):
        for kind, data in (("cut at", good[:position]), ("flip at", flipped(good, position))):
            target.write_bytes(data)
            try:
                loaded = load_from_file(tmp_path, name)
            except CorruptFileError as error:
                _assert_names(error, target)
                refused += 1
                continue
            if not _equal(original, loaded):
                silent.append(f"{kind} byte {position} of {len(good)}")
    assert silent == [], f"{suffix}: damage loaded as different data: {silent}"
    assert refused > len(sample_positions(len(good)))  # most damage is refused, not ignored


# ------------------------------------------------------------------ the pipeline's loaders


def _damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    damaged = {
        "truncated": data[: len(data) // 2],
        "garbage": garbage(len(data), seed=7),
        "flipped": flipped(data, len(data) // 2),
    }[kind]
    path.write_bytes(damaged)


def _expect_failure_naming(path: Path, call: Callable[[], Any], untouched: Path) -> None:
    """`call` must raise an error naming `path` and change no file under `untouched`."""
    before = folder_state(untouched)
    with pytest.raises((ValueError, OSError)) as excinfo:
        call()
    _assert_names(excinfo.value, path)
    assert folder_state(untouched) == before


DAMAGES = ("truncated", "garbage", "flipped")


@pytest.mark.parametrize("kind", DAMAGES)
def test_damaged_policy_is_named_by_load_actor_evaluate_and_render(trained_run: Path, kind: str):
    from src.algos.policy import load_actor
    from src.evaluation.evaluate import evaluate_run
    from src.evaluation.render import render_run

    policy = trained_run / "policy.pt"
    # Outputs of an earlier, successful evaluation and render that a failure must not touch.
    videos = trained_run / "videos"
    videos.mkdir()
    (videos / "poster.png").write_bytes(b"previous poster")
    _damage(policy, kind)

    _expect_failure_naming(policy, lambda: load_actor(trained_run), trained_run)
    _expect_failure_naming(
        policy, lambda: evaluate_run(trained_run, trained_run / "eval.parquet"), trained_run
    )
    _expect_failure_naming(policy, lambda: render_run(trained_run, videos, episodes=1), trained_run)


@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("name", ["config.json", "history.json", "updates.json"])
def test_damaged_training_output_is_named_by_export(trained_run: Path, name: str, kind: str):
    from src.analysis.export import export_run

    path = trained_run / name
    if kind == "flipped":
        # JSON has no checksum: a flip must at least break the text (a byte that is not UTF-8).
        data = path.read_bytes()
        path.write_bytes(flipped(data, data.index(b":")))
    else:
        _damage(path, kind)
    _expect_failure_naming(
        path,
        lambda: export_run(
            trained_run, trained_run / "history.parquet", trained_run / "updates.parquet"
        ),
        trained_run,
    )


@pytest.mark.parametrize("kind", DAMAGES)
def test_damaged_history_is_named_by_load_history(trained_run: Path, kind: str):
    from src.records import load_history

    history = trained_run / "history.json"
    data = history.read_bytes()
    if kind == "flipped":
        history.write_bytes(flipped(data, data.index(b"{")))
    else:
        _damage(history, kind)
    _expect_failure_naming(history, lambda: load_history(trained_run, "history.json"), trained_run)


def test_damaged_history_is_named_by_wandb_upload(
    trained_run: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    from src.analysis.wandb_upload import upload_experiment

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no.netrc"))
    # The template run was trained with wandb off; the upload step only reads runs with it on.
    config = load_from_file(trained_run, "config.json")
    save_to_file({**config, "use_wandb": True}, trained_run, "config.json")
    (trained_run / "videos").mkdir()
    history = trained_run / "history.json"
    _damage(history, "truncated")
    results = trained_run.parents[3]
    _expect_failure_naming(history, lambda: upload_experiment(results, sync=False), trained_run)
    assert not (results / "wandb" / "upload.done").exists()


@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("name", ["eval.parquet", "history.parquet", "updates.parquet"])
def test_damaged_run_table_is_named_by_aggregate(
    trained_run: Path, tmp_path: Path, name: str, kind: str
):
    from src.analysis.aggregate import aggregate

    tables = tmp_path / "tables"
    aggregate([trained_run], tables)
    path = trained_run / name
    if kind == "flipped":
        # The last byte belongs to the "PAR1" magic, which every reader checks.
        path.write_bytes(flipped(path.read_bytes(), path.stat().st_size - 1))
    else:
        _damage(path, kind)
    _expect_failure_naming(path, lambda: aggregate([trained_run], tables), tmp_path)


@pytest.mark.parametrize("name", ["eval.parquet", "history.parquet", "updates.parquet"])
def test_damaged_aggregate_table_is_named_by_summary_and_figures(
    trained_run: Path, tmp_path: Path, name: str
):
    from src.analysis.aggregate import aggregate
    from src.analysis.figures import make_figures
    from src.analysis.tables import make_summary

    tables = tmp_path / "tables"
    aggregate([trained_run], tables)
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "learning_curves.png").write_bytes(b"previous figure")
    path = tables / name
    _damage(path, "truncated")
    if name != "updates.parquet":
        # The summary reads the evaluation and history tables only.
        _expect_failure_naming(path, lambda: make_summary(tables), tmp_path)
    _expect_failure_naming(path, lambda: make_figures(tables, figures), tmp_path)


TRAIN_SCRIPT = """
import sys
from src.algos.train import train_run
from src.config.run import make_run_config
config = make_run_config(
    env_name="hazard_grid", algo="ippo", num_envs=2, timesteps=256, rollouts=32,
    mini_batches=2, env_params={"max_steps": 20}, checkpoint_every=1,
)
train_run(config, sys.argv[1], progress=False)
"""


@pytest.fixture(scope="module")
def killed_training(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder whose training was SIGKILLed right after its first checkpoint."""
    root = tmp_path_factory.mktemp("killed")
    run_dir, marker = root / "run0", root / "paused"
    process = subprocess.Popen(
        [sys.executable, "-c", TRAIN_SCRIPT, str(run_dir)],
        env=child_env(
            RELIABILITY_PAUSE_TRAINING=f"after_checkpoint:1:{marker}",
            PYTHONPATH=os.pathsep.join((str(REPO), str(FAULTS))),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), f"training never reached its first checkpoint ({process.poll()})"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return run_dir


@pytest.mark.parametrize("name", ["tensors.pt", "arrays.npz", "state.json", "complete.json"])
def test_damaged_checkpoint_is_named_and_no_policy_is_written(
    killed_training: Path, tmp_path: Path, name: str
):
    from src.algos.checkpoint import latest_checkpoint
    from src.algos.train import train_run
    from src.config.run import make_run_config

    run_dir = tmp_path / "run0"
    shutil.copytree(killed_training, run_dir)
    # The killed trainer's lock record: the next trainer takes the lock and removes it when it
    # lets go, whatever else happens (src.lock.RunLock), so it is not part of what must stay.
    (run_dir / ".train.lock").unlink(missing_ok=True)
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and not (run_dir / "policy.pt").exists()
    path = checkpoint / name
    _damage(path, "truncated")
    config = make_run_config(
        env_name="hazard_grid",
        algo="ippo",
        num_envs=2,
        timesteps=256,
        rollouts=32,
        mini_batches=2,
        env_params={"max_steps": 20},
        checkpoint_every=1,
    )

    # A damaged checkpoint is an error naming it, not a silent restart from scratch.
    _expect_failure_naming(path, lambda: train_run(config, run_dir, progress=False), run_dir)
    assert not (run_dir / "policy.pt").exists()


@pytest.mark.parametrize("name", ["eval.parquet", "history.parquet"])
def test_flipped_byte_in_a_run_table_never_reads_as_other_numbers(trained_run: Path, name: str):
    """A flipped byte in a run's table: an error naming it, never other numbers."""
    from src.analysis.aggregate import RUN_TABLES
    from src.schemas import read_parquet

    path = trained_run / name
    schema = RUN_TABLES[name.removesuffix(".parquet")]
    original = read_parquet(path, schema)
    good = path.read_bytes()
    unnamed, silent = [], []
    for position in sample_positions(len(good), count=600):
        path.write_bytes(flipped(good, position))
        try:
            table = read_parquet(path, schema)
        except Exception as error:
            if str(path) not in str(error):
                unnamed.append(f"byte {position}: {type(error).__name__}: {error}")
            continue
        if not table.equals(original):
            silent.append(position)
    assert unnamed == [], f"errors that do not name {path}: {unnamed[:3]}"
    assert silent == [], f"{path.name}: flipped bytes at {silent} loaded as other values"
