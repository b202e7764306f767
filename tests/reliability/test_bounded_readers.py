"""Readers of a results folder check sizes before they allocate, copy or inflate.

A handed-over results folder (or a file read in a notebook) used to cost what it asked for:
a sparse 4 GB regular file named `*.mp4` was copied by the video page and again by the wandb
upload, 2,000 empty videos made 2,000 players, a 264-byte `eval.parquet` holding one
dictionary-encoded 100 kB string in 20,000 rows decoded to gigabytes before its schema was
looked at, and `load_from_file` called outside a workflow job inflated a 1 MB `.npz` to 1 GB.
Each is now refused in one line naming the file and the limit, before the allocation; and a
wandb upload killed after its offline run appeared leaves no unlisted run behind.
"""

from __future__ import annotations

import inspect
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from src import containment
from src.analysis.aggregate import aggregate
from src.analysis.video_page import write_video_page
from src.analysis.wandb_upload import upload_experiment
from src.containment import ContainmentError, memory_budget
from src.core.io import CorruptFileError, load_from_file, save_to_file
from tests.analysis.synthetic import write_experiment
from tests.analysis.test_wandb_upload import RUNS, _offline_runs
from tests.analysis.test_wandb_upload import no_credentials as no_credentials
from tests.analysis.test_wandb_upload import results as results

_MiB = 2**20
READ_LIMIT_ENV_VAR = "SAFE_MARL_READ_LIMIT_MB"


def _one_line(message: str, *names: object) -> str:
    assert "\n" not in message.strip(), message
    for name in names:
        assert str(name) in message, f"the message does not name {name}: {message}"
    return message


# ------------------------------------------------------------------ videos


def _video_folder(root: Path, name: str = "run0") -> Path:
    folder = root / "results" / "test" / "runs" / "hazard_grid" / "ippo" / name / "videos"
    folder.mkdir(parents=True)
    (folder / "e-0.mp4").write_bytes(b"\x00" * 1024)
    return folder


def test_a_sparse_gigabyte_video_is_neither_copied_nor_uploaded(tmp_path: Path, results: Path):
    videos = _video_folder(tmp_path)
    huge = videos / "e-1.mp4"
    huge.touch()
    os.truncate(huge, 4 * 1024 * _MiB)  # 4 GB, sparse: nothing is written to disk
    page = tmp_path / "results" / "test" / "video_page"
    with memory_budget(1000), pytest.raises(ContainmentError) as refused:
        write_video_page([videos], ["run 0"], page, title="t")
    _one_line(str(refused.value), huge, "4096.0 MB", "500.0 MB")
    assert not page.exists() and [p.name for p in page.parent.iterdir()] == ["runs"]

    # The wandb upload, before it reads any video (nor makes any run).
    env, algo, run = RUNS[0]
    sparse = results / "runs" / env / algo / f"run{run}" / "videos" / "big.mp4"
    sparse.touch()
    os.truncate(sparse, 4 * 1024 * _MiB)
    with memory_budget(1000), pytest.raises(ContainmentError) as refused:
        upload_experiment(results, sync=False)
    _one_line(str(refused.value), sparse, "500.0 MB")
    assert not _offline_runs(results)


def test_two_thousand_videos_are_refused_by_count(tmp_path: Path, results: Path):
    videos = _video_folder(tmp_path)
    for index in range(1, 2000):
        (videos / f"e-{index}.mp4").touch()
    page = tmp_path / "results" / "test" / "video_page"
    with pytest.raises(ContainmentError) as refused:
        write_video_page([videos], ["run 0"], page, title="t")
    _one_line(str(refused.value), videos, "more than 100")
    # The workflow passes the config's render.episodes: one video per episode.
    for index in range(1, 2000):
        (videos / f"e-{index}.mp4").unlink()
    (videos / "e-1.mp4").touch()
    with pytest.raises(ContainmentError, match=r"more than 1 \.mp4"):
        write_video_page([videos], ["run 0"], page, title="t", max_videos=1)
    assert write_video_page([videos], ["run 0"], page, title="t", max_videos=2).is_file()

    env, algo, run = RUNS[0]
    folder = results / "runs" / env / algo / f"run{run}" / "videos"
    for index in range(3):
        (folder / f"extra-{index}.mp4").touch()
    with pytest.raises(ContainmentError) as refused:
        upload_experiment(results, sync=False, max_videos=2)
    _one_line(str(refused.value), folder, "more than 2")


# ------------------------------------------------------------------ Parquet


def _dictionary_bomb(path: Path, *, rows: int, length: int) -> Path:
    """`path` rewritten with `rows` rows: every column of its table repeated, and `env` one
    string of `length` characters in every row, dictionary-encoded (a few hundred bytes on
    disk), written without the Arrow schema so that a reader decodes it in full."""
    table = pq.read_table(path)
    table = table.take(pa.array(np.zeros(rows, dtype=np.int64)))
    env = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["x" * length])
    )
    table = table.set_column(table.schema.get_field_index("env"), "env", env)
    pq.write_table(
        table, path, store_schema=False, compression="zstd", use_compliant_nested_type=False
    )
    return path


