"""Tests of src.core.io: formats, atomic writes, path safety and error reporting."""

from __future__ import annotations

import collections
import dataclasses
import errno
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import src.core.io as core_io
from src.core.io import (
    SUPPORTED_FORMATS,
    CorruptFileError,
    FileAccessError,
    MissingFileError,
    PersistenceError,
    SerializationError,
    UnsafeFormatError,
    UnsafePathError,
    UnsupportedFormatError,
    create_dir,
    load_from_file,
    load_from_file_if_exists,
    load_parquet_table,
    load_trusted_pickle,
    save_to_file,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Copied verbatim from the seed's published API (core_utilities_api.md, "Persistence").
SEED_SIGNATURES = {
    "create_dir": "def create_dir(path: str): ...",
    "save_to_file": "def save_to_file(obj, dir, filename): ...",
    "load_from_file": "def load_from_file(dir, filename): ...",
    "load_from_file_if_exists": textwrap.dedent(
        """
        def load_from_file_if_exists(
            directory: str | Path,
            filename: str,
            default: Any = None,
        ) -> Any: ...
        """
    ),
}


def _temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".*") if p.name.endswith(".tmp")]


class Opaque:
    """A class torch's weights-only unpickler must refuse to build."""

    def __init__(self, value: int) -> None:
        self.value = value


@dataclasses.dataclass(frozen=True)
class Record:
    name: str
    values: tuple[int, ...]
    score: float


# ------------------------------------------------------------------ signatures


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_signature_matches_seed(name: str) -> None:
    namespace: dict[str, Any] = {"Path": Path, "Any": Any}
    exec(SEED_SIGNATURES[name], namespace)
    expected = inspect.signature(namespace[name], eval_str=True)
    actual = inspect.signature(getattr(core_io, name), eval_str=True)
    assert list(actual.parameters) == list(expected.parameters)
    for param_name, want in expected.parameters.items():
        got = actual.parameters[param_name]
        assert got.kind == want.kind, param_name
        assert got.default == want.default, param_name
        if want.annotation is not inspect.Parameter.empty:
            assert got.annotation == want.annotation, param_name
    if expected.return_annotation is not inspect.Signature.empty:
        assert actual.return_annotation == expected.return_annotation


# ------------------------------------------------------------------ create_dir


def test_create_dir_creates_parents_and_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert create_dir(str(target)) == target
    assert target.is_dir()
    assert create_dir(target) == target  # a Path works too, and existing is fine


def test_create_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="f"):
        create_dir(str(tmp_path / "f"))
    with pytest.raises(NotADirectoryError, match="parent"):
        create_dir(str(tmp_path / "f" / "sub"))


@pytest.mark.parametrize(("bad", "error"), [(3, TypeError), (None, TypeError), ("", ValueError)])
def test_create_dir_rejects_bad_path(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="path"):
        create_dir(bad)


# ------------------------------------------------------------------ round trips


def test_json_round_trip_converts_dataclasses_tuples_numpy_and_paths(tmp_path: Path) -> None:
    obj = {
        "record": Record(name="a", values=(1, 2), score=0.5),
        "tuple": (1, "x", None),
        "np_float": np.float32(1.5),
        "np_int": np.int64(7),
        "np_bool": np.bool_(True),
        "array": np.arange(4).reshape(2, 2),
        "path": Path("results/x"),
        "nested": [{"k": [1.25, False]}],
    }
    path = save_to_file(obj, tmp_path, "sub/obj.json")
    assert path == tmp_path / "sub" / "obj.json"
    loaded = load_from_file(tmp_path, "sub/obj.json")
    assert loaded == {
        "record": {"name": "a", "values": [1, 2], "score": 0.5},
        "tuple": [1, "x", None],
        "np_float": 1.5,
        "np_int": 7,
        "np_bool": True,
        "array": [[0, 1], [2, 3]],
        "path": "results/x",
        "nested": [{"k": [1.25, False]}],
    }
    assert type(loaded["np_int"]) is int and type(loaded["np_bool"]) is bool


