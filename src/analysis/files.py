"""Atomic writes and checked reads for the result files of evaluation and analysis.

Every Parquet, CSV, Markdown, LaTeX and figure file written by `src.evaluation` and
`src.analysis` goes through `atomic_path`: the content lands in a temporary file in the same
folder and is moved into place with `os.replace`, so a killed job never leaves a half file that
Snakemake would take for a finished output. `src.core.io.save_to_file` does the same for plain
formats but cannot carry an explicit pyarrow schema or file metadata, hence `write_parquet`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["atomic_path", "read_json", "read_parquet", "write_parquet", "write_text"]

CONFIG_METADATA_KEY = b"config"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; move it onto `path` only if the block succeeds.

    The suffix of the temporary file equals the target's, so writers that pick a format from
    the suffix (matplotlib's `savefig`) behave as for the final name.
    """
    target = Path(path)
    if target.name == "":
        raise ValueError(f"not a file path: {path!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}"
    )
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates the file private (0600); give the result the usual umask-based mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(text: str, path: str | Path) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_parquet(table: pa.Table, path: str | Path) -> None:
    """Write a pyarrow table (with its schema and schema metadata) to `path` atomically."""
    if not isinstance(table, pa.Table):
        raise TypeError(f"write_parquet expects a pyarrow.Table, got {type(table).__name__}")
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_parquet(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a Parquet file and check that its columns and dtypes equal `schema`.

    Raises `FileNotFoundError` naming the path when it is missing and `ValueError` naming the
    path and the differing columns when the file is corrupt or was written with another schema.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"missing Parquet file: {file}")
    try:
        table = pq.read_table(file)
    except (pa.ArrowInvalid, OSError) as error:
        raise ValueError(f"cannot read Parquet file {file}: {error}") from error
    if not table.schema.equals(schema, check_metadata=False):
        expected = {field.name: str(field.type) for field in schema}
        found = {field.name: str(field.type) for field in table.schema}
        differing = sorted(
            name for name in set(expected) | set(found) if expected.get(name) != found.get(name)
        )
        raise ValueError(
            f"{file} does not have the expected schema; differing columns "
            f"(expected vs found): "
            + ", ".join(f"{n}: {expected.get(n)} vs {found.get(n)}" for n in differing)
        )
    return table


def read_json(path: str | Path) -> Any:
    """Load a JSON file, naming the path in the error when it is missing or corrupt."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"missing JSON file: {file}")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"corrupt JSON file {file}: {error}") from error