@pytest.fixture
def bombed_run(tmp_path: Path) -> Path:
    """A synthetic run folder whose eval.parquet decodes to about 800 MB."""
    (run_dir,) = write_experiment(
        tmp_path / "results" / "test", envs=("hazard_grid",), algos=("ippo",), runs=1
    )
    _dictionary_bomb(run_dir / "eval.parquet", rows=8_000, length=100_000)
    assert (run_dir / "eval.parquet").stat().st_size < 64 * 1024
    return run_dir


def test_a_parquet_dictionary_bomb_is_refused_from_its_footer(bombed_run: Path, tmp_path: Path):
    path = bombed_run / "eval.parquet"
    with memory_budget(1000), pytest.raises(ValueError) as refused:
        aggregate([bombed_run], tmp_path / "tables")
    _one_line(str(refused.value), path, "8000 rows", "500.0 MB", "nothing was read")
    assert not (tmp_path / "tables").exists()
    # The wandb upload's reader (a DataFrame) and the table reader, likewise.
    with memory_budget(1000), pytest.raises(CorruptFileError) as refused:
        load_from_file(bombed_run, "eval.parquet")
    _one_line(str(refused.value), path, "500.0 MB")


def test_a_parquet_file_with_other_columns_is_refused_before_reading(tmp_path: Path):
    (run_dir,) = write_experiment(
        tmp_path / "results" / "test", envs=("hazard_grid",), algos=("ippo",), runs=1
    )
    path = run_dir / "eval.parquet"
    wide = {f"column_with_a_rather_long_name_{i:03d}": [1.0] for i in range(300)}
    save_to_file(pa.table(wide), run_dir, "eval.parquet")
    with pytest.raises(ValueError) as refused:
        aggregate([run_dir], tmp_path / "tables")
    message = _one_line(str(refused.value), path, "expected schema", "more")
    assert len(message) < 600, len(message)
    assert "algo: string vs None" in message


# ------------------------------------------------------------------ load_from_file


def test_a_direct_load_has_a_default_limit_that_a_variable_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    assert containment.READ_LIMIT_ENV_VAR == READ_LIMIT_ENV_VAR
    monkeypatch.delenv(READ_LIMIT_ENV_VAR, raising=False)
    bomb = tmp_path / "arrays.npz"
    size = 600 * _MiB
    with zipfile.ZipFile(bomb, "w") as archive:
        info = zipfile.ZipInfo("a0.npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            header = {"descr": "<f8", "fortran_order": False, "shape": (size // 8,)}
            np.lib.format.write_array_header_2_0(member, header)
            for _ in range(size // (8 * _MiB)):
                member.write(bytes(8 * _MiB))
    assert bomb.stat().st_size < 2 * _MiB
    assert list(inspect.signature(load_from_file).parameters) == ["dir", "filename"]

    with memory_budget(None), pytest.raises(CorruptFileError) as refused:
        load_from_file(tmp_path, "arrays.npz")
    _one_line(str(refused.value), bomb, "600.0 MB", "512.0 MB", READ_LIMIT_ENV_VAR)

    # The variable, or the module's setting, sets the limit of direct calls.
    save_to_file({"a": np.zeros(1000)}, tmp_path, "small.npz")
    with memory_budget(None):
        monkeypatch.setenv(READ_LIMIT_ENV_VAR, "0.001")
        with pytest.raises(CorruptFileError, match=READ_LIMIT_ENV_VAR):
            load_from_file(tmp_path, "small.npz")
        monkeypatch.setenv(READ_LIMIT_ENV_VAR, "1")
        assert load_from_file(tmp_path, "small.npz")["a"].shape == (1000,)
        monkeypatch.setenv(READ_LIMIT_ENV_VAR, "lots")
        with pytest.raises(ValueError, match=f"{READ_LIMIT_ENV_VAR}='lots'"):
            load_from_file(tmp_path, "small.npz")
        monkeypatch.delenv(READ_LIMIT_ENV_VAR)
        monkeypatch.setattr(containment, "DEFAULT_READ_LIMIT_MB", 0.001)
        with pytest.raises(CorruptFileError, match="raise it with"):
            load_from_file(tmp_path, "small.npz")


# ------------------------------------------------------------------ wandb after a kill


def test_an_upload_killed_before_listing_its_run_leaves_no_unlisted_run(
    results: Path,
    no_credentials: None,
    capfd: pytest.CaptureFixture,
):
    upload_experiment(results, sync=False)
    manifest_path = results / "wandb" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    # As after a kill between wandb creating the run's folder and the manifest listing it.
    name = sorted(manifest)[0]
    orphan = results / "wandb" / manifest.pop(name)["folder"]
    manifest_path.write_text(json.dumps(manifest))
    capfd.readouterr()

    upload_experiment(results, sync=False)

    listed = {entry["folder"] for entry in json.loads(manifest_path.read_text()).values()}
    on_disk = {f"wandb/{path.name}" for path in _offline_runs(results)}
    assert on_disk == listed and len(on_disk) == len(RUNS)
    assert not orphan.exists()
    (line,) = [ln for ln in capfd.readouterr().err.splitlines() if "does not list" in ln]
    _one_line(line, orphan.name, "killed")