def test_json_list_of_dataclasses(tmp_path: Path) -> None:
    records = [Record(name="a", values=(1,), score=1.0), Record(name="b", values=(), score=2.0)]
    save_to_file(records, str(tmp_path), "history.json")
    assert load_from_file(str(tmp_path), "history.json") == [
        dataclasses.asdict(r) | {"values": list(r.values)} for r in records
    ]


def test_yaml_round_trip(tmp_path: Path) -> None:
    obj = {"env": "spread", "horizons": (1, 10), "lr": np.float64(3e-4), "flag": None}
    save_to_file(obj, tmp_path, "config.yaml")
    assert load_from_file(tmp_path, "config.yaml") == {
        "env": "spread",
        "horizons": [1, 10],
        "lr": 3e-4,
        "flag": None,
    }
    # Keys keep their insertion order, as a human reading the file expects.
    text = (tmp_path / "config.yaml").read_text()
    assert text.index("env") < text.index("horizons") < text.index("lr")


_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None)
@given(obj=_plain, suffix=st.sampled_from([".json", ".yaml"]))
def test_json_and_yaml_round_trip_plain_data(tmp_path_factory, obj: Any, suffix: str) -> None:
    folder = tmp_path_factory.mktemp("plain")
    save_to_file(obj, folder, f"x{suffix}")
    assert load_from_file(folder, f"x{suffix}") == obj


def test_parquet_dataframe_keeps_attrs(tmp_path: Path) -> None:
    frame = pd.DataFrame({"step": [1, 2, 3], "cost": [0.0, 1.0, 0.5], "env": ["a", "b", "c"]})
    frame.attrs["config"] = {"seed": 3}
    save_to_file(frame, tmp_path, "history.parquet")
    loaded = load_from_file(tmp_path, "history.parquet")
    pd.testing.assert_frame_equal(loaded, frame)
    assert loaded.attrs == {"config": {"seed": 3}}


def test_parquet_list_of_records(tmp_path: Path) -> None:
    save_to_file([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}], tmp_path, "rows.parquet")
    pd.testing.assert_frame_equal(
        load_from_file(tmp_path, "rows.parquet"), pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    )
    save_to_file([Record(name="r", values=(1, 2), score=0.5)], tmp_path, "dc.parquet")
    loaded = load_from_file(tmp_path, "dc.parquet")
    assert loaded["name"].tolist() == ["r"] and loaded["score"].tolist() == [0.5]
    assert list(loaded["values"][0]) == [1, 2]


def test_parquet_empty_list_gives_empty_frame(tmp_path: Path) -> None:
    save_to_file([], tmp_path, "empty.parquet")
    assert load_from_file(tmp_path, "empty.parquet").shape == (0, 0)


def test_parquet_arrow_table_keeps_schema_and_metadata(tmp_path: Path) -> None:
    schema = pa.schema([("step", pa.int32()), ("p", pa.float32())], metadata={"config": "{}"})
    table = pa.table({"step": [1, 2], "p": [0.25, 0.5]}, schema=schema)
    save_to_file(table, tmp_path, "eval.parquet")
    loaded_table = load_parquet_table(tmp_path, "eval.parquet")
    assert loaded_table.schema.equals(schema, check_metadata=True)
    assert loaded_table.equals(table)
    frame = load_from_file(tmp_path, "eval.parquet")  # the default is a DataFrame
    assert isinstance(frame, pd.DataFrame)
    assert frame["step"].dtype == np.int32 and frame["p"].tolist() == [0.25, 0.5]


def test_load_parquet_table_refuses_other_formats(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match=r"\.json"):
        load_parquet_table(tmp_path, "x.json")


