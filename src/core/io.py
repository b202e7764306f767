"""Atomic, format-by-suffix persistence for everything the pipeline writes.

``save_to_file(obj, dir, filename)`` picks the format from the suffix of ``filename``:

- ``.json``: dicts, lists and scalars; dataclass instances (written as dicts), tuples (as
  lists), NumPy scalars and arrays (as plain numbers and lists), ``pathlib.Path`` (as a string).
  Loads plain Python.
- ``.yaml``: the same values as ``.json``; loads plain Python.
- ``.parquet``: a ``pandas.DataFrame`` (``DataFrame.attrs`` are kept), a list of records (dicts
  or dataclass instances), or a ``pyarrow.Table`` (schema and schema metadata kept verbatim).
  Loads a ``pandas.DataFrame``.
- ``.npz``: ``dict[str, array-like]`` without object arrays; loads ``dict[str, numpy.ndarray]``
  with ``allow_pickle=False``.
- ``.pt``: torch state, i.e. nested dicts / lists / tuples of tensors and plain values such as
  ``state_dict()``; loads with ``torch.load(weights_only=True, map_location="cpu")``.
- ``.pkl``: any picklable object, written for callers' own use. Unpickling runs code from the
  file, so ``load_from_file`` refuses ``.pkl`` (``UnsafeFormatError``, naming the path): a
  results folder copied from elsewhere must never run code when it is read. The pipeline
  writes and reads no pickle; ``load_trusted_pickle`` is the explicit opt-in for a pickle the
  caller wrote itself.

JSON and YAML hold what JSON holds: tuples come back as lists, dataclasses as dicts, and in JSON
non-string dict keys come back as strings. Non-finite floats are written as ``NaN`` /
``Infinity`` in JSON (Python's reading of them), so metrics that diverged still round-trip.

Corruption is detected rather than loaded as different data: ``.parquet`` files are written
with a CRC-32 per page and read with page checksum verification; ``.pt`` and ``.npz`` are zip
archives whose members' CRC-32 and directory are checked on load (``torch.load`` alone does
not check them). A truncated ``.parquet``, ``.pt``, ``.npz`` or ``.json`` file, or one of the
first three with damaged bytes, raises ``CorruptFileError`` (damage to bytes that carry no
data, such as a zip comment, may still load the same values). The Parquet footer has no
checksum: damage there either fails to parse or, in its key-value section, can drop the schema
metadata (and with it ``DataFrame.attrs``) while the columns load intact. Text formats carry
no checksum: JSON and YAML must decode as UTF-8 and parse, so damage that leaves valid text
(a changed digit) goes unnoticed, and YAML, having no end marker, still parses when cut at a
line break. ``.pkl`` has no checksum either.

``.parquet`` always loads as a DataFrame; ``load_parquet_table`` returns the ``pyarrow.Table``
with its schema metadata (e.g. the run config stored as file metadata).

Writes are atomic: the bytes go to a hidden temp file in the destination folder
(``.{name}.{host}.{pid}.{random}.tmp``), which is flushed, fsynced and renamed over the target
with ``os.replace`` (in a workflow job, below its results folder, relative to a descriptor of
the folder walked down from the results folder without following a link, so a folder swapped
for a link mid-run is refused: ``src.containment.replace``); the folder is then fsynced so the
rename itself survives a crash. If anything fails, the temp file is removed and the previous
file is left untouched. A process killed with SIGKILL cannot clean up after itself; the next
save of the same file on the same host removes temp files whose writing process no longer
exists.

``filename`` is relative to ``dir`` and may contain sub-folders (created on demand), but it
may never leave ``dir``: absolute paths and ``..`` components that climb above ``dir`` are
refused. The check is lexical, so a sub-folder of ``dir`` that is a symlink (e.g. to scratch
storage) is allowed.

Loaders read regular files only: a FIFO, device or socket under a result's name is refused
(``FileAccessError``) instead of blocking or reading endlessly.

Archives are bounded before they are inflated: the members of a ``.npz`` or zip-based ``.pt``
file may together inflate to at most ``src.containment.archive_limit()`` (half the memory of
the workflow job, set from its ``mem_mb``), read from the zip's central directory; a larger
archive is refused with ``CorruptFileError`` naming the file and the sizes, before anything is
inflated. Called outside a workflow job (a notebook, a script), the limit is
``src.containment.DEFAULT_READ_LIMIT_MB`` (512 MB, at most half the machine's memory); set
that attribute, or the environment variable ``SAFE_MARL_READ_LIMIT_MB`` (MB), to raise it.
A ``.parquet`` file is bounded the same way before any column is read, by an upper estimate of
its decoded columns from its footer (``check_parquet_size``: rows, row groups, the
uncompressed size of each column chunk and its type). A ``.pt`` file holding pickled objects
other than torch state is refused in one line naming it (torch's own message advises turning
the weights-only check off; it is not passed on). Every error message is one line.

Errors all derive from ``PersistenceError`` and carry ``.path`` and ``.format``:

- ``UnsupportedFormatError(PersistenceError, ValueError)``: unknown suffix.
- ``UnsafeFormatError(UnsupportedFormatError)``: ``.pkl`` given to ``load_from_file``.
- ``UnsafePathError(PersistenceError, ValueError)``: ``filename`` leaves ``dir``.
- ``MissingFileError(PersistenceError, FileNotFoundError)``: nothing to load.
- ``CorruptFileError(PersistenceError, ValueError)``: the file is not valid in its format.
- ``SerializationError(PersistenceError, TypeError)``: ``obj`` cannot be written in that format.
- ``FileAccessError(PersistenceError, OSError)``: the operating system refused (full disk,
  permissions); ``.errno`` is the original errno.

Wrong argument types raise ``TypeError`` naming the argument.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import os
import pickle
import re
import secrets
import socket
import stat
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np
import yaml

from src.containment import (
    ContainmentError,
    archive_limit,
    below_results_root,
    check_archive,
    held_folder,
    replace,
)
from src.processes import pid_alive

__all__ = [
    "SUPPORTED_FORMATS",
    "CorruptFileError",
    "FileAccessError",
    "MissingFileError",
    "PersistenceError",
    "SerializationError",
    "UnsafeFormatError",
    "UnsafePathError",
    "UnsupportedFormatError",
    "atomic_output",
    "check_parquet_size",
    "create_dir",
    "fsync_dir",
    "load_from_file",
    "load_from_file_if_exists",
    "load_parquet_table",
    "load_trusted_pickle",
    "save_to_file",
]


# --------------------------------------------------------------------------- errors


class PersistenceError(Exception):
    """Base class of every error raised by this module; names the path and the format."""

    def __init__(
        self, message: str, *, path: Path | None = None, format: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.format = format


class UnsupportedFormatError(PersistenceError, ValueError):
    """The filename's suffix is not one of ``SUPPORTED_FORMATS``."""


