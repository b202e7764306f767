"""Result files of evaluation and analysis: Parquet tables with an explicit schema, text.

Every write goes through `src.core.io` (atomic: hidden temp file in the same folder, fsync,
rename; a killed writer's temp is removed by the next write), so a killed job never leaves a
half file that Snakemake would take for a finished output. Parquet files carry a CRC per page
and are verified on read, so a damaged file is an error naming it, never other numbers.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from src.containment import ContainmentError
from src.core.io import (
    CorruptFileError,
    atomic_output,
    check_parquet_size,
    load_from_file,
    load_parquet_table,
    save_to_file,
)

__all__ = ["CONFIG_METADATA_KEY", "read_json", "read_parquet", "write_parquet", "write_text"]

CONFIG_METADATA_KEY = b"config"


def write_text(text: str, path: str | Path) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_parquet(table: pa.Table, path: str | Path) -> None:
    """Write a pyarrow table (with its schema and schema metadata) to `path` atomically."""
    if not isinstance(table, pa.Table):
        raise TypeError(f"write_parquet expects a pyarrow.Table, got {type(table).__name__}")
    target = Path(path)
    save_to_file(table, target.parent, target.name)


_LISTED_COLUMNS = 6  # differing columns a schema error names; the rest are counted


def _with_absent(
    found: pa.Schema, schema: pa.Schema, missing_as_null: Collection[str]
) -> tuple[pa.Schema, list[pa.Field]]:
    """(`found` with the columns of `missing_as_null` it lacks added, in `schema`'s order
    when the names then match; those added fields)."""
    absent = [
        field
        for field in schema
        if field.name in missing_as_null and field.nullable and field.name not in found.names
    ]
    if not absent:
        return found, []
    widened = pa.schema([*found, *absent])
    if sorted(widened.names) == sorted(schema.names):
        widened = pa.schema([widened.field(name) for name in schema.names])
    return widened, absent


def _check_schema(file: Path, found: pa.Schema, schema: pa.Schema) -> None:
    """Raise `CorruptFileError` (one line naming `file` and at most `_LISTED_COLUMNS`
    differing columns) unless `found` equals `schema`."""
    if found.equals(schema, check_metadata=False):
        return
    expected = {field.name: str(field.type) for field in schema}
    present = {field.name: str(field.type) for field in found}
    differing = sorted(
        name for name in set(expected) | set(present) if expected.get(name) != present.get(name)
    )
    listed = ", ".join(
        f"{name[:40]}: {str(expected.get(name))[:40]} vs {str(present.get(name))[:40]}"
        for name in differing[:_LISTED_COLUMNS]
    )
    more = len(differing) - _LISTED_COLUMNS
    if not differing:
        listed = "the same column types, in another order or nullability"
    raise CorruptFileError(
        f"{file} does not have the expected schema; differing columns (expected vs found): "
        + listed
        + (f" and {more} more" if more > 0 else ""),
        path=file,
        format=".parquet",
    )


def read_parquet(
    path: str | Path,
    schema: pa.Schema,
    *,
    missing_as_null: Collection[str] = (),
    handle: IO[bytes] | None = None,
) -> pa.Table:
    """Read a Parquet file and check that its columns and dtypes equal `schema`.

    `missing_as_null` names nullable columns of `schema` that files written before them lack:
    such a file is read with those columns all null, in the schema's order. The columns and
    their types, and the size the columns decode to (`src.core.io.check_parquet_size`), are
    checked from the file's footer before any column is read.

    Raises `FileNotFoundError` naming the path when it is missing and `ValueError` naming the
    path (and the differing columns, a few of them) when the file is corrupt, too large or
    was written with another schema. `handle`: the file already opened (e.g. by
    `src.containment.open_regular`), read instead of opening `path`, which then only names it.
    """
    file = Path(path)

    def check(found: pa.Schema) -> None:
        _check_schema(file, _with_absent(found, schema, missing_as_null)[0], schema)

    if handle is None:
        table = load_parquet_table(file.parent, file.name, schema_check=check)
    else:
        import pyarrow.parquet as pq

        try:
            check(check_parquet_size(handle).schema_arrow)
            table = pq.read_table(handle, page_checksum_verification=True)
            _ = [(field.name, str(field.type)) for field in table.schema]
        except (CorruptFileError, ContainmentError) as error:
            if str(file) in str(error):
                raise
            raise CorruptFileError(
                f"{file} (.parquet): {error}", path=file, format=".parquet"
            ) from None
        except Exception as error:
            why = " ".join(str(error).split())
            raise ValueError(
                f"{file} is not a valid .parquet file: {type(error).__name__}: {why}"
            ) from None
    _, absent = _with_absent(table.schema, schema, missing_as_null)
    for field in absent:
        table = table.append_column(field, pa.nulls(table.num_rows, type=field.type))
    if absent and sorted(table.column_names) == sorted(schema.names):
        table = table.select(schema.names)
    _check_schema(file, table.schema, schema)
    return table


def read_json(path: str | Path) -> Any:
    """Load a JSON file, naming the path in the error when it is missing or corrupt."""
    file = Path(path)
    return load_from_file(file.parent, file.name)