@pytest.mark.parametrize(
    "bad", [{"a": 1}, [{"a": 1}, 3], "text"], ids=["dict", "mixed-list", "string"]
)
def test_parquet_rejects_other_objects(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SerializationError, match=r"\.parquet"):
        save_to_file(bad, tmp_path, "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    assert _temp_files(tmp_path) == []


def test_npz_round_trip_including_reserved_numpy_keywords(tmp_path: Path) -> None:
    arrays = {
        "obs": np.arange(12, dtype=np.float32).reshape(3, 4),
        "file": np.array([1, 2]),  # np.savez would reject these two names
        "allow_pickle": np.array(True),
        "list": [1.0, 2.0],
    }
    save_to_file(arrays, tmp_path, "buffer.npz")
    loaded = load_from_file(tmp_path, "buffer.npz")
    assert set(loaded) == set(arrays)
    for key, value in arrays.items():
        np.testing.assert_array_equal(loaded[key], np.asarray(value))
    assert loaded["obs"].dtype == np.float32


@pytest.mark.parametrize(
    "bad",
    [np.zeros(3), {"a": np.array([object()], dtype=object)}, {3: np.zeros(1)}],
    ids=["not-a-dict", "object-array", "int-key"],
)
def test_npz_rejects_bad_objects(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SerializationError, match=r"\.npz"):
        save_to_file(bad, tmp_path, "x.npz")
    assert not (tmp_path / "x.npz").exists()


def test_pt_round_trip_of_state_dicts(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optim.step()
    state = {"model": model.state_dict(), "optim": optim.state_dict(), "update": 4}
    save_to_file(state, tmp_path, "policy.pt")
    loaded = load_from_file(tmp_path, "policy.pt")
    assert loaded["update"] == 4
    for key, tensor in state["model"].items():
        assert torch.equal(loaded["model"][key], tensor)
    assert loaded["optim"]["param_groups"] == state["optim"]["param_groups"]
    fresh = torch.nn.Linear(3, 2)
    fresh.load_state_dict(loaded["model"])


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"actor": {"w": np.zeros(2)}}, r"obj\['actor'\]\['w'\].*numpy"),
        ({"lr": np.float64(0.1)}, r"obj\['lr'\].*numpy"),
        ({"d": collections.defaultdict(int)}, r"obj\['d'\].*defaultdict"),
        ([Opaque(1)], r"obj\[0\].*Opaque"),
    ],
    ids=["array", "numpy-float", "defaultdict", "object"],
)
def test_pt_save_refuses_what_weights_only_cannot_load(
    tmp_path: Path, bad: Any, where: str
) -> None:
    with pytest.raises(SerializationError, match=where):
        save_to_file(bad, tmp_path, "policy.pt")
    assert not (tmp_path / "policy.pt").exists()


def test_pt_load_uses_weights_only(tmp_path: Path) -> None:
    # Written behind save_to_file's back, as a foreign or tampered checkpoint would be.
    torch.save({"x": Opaque(1)}, tmp_path / "foreign.pt")
    with pytest.raises(CorruptFileError, match=r"foreign\.pt.*\.pt"):
        load_from_file(tmp_path, "foreign.pt")


def test_pkl_round_trip_of_arbitrary_objects(tmp_path: Path) -> None:
    state = {"rng": np.random.default_rng(3).bit_generator.state, "obj": Opaque(5)}
    save_to_file(state, tmp_path, "checkpoint/env.pkl")
    loaded = load_trusted_pickle(tmp_path, "checkpoint/env.pkl")
    assert loaded["rng"] == state["rng"] and loaded["obj"].value == 5


@pytest.mark.parametrize(
    ("filename", "obj"),
    [
        ("a.json", {"a": [1, 2.5]}),
        ("a.yaml", {"a": [1, 2.5]}),
        ("a.npz", {"a": np.arange(5)}),
        ("a.parquet", pd.DataFrame({"a": [1, 2]})),
    ],
)
def test_same_object_gives_same_bytes(tmp_path: Path, filename: str, obj: Any) -> None:
    first = save_to_file(obj, tmp_path / "one", filename).read_bytes()
    time.sleep(0.01)  # a timestamp in the file would now differ
    second = save_to_file(obj, tmp_path / "two", filename).read_bytes()
    assert first == second