class UnsafeFormatError(UnsupportedFormatError):
    """A format whose loading would run code from the file (pickle)."""


class UnsafePathError(PersistenceError, ValueError):
    """The filename is absolute or climbs out of the directory it is relative to."""


class MissingFileError(PersistenceError, FileNotFoundError):
    """The file to load does not exist."""


class CorruptFileError(PersistenceError, ValueError):
    """The file exists but is not a valid file of its format (truncated, garbage, unsafe)."""


class SerializationError(PersistenceError, TypeError):
    """The object cannot be written in the requested format."""


class FileAccessError(PersistenceError, OSError):
    """The operating system refused a read or write (full disk, permissions, ...)."""


class _Refusal(ValueError):
    """A reader refuses a file on purpose (not damage); `_load` names the file in one line."""


# ------------------------------------------------------------------ plain conversion


def _to_plain(obj: Any, where: str, fmt: str) -> Any:
    """Recursively convert ``obj`` to JSON/YAML-native values, naming the first bad value.

    Converting up front (instead of a ``json`` ``default`` hook) gives one code path for JSON
    and YAML and an error that says where in the object the offending value sits.
    """
    if obj is None or type(obj) in (str, bool, int, float):
        return obj
    if isinstance(obj, np.generic):
        return _to_plain(obj.item(), where, fmt)
    # Subclasses (np.float64 is a float, enums are ints or strs) become the exact builtin,
    # which YAML's safe dumper requires and which reads back as the same value.
    for builtin in (bool, int, float, str):
        if isinstance(obj, builtin):
            return builtin(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise SerializationError(
                f"{where} is an object array, which {fmt} cannot hold", format=fmt
            )
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: _to_plain(getattr(obj, f.name), f"{where}.{f.name}", fmt)
            for f in dataclasses.fields(obj)
        }
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise SerializationError(
                    f"{where} has a key of type {type(key).__name__} ({key!r}); "
                    f"{fmt} keys must be strings or numbers",
                    format=fmt,
                )
            out[key] = _to_plain(value, f"{where}[{key!r}]", fmt)
        return out
    if isinstance(obj, list | tuple):
        return [_to_plain(value, f"{where}[{i}]", fmt) for i, value in enumerate(obj)]
    raise SerializationError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which {fmt} cannot "
        "hold (use dicts, lists, numbers, strings, bools, None, dataclasses or NumPy values)",
        format=fmt,
    )


