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

from src.core.io import atomic_output, load_from_file, load_parquet_table, save_to_file

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


def read_parquet(
    path: str | Path,
    schema: pa.Schema,
    *,
    missing_as_null: Collection[str] = (),
    handle: IO[bytes] | None = None,
) -> pa.Table:
    """Read a Parquet file and check that its columns and dtypes equal `schema`.

    `missing_as_null` names nullable columns of `schema` that files written before them lack:
    such a file is read with those columns all null, in the schema's order.

    Raises `FileNotFoundError` naming the path when it is missing and `ValueError` naming the
    path (and the differing columns) when the file is corrupt or was written with another
    schema. `handle`: the file already opened (e.g. by `src.containment.open_regular`), read
    instead of opening `path`, which then only names it.
    """
    file = Path(path)
    if handle is None:
        table = load_parquet_table(file.parent, file.name)
    else:
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(handle, page_checksum_verification=True)
            _ = [(field.name, str(field.type)) for field in table.schema]
        except Exception as error:
            why = " ".join(str(error).split())
            raise ValueError(
                f"{file} is not a valid .parquet file: {type(error).__name__}: {why}"
            ) from None
    absent = [
        field
        for field in schema
        if field.name in missing_as_null and field.nullable and field.name not in table.column_names
    ]
    for field in absent:
        table = table.append_column(field, pa.nulls(table.num_rows, type=field.type))
    if absent and sorted(table.column_names) == sorted(schema.names):
        table = table.select(schema.names)
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
    return load_from_file(file.parent, file.name)