def test_written_file_has_normal_permissions(tmp_path: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    path = save_to_file({"a": 1}, tmp_path, "a.json")
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_json_keeps_non_finite_floats(tmp_path: Path) -> None:
    save_to_file({"loss": float("nan"), "bound": float("inf")}, tmp_path, "m.json")
    loaded = load_from_file(tmp_path, "m.json")
    assert np.isnan(loaded["loss"]) and loaded["bound"] == float("inf")


def test_new_folders_and_the_rename_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = core_io.fsync_dir

    def record(directory: Path) -> None:
        synced.append(Path(directory))
        real(directory)

    monkeypatch.setattr(core_io, "fsync_dir", record)
    save_to_file({"a": 1}, tmp_path, "a/b/x.json")
    # Each created folder's entry in its parent, then the rename in the final folder.
    assert synced == [tmp_path, tmp_path / "a", tmp_path / "a" / "b"]


def test_overwrite_replaces_content_and_leaves_no_temp(tmp_path: Path) -> None:
    save_to_file({"v": 1}, tmp_path, "a.json")
    save_to_file({"v": 2}, tmp_path, "a.json")
    assert load_from_file(tmp_path, "a.json") == {"v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


# ------------------------------------------------------------------ bad inputs


def test_unsupported_suffix_lists_supported_formats(tmp_path: Path) -> None:
    for name in ("results.txt", "noext"):
        with pytest.raises(UnsupportedFormatError) as info:
            save_to_file({"a": 1}, tmp_path, name)
        assert isinstance(info.value, ValueError)
        for fmt in SUPPORTED_FORMATS:
            assert fmt in str(info.value)
        with pytest.raises(UnsupportedFormatError):
            load_from_file(tmp_path, name)
    assert list(tmp_path.iterdir()) == []


def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    save_to_file({"a": 1}, tmp_path, "A.JSON")
    assert load_from_file(tmp_path, "A.JSON") == {"a": 1}


@pytest.mark.parametrize(
    "filename",
    ["../x.json", "a/../../x.json", "/tmp/x.json", Path("../x.json"), "a/..", "."],
)
def test_filename_leaving_dir_is_refused(tmp_path: Path, filename: str | Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    with pytest.raises(UnsafePathError) as info:
        save_to_file({"a": 1}, inner, filename)
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnsafePathError):
        load_from_file(inner, filename)
    with pytest.raises(UnsafePathError):
        load_from_file_if_exists(inner, filename, default=0)
    assert list(tmp_path.rglob("*.json")) == []


@pytest.mark.parametrize("filename", ["sub/deeper/x.json", "a/../x.json", "./x.json"])
def test_filename_inside_dir_is_allowed(tmp_path: Path, filename: str) -> None:
    path = save_to_file({"a": 1}, tmp_path, filename)
    assert path.resolve().is_relative_to(tmp_path.resolve())
    assert load_from_file(tmp_path, filename) == {"a": 1}


@pytest.mark.parametrize("bad_dir", [3, None, b"bytes", ["x"]])
def test_wrong_dir_type_names_the_argument(bad_dir: Any) -> None:
    with pytest.raises(TypeError, match="dir"):
        save_to_file({"a": 1}, bad_dir, "a.json")
    with pytest.raises(TypeError, match="dir"):
        load_from_file(bad_dir, "a.json")
    with pytest.raises(TypeError, match="directory"):
        load_from_file_if_exists(bad_dir, "a.json")


@pytest.mark.parametrize("bad_name", [3, None, b"a.json"])
def test_wrong_filename_type_names_the_argument(tmp_path: Path, bad_name: Any) -> None:
    with pytest.raises(TypeError, match="filename"):
        save_to_file({"a": 1}, tmp_path, bad_name)
    with pytest.raises(TypeError, match="filename"):
        load_from_file(tmp_path, bad_name)


def test_empty_dir_and_filename_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dir"):
        save_to_file({"a": 1}, "", "a.json")
    with pytest.raises(ValueError, match="filename"):
        save_to_file({"a": 1}, tmp_path, "")


def test_unserialisable_json_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(SerializationError, match=r"obj\['cfg'\]\['bad'\].*set") as info:
        save_to_file({"cfg": {"bad": {1, 2}}}, tmp_path, "a.json")
    assert isinstance(info.value, TypeError)
    assert info.value.path == tmp_path / "a.json" and info.value.format == ".json"
    assert list(tmp_path.iterdir()) == []


def test_missing_file_names_path_and_format(tmp_path: Path) -> None:
    for name, fmt in (("nope.json", ".json"), ("d/nope.pt", ".pt"), ("x.parquet", ".parquet")):
        with pytest.raises(MissingFileError) as info:
            load_from_file(tmp_path, name)
        assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
        assert isinstance(info.value, PersistenceError)
        assert str(tmp_path / name) in str(info.value) and fmt in str(info.value)
        assert info.value.path == tmp_path / name


GARBAGE = {
    ".json": b'{"a": [1, 2',
    ".yaml": b"a: [1, 2\nb: {",
    ".parquet": b"PAR1 this is not parquet at all PAR1",
    ".npz": b"PK\x03\x04 not really a zip archive",
    ".pt": b"not a torch file",
    ".pkl": b"\x80\x05garbage",
}


def _load(directory: Path, name: str) -> Any:
    """load_from_file, or the explicit pickle opt-in for .pkl (which load_from_file refuses)."""
    if name.endswith(".pkl"):
        return load_trusted_pickle(directory, name)
    return load_from_file(directory, name)


@pytest.mark.parametrize("fmt", SUPPORTED_FORMATS)
def test_garbage_file_raises_corrupt_error_naming_path_and_format(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"bad{fmt}"
    path.write_bytes(GARBAGE[fmt])
    with pytest.raises(CorruptFileError) as info:
        _load(tmp_path, path.name)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value) and fmt in str(info.value)
    if fmt != ".pkl":
        with pytest.raises(CorruptFileError):
            load_from_file_if_exists(tmp_path, path.name, default="unused")


@pytest.mark.parametrize("fmt", SUPPORTED_FORMATS)
def test_empty_file_is_corrupt(tmp_path: Path, fmt: str) -> None:
    (tmp_path / f"empty{fmt}").write_bytes(b"")
    with pytest.raises(CorruptFileError, match="empty"):
        _load(tmp_path, f"empty{fmt}")


class _Payload:
    """Unpickling it would create the marker file: the code a planted pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_pickles_are_never_loaded_from_a_results_folder(tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    save_to_file([_Payload(marker)], tmp_path, "planted.pkl")
    for load in (load_from_file, load_from_file_if_exists):
        with pytest.raises(UnsafeFormatError, match=r"planted\.pkl.*runs code"):
            load(tmp_path, "planted.pkl")
    assert not marker.exists()
    # The explicit opt-in does unpickle, which is why nothing in the pipeline calls it.
    load_trusted_pickle(tmp_path, "planted.pkl")
    assert marker.exists()


def test_a_fifo_under_a_result_name_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.json")
    with pytest.raises(FileAccessError, match=r"x\.json.*not a regular file"):
        load_from_file(tmp_path, "x.json")


@pytest.mark.parametrize(
    ("filename", "obj"),
    [
        ("t.json", {"a": list(range(50))}),
        ("t.parquet", pd.DataFrame({"a": range(50)})),
        ("t.npz", {"a": np.arange(50)}),
        ("t.pt", {"w": torch.arange(50)}),
        ("t.pkl", {"a": list(range(50))}),
    ],
)
def test_truncated_file_is_corrupt(tmp_path: Path, filename: str, obj: Any) -> None:
    path = save_to_file(obj, tmp_path, filename)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError):
        _load(tmp_path, filename)


def test_npy_file_under_npz_name_is_corrupt(tmp_path: Path) -> None:
    np.save(tmp_path / "single.npy", np.zeros(3))
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    with pytest.raises(CorruptFileError, match="single"):
        load_from_file(tmp_path, "single.npz")


def test_directory_in_place_of_file(tmp_path: Path) -> None:
    (tmp_path / "d.json").mkdir()
    with pytest.raises(FileAccessError, match="directory"):
        load_from_file(tmp_path, "d.json")
    with pytest.raises(FileAccessError, match=r"d\.json"):
        save_to_file({"a": 1}, tmp_path, "d.json")
    assert _temp_files(tmp_path) == []


# ------------------------------------------------------------------ load_from_file_if_exists


def test_load_if_exists_returns_default_only_when_missing(tmp_path: Path) -> None:
    sentinel = object()
    assert load_from_file_if_exists(tmp_path, "a.json", default=sentinel) is sentinel
    assert load_from_file_if_exists(tmp_path / "no" / "dir", "a.json") is None
    save_to_file({"a": 1}, tmp_path, "a.json")
    assert load_from_file_if_exists(str(tmp_path), "a.json", default=sentinel) == {"a": 1}
    (tmp_path / "b.json").write_text("{")
    with pytest.raises(CorruptFileError, match=r"b\.json"):
        load_from_file_if_exists(tmp_path, "b.json", default=sentinel)
    with pytest.raises(UnsupportedFormatError):
        load_from_file_if_exists(tmp_path, "a.txt", default=sentinel)


# ------------------------------------------------------------------ interrupted writes


class FailsMidway:
    """Pickles after a large payload has reached the file, then fails."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        raise self.error


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), KeyboardInterrupt()], ids=["error", "interrupt"]
)
def test_failure_midway_keeps_previous_file_and_removes_temp(
    tmp_path: Path, error: BaseException
) -> None:
    save_to_file({"version": 1}, tmp_path, "state.pkl")
    before = (tmp_path / "state.pkl").read_bytes()
    payload = [b"x" * 2_000_000, FailsMidway(error)]
    with pytest.raises(type(error) if isinstance(error, KeyboardInterrupt) else SerializationError):
        save_to_file(payload, tmp_path, "state.pkl")
    assert (tmp_path / "state.pkl").read_bytes() == before
    assert load_trusted_pickle(tmp_path, "state.pkl") == {"version": 1}
    assert _temp_files(tmp_path) == []