# ------------------------------------------------------------------------- formats


def _write_json(obj: Any, fh: IO[bytes]) -> None:
    plain = _to_plain(obj, "obj", ".json")
    text = json.dumps(plain, indent=2, ensure_ascii=False)
    fh.write(text.encode("utf-8") + b"\n")


def _read_json(fh: IO[bytes]) -> Any:
    return json.loads(fh.read().decode("utf-8"))


def _write_yaml(obj: Any, fh: IO[bytes]) -> None:
    plain = _to_plain(obj, "obj", ".yaml")
    # Non-ASCII is escaped: written raw, characters such as NEL (U+0085) read back as line
    # breaks, so the file would not load to the same strings.
    text = yaml.safe_dump(plain, sort_keys=False, allow_unicode=False, default_flow_style=False)
    fh.write(text.encode("utf-8"))


def _read_yaml(fh: IO[bytes]) -> Any:
    return yaml.safe_load(fh.read().decode("utf-8"))


def _as_arrow_table(obj: Any) -> Any:
    """Turn a DataFrame, a list of records or a pyarrow Table into a pyarrow Table."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, list):
        records = []
        for i, row in enumerate(obj):
            if dataclasses.is_dataclass(row) and not isinstance(row, type):
                row = _to_plain(row, f"obj[{i}]", ".parquet")
            if not isinstance(row, dict):
                raise SerializationError(
                    f"obj[{i}] is a {type(row).__name__}; a list written as .parquet must "
                    "hold records (dicts or dataclass instances)",
                    format=".parquet",
                )
            records.append(row)
        obj = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    if isinstance(obj, pd.DataFrame):
        table = pa.Table.from_pandas(obj)
        if obj.attrs:
            # Same key and encoding as pandas' own to_parquet, so read_parquet restores attrs.
            metadata = dict(table.schema.metadata or {})
            metadata[b"PANDAS_ATTRS"] = json.dumps(
                _to_plain(obj.attrs, "obj.attrs", ".parquet")
            ).encode("utf-8")
            table = table.replace_schema_metadata(metadata)
        return table
    raise SerializationError(
        f"obj is a {type(obj).__name__}; .parquet accepts a pandas.DataFrame, a list of "
        "records or a pyarrow.Table",
        format=".parquet",
    )


def _write_parquet(obj: Any, fh: IO[bytes]) -> None:
    import pyarrow.parquet as pq

    # Parquet pages carry no checksum by default: a flipped bit in a data page would load as a
    # silently different number. With a CRC per page the reader below notices.
    pq.write_table(_as_arrow_table(obj), fh, write_page_checksum=True)


# Bytes of one decoded value of each fixed-width Parquet type (BOOLEAN counted as a byte).
_PARQUET_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_MAX_ROW_GROUPS = 10_000


def _parquet_decoded_bytes(metadata: Any) -> int:
    """An upper estimate of the bytes a Parquet file's columns take once decoded, from its
    footer: fixed-width values by their count, byte arrays by their uncompressed pages, and a
    dictionary-encoded byte-array column as every value as long as its whole column chunk
    (a dictionary repeats one long value in every row at no cost on disk)."""
    total = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            values = max(int(chunk.num_values), 0)
            kind = chunk.physical_type
            if kind == "FIXED_LEN_BYTE_ARRAY":
                width = max(int(metadata.schema.column(index).length or 0), 1)
                total += values * (width + 1)
            elif kind in _PARQUET_WIDTHS:
                total += values * (_PARQUET_WIDTHS[kind] + 1)
            elif chunk.has_dictionary_page:
                total += values * (max(int(chunk.total_uncompressed_size), 0) + 4)
            else:
                total += max(int(chunk.total_uncompressed_size), 0) + values * 4
    return total


def check_parquet_size(fh: IO[bytes]) -> Any:
    """Refuse a Parquet file whose footer promises more than it may decode to, before any
    column is read; returns its ``pyarrow.parquet.ParquetFile`` (``.metadata``,
    ``.schema_arrow``) and leaves ``fh`` at its start.

    The bound is ``src.containment.archive_limit()`` (half the job's ``mem_mb``; outside a
    job ``DEFAULT_READ_LIMIT_MB``) on an upper estimate of the decoded columns (rows, row
    groups, the uncompressed size of every column chunk, their physical types), and at most
    10,000 row groups. Raises ``ContainmentError`` (one line with the numbers, without the
    file's name, which the caller adds).
    """
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(fh, page_checksum_verification=True)
    metadata = parquet.metadata
    rows, groups = metadata.num_rows, metadata.num_row_groups
    decoded = _parquet_decoded_bytes(metadata)
    limit, why = archive_limit()
    if groups > _MAX_ROW_GROUPS or decoded > limit:
        raise ContainmentError(
            f"its footer promises {rows} rows in {groups} row groups (at most "
            f"{_MAX_ROW_GROUPS}) of {metadata.num_columns} columns, up to "
            f"{decoded / 2**20:.1f} MB once decoded, above the limit of {limit / 2**20:.1f} MB "
            f"({why}); nothing was read"
        )
    fh.seek(0)
    return parquet


def _read_parquet(fh: IO[bytes]) -> Any:
    import pandas as pd

    check_parquet_size(fh)
    # Pages written without a checksum (by other tools) are read unchecked.
    return pd.read_parquet(fh, engine="pyarrow", page_checksum_verification=True)


def _read_parquet_table(fh: IO[bytes], schema_check: Callable[[Any], None] | None = None) -> Any:
    import pyarrow.parquet as pq

    parquet = check_parquet_size(fh)
    if schema_check is not None:
        schema_check(parquet.schema_arrow)  # its PersistenceError reaches the caller as is
    fh.seek(0)
    table = pq.read_table(fh, page_checksum_verification=True)
    # The footer has no checksum: a damaged column name only fails when it is decoded, so
    # decode the names here, where the error is reported as a corrupt file.
    _ = [(field.name, str(field.type)) for field in table.schema]
    return table


_DOS_DIRECTORY_BIT = 0x10


def _check_zip_members(fh: IO[bytes]) -> None:
    """Raise ValueError unless the zip in ``fh`` (``.npz``, ``.pt``) is whole and intact.

    Checks that the directory lists as many members as its end record counts, that no member
    claims to be a folder and that every member passes its CRC-32. ``torch.load`` reads the zip
    that ``torch.save`` writes without checking CRCs, so a flipped bit in a tensor would load as
    a silently different weight; a member whose directory entry says "folder" makes torch read
    the wrong bytes, also without an error.
    """
    on_disk = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    with zipfile.ZipFile(fh) as archive:
        # Before anything is inflated (testzip and the loaders inflate every member): the
        # sizes the central directory promises, against the job's memory.
        check_archive([(info.filename, info.file_size) for info in archive.infolist()], on_disk)
        # A damaged length field in one directory entry swallows the entries after it, and
        # readers then see fewer arrays without complaint; the end record holds the true count.
        # (zipfile's end-record parser is private but unchanged since Python 2.)
        fh.seek(0)
        end_record = zipfile._EndRecData(fh)
        listed = len(archive.infolist())
        if end_record is None or end_record[zipfile._ECD_ENTRIES_TOTAL] != listed:
            expected = None if end_record is None else end_record[zipfile._ECD_ENTRIES_TOTAL]
            raise ValueError(f"the zip directory lists {listed} members, its end record {expected}")
        for info in archive.infolist():
            if info.external_attr & _DOS_DIRECTORY_BIT or info.is_dir():
                raise ValueError(f"zip member {info.filename!r} is marked as a folder")
        bad = archive.testzip()
        if bad is not None:
            raise ValueError(f"zip member {bad!r} fails its CRC-32 check")
    fh.seek(0)


def _write_npz(obj: Any, fh: IO[bytes]) -> None:
    if not isinstance(obj, dict):
        raise SerializationError(
            f"obj is a {type(obj).__name__}; .npz accepts a dict of arrays", format=".npz"
        )
    arrays = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not key:
            raise SerializationError(
                f"obj has key {key!r}; .npz keys must be non-empty strings", format=".npz"
            )
        array = np.asarray(value)
        if array.dtype == object:
            raise SerializationError(
                f"obj[{key!r}] is an object array; .npz loads with allow_pickle=False",
                format=".npz",
            )
        arrays[key] = array
    # The zip is written by hand rather than with np.savez: np.savez reserves keyword names
    # ("file", "allow_pickle") and stamps the wall clock into every member, so the same arrays
    # would not give the same bytes twice.
    with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, array in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def _read_npz(fh: IO[bytes]) -> Any:
    if zipfile.is_zipfile(fh):
        _check_zip_members(fh)
    fh.seek(0)
    with np.load(fh, allow_pickle=False) as npz:
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("the file holds a single .npy array, not an .npz archive")
        return {key: npz[key] for key in npz.files}


def _check_torch_state(obj: Any, where: str) -> None:
    """Refuse values that ``torch.load(weights_only=True)`` would refuse to read back.

    Types are matched exactly: subclasses (NumPy floats, enums, namedtuples, defaultdicts)
    pickle as their own class, which the weights-only unpickler rejects.
    """
    import collections

    import torch

    if obj is None or type(obj) in (str, bytes, bool, int, float, complex, torch.Size):
        return
    if isinstance(obj, torch.Tensor | torch.dtype | torch.device):
        return
    if type(obj) in (dict, collections.OrderedDict):
        for key, value in obj.items():
            _check_torch_state(key, f"{where} key {key!r}")
            _check_torch_state(value, f"{where}[{key!r}]")
        return
    if type(obj) in (list, tuple, set):
        for i, value in enumerate(obj):
            _check_torch_state(value, f"{where}[{i}]")
        return
    raise SerializationError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}; .pt holds torch state "
        "only (nested dicts/lists/tuples of tensors and plain values), because it is loaded "
        "with weights_only=True. Convert it (e.g. torch.as_tensor) or use .pkl for trusted data",
        format=".pt",
    )


def _write_pt(obj: Any, fh: IO[bytes]) -> None:
    import torch

    _check_torch_state(obj, "obj")
    torch.save(obj, fh)


def _read_pt(fh: IO[bytes]) -> Any:
    import torch

    # Files of the legacy (pre-zip) torch format have no checksums; torch.load reads them.
    if zipfile.is_zipfile(fh):
        _check_zip_members(fh)
    fh.seek(0)
    try:
        return torch.load(fh, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise _Refusal(_weights_only_refusal(exc)) from None


# Sentences of torch's weights-only refusal that advise turning the check off or point at
# its documentation: left out, the reason it refused is kept.
_TORCH_ADVICE = re.compile(
    r"weights.only|trust|can still be loaded|safe_globals|allowlist|documentation|"
    r"Please (use|file)|PyTorch 2\.6|Re-running",
    re.IGNORECASE,
)
_REASON_LENGTH = 240


def _weights_only_refusal(exc: BaseException) -> str:
    """Why the weights-only unpickler refused a file, in one line, without torch's advice to
    load it with ``weights_only=False`` or to allowlist what it refused."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).replace("WeightsUnpickler error:", "\n\n")
    kept = [
        sentence
        for sentence in re.split(r"(?<=\.)\s+|\n\s*\n", text)
        if sentence.strip() and not _TORCH_ADVICE.search(sentence)
    ]
    reason = " ".join(" ".join(kept).split()).rstrip(".") or "refused by the weights-only reader"
    if len(reason) > _REASON_LENGTH:
        reason = reason[: _REASON_LENGTH - 3] + "..."
    return (
        f"it holds pickled Python objects that are not torch state ({reason}); nothing was loaded"
    )


def _write_pkl(obj: Any, fh: IO[bytes]) -> None:
    pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)


def _read_pkl(fh: IO[bytes]) -> Any:
    return pickle.load(fh)


_Writer = Callable[[Any, IO[bytes]], None]
_Reader = Callable[[IO[bytes]], Any]

_FORMATS: dict[str, tuple[_Writer, _Reader]] = {
    ".json": (_write_json, _read_json),
    ".yaml": (_write_yaml, _read_yaml),
    ".parquet": (_write_parquet, _read_parquet),
    ".npz": (_write_npz, _read_npz),
    ".pt": (_write_pt, _read_pt),
    ".pkl": (_write_pkl, _read_pkl),
}

SUPPORTED_FORMATS: tuple[str, ...] = tuple(_FORMATS)
"""File suffixes ``save_to_file`` and ``load_from_file`` understand."""


# ------------------------------------------------------------------------- paths


def _check_path_arg(value: Any, name: str) -> Path:
    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a str or pathlib.Path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a text path, got {type(text).__name__}")
    if not text:
        raise ValueError(f"{name} must not be empty")
    if "\x00" in text:
        raise ValueError(f"{name} contains a NUL character: {text!r}")
    return Path(text)


def _format_of(path: Path) -> str:
    fmt = path.suffix.lower()
    if fmt not in _FORMATS:
        raise UnsupportedFormatError(
            f"{path}: unsupported format {path.suffix or '(no suffix)'!r}; "
            f"supported: {', '.join(SUPPORTED_FORMATS)}",
            path=path,
            format=path.suffix or None,
        )
    return fmt