def test_error_during_write_chains_the_cause(tmp_path: Path) -> None:
    with pytest.raises(SerializationError, match=r"state\.pkl.*boom") as info:
        save_to_file([FailsMidway(RuntimeError("boom"))], tmp_path, "state.pkl")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_full_disk_raises_clear_error_and_keeps_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_to_file({"version": 1}, tmp_path, "config.json")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(FileAccessError) as info:
        save_to_file({"version": 2}, tmp_path, "config.json")
    monkeypatch.undo()
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert str(tmp_path / "config.json") in str(info.value)
    assert "No space left" in str(info.value) and ".json" in str(info.value)
    assert load_from_file(tmp_path, "config.json") == {"version": 1}
    assert _temp_files(tmp_path) == []


_STALLING_WRITER = """
import pathlib, sys, time
sys.path.insert(0, sys.argv[1])
from src.core.io import save_to_file

class Stall:
    def __reduce__(self):
        pathlib.Path(sys.argv[3]).write_text("writing")
        time.sleep(600)
        raise AssertionError("should have been killed")

save_to_file([b"y" * 4_000_000, Stall()], sys.argv[2], "state.pkl")
"""


def test_sigkill_midway_keeps_previous_file_and_next_save_sweeps_temp(tmp_path: Path) -> None:
    save_to_file({"version": 1}, tmp_path, "state.pkl")
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLING_WRITER, str(REPO_ROOT), str(tmp_path), str(marker)]
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "writer exited before reaching the midway point"
            assert time.monotonic() < deadline, "writer never reached the midway point"
            time.sleep(0.05)
        leftovers = _temp_files(tmp_path)
        assert len(leftovers) == 1 and leftovers[0].stat().st_size > 1_000_000
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert load_trusted_pickle(tmp_path, "state.pkl") == {"version": 1}
    # The killed writer could not clean up; the next save of the same file does.
    save_to_file({"version": 2}, tmp_path, "state.pkl")
    assert load_trusted_pickle(tmp_path, "state.pkl") == {"version": 2}
    assert _temp_files(tmp_path) == []


def test_sweep_spares_live_writers_and_other_hosts(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(dead.stdout)
    host = core_io._HOST
    stale = tmp_path / f".a.json.{host}.{dead_pid}.0a1b2c3d.tmp"
    live = tmp_path / f".a.json.{host}.{os.getppid()}.0a1b2c3d.tmp"
    other_host = tmp_path / f".a.json.elsewhere{host}.{dead_pid}.0a1b2c3d.tmp"
    other_file = tmp_path / f".b.json.{host}.{dead_pid}.0a1b2c3d.tmp"
    for path in (stale, live, other_host, other_file):
        path.write_bytes(b"partial")
    save_to_file({"a": 1}, tmp_path, "a.json")
    assert not stale.exists()
    assert live.exists() and other_host.exists() and other_file.exists()


def test_docstring_examples_run() -> None:
    import doctest

    result = doctest.testmod(core_io)
    assert result.attempted > 0 and result.failed == 0