def _resolve_target(directory: Any, filename: Any, dir_arg: str) -> tuple[Path, str]:
    """Validate the arguments and return (target path, format)."""
    base = _check_path_arg(directory, dir_arg)
    name = _check_path_arg(filename, "filename")
    rel = PurePosixPath(name.as_posix())
    if name.is_absolute() or rel.is_absolute():
        raise UnsafePathError(
            f"filename must be relative to {dir_arg} {str(base)!r}, "
            f"got the absolute path {str(name)!r}",
            path=name,
        )
    depth = 0
    for part in rel.parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise UnsafePathError(
                f"filename {str(name)!r} leaves {dir_arg} {str(base)!r}", path=base / name
            )
    if depth == 0 or rel.name in ("", ".", ".."):
        raise UnsafePathError(
            f"filename {str(name)!r} does not name a file inside {dir_arg} {str(base)!r}",
            path=base / name,
        )
    target = base / name
    return target, _format_of(target)


# ---------------------------------------------------------------- atomic writing


def _current_umask() -> int:
    # The temp file is created 0600 by os.open; after the rename it should carry the same
    # permissions as a file created by open(), i.e. 0666 minus the umask.
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_current_umask()
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"
_TMP_NAME_LIMIT = 120  # keeps temp names under the usual 255-byte limit on long filenames


def _tmp_prefix(target: Path) -> str:
    return f".{target.name[:_TMP_NAME_LIMIT]}."


def _tmp_name(target: Path, *, keep_suffix: bool) -> str:
    # Hidden, unique per host and process; `keep_suffix` ends it with the target's suffix for
    # writers that pick a format from the file name (ffmpeg, matplotlib).
    ending = ".tmp" + (target.suffix if keep_suffix else "")
    return f"{_tmp_prefix(target)}{_HOST}.{os.getpid()}.{secrets.token_hex(4)}{ending}"


def _remove_stale_temps(target: Path) -> None:
    """Delete temp files of ``target`` left by dead writers on this host (SIGKILL, OOM)."""
    prefix = _tmp_prefix(target)
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        # Only regular files are deleted: a planted symlink or folder with a temp's name is
        # left alone, never followed.
        if not entry.name.startswith(prefix) or not entry.is_file(follow_symlinks=False):
            continue
        for ending in (".tmp", ".tmp" + target.suffix):
            if entry.name.endswith(ending):
                fields = entry.name[len(prefix) : -len(ending)].split(".")
                break
        else:
            continue
        # Only our own host's temps: a pid says nothing about processes on other cluster nodes.
        if len(fields) != 3 or fields[0] != _HOST or not fields[1].isdigit():
            continue
        pid = int(fields[1])
        if pid != os.getpid() and not pid_alive(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def fsync_dir(directory: str | Path) -> None:
    """Flush a folder's entries to disk (after a rename in it), where the file system can."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot fsync a directory; the rename is still atomic there.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _make_dirs(folder: Path) -> None:
    """``mkdir -p`` that also fsyncs the parent of every folder it creates."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    # A new folder's own entry must reach the disk too, or a crash could lose the whole folder
    # with the file that was fsynced into it.
    for created in reversed(missing):
        fsync_dir(created.parent)


@contextlib.contextmanager
def _published(target: Path, *, keep_suffix: bool) -> Iterator[Path]:
    """Yield a temp path beside ``target``; after the block, fsync it and rename it onto it."""
    _make_dirs(target.parent)
    _remove_stale_temps(target)
    with contextlib.ExitStack() as stack:
        folder = target.parent
        contained = below_results_root(target)
        if contained:
            # The temp is written through a held descriptor of the folder walked down from the
            # job's results folder: a folder on the way swapped for a link meanwhile receives
            # nothing, and the rename below refuses to place the file where the link leads.
            folder = stack.enter_context(held_folder(target.parent))
        tmp = folder / _tmp_name(target, keep_suffix=keep_suffix)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.chmod(tmp, _FILE_MODE)
            yield tmp
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if contained:
                replace(target.parent, tmp.name, target.name)
            else:
                os.replace(tmp, target)
            fsync_dir(target.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


@contextlib.contextmanager
def _write_errors(target: Path, fmt: str, *, serializer: bool = True) -> Iterator[None]:
    """Turn a failed write into a PersistenceError naming ``target`` and ``fmt``.

    OS errors always become ``FileAccessError``; other exceptions become ``SerializationError``
    when our own serializer raised them (``serializer``), else they pass through unchanged.
    """
    try:
        yield
    except PersistenceError as exc:
        exc.path = target
        exc.format = fmt
        if str(target) not in str(exc):
            exc.args = (f"{target} ({fmt}): {exc.args[0]}",)
        raise
    except ContainmentError:
        raise  # names the link it refused
    except OSError as exc:
        err = FileAccessError(
            f"cannot write {target} ({fmt}): {exc.strerror or exc}", path=target, format=fmt
        )
        # Only errno: setting strerror/filename would make OSError.__str__ drop the message.
        err.errno = exc.errno
        raise err from exc
    except Exception as exc:
        if not serializer:
            raise
        raise SerializationError(
            f"cannot write {target} as {fmt}: {type(exc).__name__}: {exc}",
            path=target,
            format=fmt,
        ) from exc


def _atomic_write(target: Path, fmt: str, writer: _Writer, obj: Any) -> None:
    with (
        _write_errors(target, fmt),
        _published(target, keep_suffix=False) as tmp,
        open(tmp, "wb") as fh,
    ):
        writer(obj, fh)


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Publish a file that a third-party writer creates by name, atomically.

    Yields a hidden temporary path in the same folder, ending in the target's suffix (so
    ffmpeg, matplotlib or pyarrow pick the right format); inside a workflow job the folder is
    named through a held descriptor of it (`containment.held_folder`), so a folder swapped for
    a link meanwhile receives nothing. When the block succeeds the file is
    fsynced and renamed onto ``path``; when it fails, or the process is killed, ``path`` keeps
    its previous content (a killed writer's temp is removed by the next write of ``path``).
    OS errors (a full disk) are raised as ``FileAccessError`` naming the path, like
    ``save_to_file``; other exceptions of the block pass through unchanged.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "notes.md"
    >>> with atomic_output(target) as tmp:
    ...     _ = tmp.write_text("# done")
    >>> target.read_text()
    '# done'
    """
    target = _check_path_arg(path, "path")
    if target.name in ("", ".", ".."):
        raise UnsafePathError(f"path {str(target)!r} does not name a file", path=target)
    with (
        _write_errors(target, target.suffix or "file", serializer=False),
        _published(target, keep_suffix=True) as tmp,
    ):
        yield tmp


# ------------------------------------------------------------------- public API


def create_dir(path: str) -> Path:
    """Create ``path`` and any missing parents (no error if it exists); return it as a Path.

    ``path`` may also be a ``pathlib.Path``. Raises ``NotADirectoryError`` if ``path`` (or a
    parent) exists as a file.

    >>> import tempfile
    >>> create_dir(tempfile.mkdtemp() + "/a/b").is_dir()
    True
    """
    target = _check_path_arg(path, "path")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise NotADirectoryError(f"cannot create directory {target}: a file is in the way") from exc
    except NotADirectoryError as exc:
        raise NotADirectoryError(
            f"cannot create directory {target}: a parent is a file, not a directory"
        ) from exc
    return target


def save_to_file(obj: Any, dir: str | Path, filename: str) -> Path:
    """Write ``obj`` atomically to ``dir/filename`` in the format given by the suffix.

    See the module docstring for what each format accepts. Sub-folders in ``filename`` are
    created; a filename that leaves ``dir`` raises ``UnsafePathError`` and nothing is written.
    Returns the path written.

    >>> import tempfile
    >>> path = save_to_file({"seed": 3}, tempfile.mkdtemp(), "run0/config.json")
    >>> load_from_file(path.parent, "config.json")
    {'seed': 3}
    """
    target, fmt = _resolve_target(dir, filename, "dir")
    writer, _ = _FORMATS[fmt]
    _atomic_write(target, fmt, writer, obj)
    return target


def _load(target: Path, fmt: str, reader: _Reader) -> Any:
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None  # open() below reports the reason
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise FileAccessError(
            f"cannot read {target} ({fmt}): not a regular file (a FIFO, device or socket)",
            path=target,
            format=fmt,
        )
    try:
        fh = open(target, "rb")  # noqa: SIM115 - closed below; errors of open are told apart
    except FileNotFoundError as exc:
        missing = MissingFileError(f"{target} ({fmt}) does not exist", path=target, format=fmt)
        missing.errno = errno.ENOENT
        raise missing from exc
    except IsADirectoryError as exc:
        raise FileAccessError(
            f"cannot read {target} ({fmt}): it is a directory", path=target, format=fmt
        ) from exc
    except OSError as exc:
        err = FileAccessError(
            f"cannot read {target} ({fmt}): {exc.strerror or exc}", path=target, format=fmt
        )
        err.errno = exc.errno
        raise err from exc
    with fh:
        if os.fstat(fh.fileno()).st_size == 0:
            raise CorruptFileError(f"{target} ({fmt}) is empty", path=target, format=fmt)
        try:
            return reader(fh)
        except PersistenceError as exc:
            exc.path = exc.path or target
            raise
        except (ContainmentError, _Refusal) as exc:
            raise CorruptFileError(f"{target} ({fmt}): {exc}", path=target, format=fmt) from None
        except Exception as exc:
            # One line: readers' messages (torch's, pyarrow's) may span several.
            why = " ".join(str(exc).split())
            raise CorruptFileError(
                f"{target} is not a valid {fmt} file: {type(exc).__name__}: {why}",
                path=target,
                format=fmt,
            ) from exc


def _refuse_pickle(target: Path, fmt: str) -> None:
    if fmt == ".pkl":
        raise UnsafeFormatError(
            f"refusing to load {target}: unpickling runs code from the file; results are "
            "never pickled (use load_trusted_pickle only for a pickle you wrote yourself)",
            path=target,
            format=fmt,
        )


def load_from_file(dir: str | Path, filename: str) -> Any:
    """Load ``dir/filename``, written by ``save_to_file``, in the format given by the suffix.

    Raises ``MissingFileError`` (a ``FileNotFoundError``) if it does not exist and
    ``CorruptFileError`` (a ``ValueError``) if it is not valid in its format; both name the
    path and the format. ``.pt`` loads with ``weights_only=True`` onto the CPU and ``.npz``
    with ``allow_pickle=False``; ``.pkl`` is refused (``UnsafeFormatError``): nothing read
    from a results folder may run code.
    """
    target, fmt = _resolve_target(dir, filename, "dir")
    _refuse_pickle(target, fmt)
    return _load(target, fmt, _FORMATS[fmt][1])


def load_trusted_pickle(dir: str | Path, filename: str) -> Any:
    """Unpickle ``dir/filename``: the explicit opt-in for a ``.pkl`` the caller wrote itself.

    Unpickling runs code from the file. The pipeline never calls this; it exists so that a
    user's own pickle, written with ``save_to_file``, can be read back deliberately.
    """
    target, fmt = _resolve_target(dir, filename, "dir")
    if fmt != ".pkl":
        raise UnsupportedFormatError(
            f"{target}: load_trusted_pickle reads .pkl files, got {fmt!r}", path=target, format=fmt
        )
    return _load(target, fmt, _read_pkl)


def load_from_file_if_exists(
    directory: str | Path,
    filename: str,
    default: Any = None,
) -> Any:
    """Like ``load_from_file``, but return ``default`` when the file does not exist.

    Only a missing file gives ``default``: a corrupt or unreadable file still raises, and a
    filename that leaves ``directory`` is refused.
    """
    target, fmt = _resolve_target(directory, filename, "directory")
    _refuse_pickle(target, fmt)
    try:
        return _load(target, fmt, _FORMATS[fmt][1])
    except MissingFileError:
        return default


def load_parquet_table(
    dir: str | Path, filename: str, *, schema_check: Callable[[Any], None] | None = None
) -> Any:
    """Load a ``.parquet`` file as a ``pyarrow.Table``, schema metadata included.

    ``load_from_file`` returns a DataFrame; use this to read the explicit schema or the
    file-level metadata (e.g. the run config) that a ``pyarrow.Table`` was written with.
    ``schema_check`` is called with the file's Arrow schema, from its footer, before any
    column is read; a ``PersistenceError`` it raises reaches the caller unchanged.
    """
    target, fmt = _resolve_target(dir, filename, "dir")
    if fmt != ".parquet":
        raise UnsupportedFormatError(
            f"{target}: load_parquet_table reads .parquet files, got {fmt!r}",
            path=target,
            format=fmt,
        )

    return _load(target, fmt, functools.partial(_read_parquet_table, schema_check=schema_check))
