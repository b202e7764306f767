"""Parquet export of a run: its training history and update metrics as tables.

`export_run` turns a run's `history.json` and `updates.json` into `history.parquet` and
`updates.parquet`, with the explicit schemas of `src.schemas` (`HISTORY_SCHEMA`,
`UPDATES_SCHEMA`, documented in `docs/schemas.md`, section "Output schemas") and the run's
config as metadata, so a Parquet file found on its own still says which experiment produced
it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from src.analysis.files import read_json
from src.core.io import CorruptFileError
from src.runfiles import RunFiles
from src.schemas import (
    HISTORY_SCHEMA,
    UPDATE_METRIC_KEYS,
    UPDATES_SCHEMA,
    table_with_config,
    write_parquet,
)

__all__ = ["export_run", "history_table", "updates_table"]

_UPDATE_FIXED = ("update", "global_step", "wall_time")


def history_table(history: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> pa.Table:
    """One row per training episode, from `EpisodeLog` dicts as stored in `history.json`."""
    if not isinstance(history, Sequence) or isinstance(history, str | bytes):
        raise ValueError(f"history must be a list of episode records, got {type(history).__name__}")
    rows = []
    for index, record in enumerate(history):
        if not isinstance(record, Mapping):
            raise ValueError(f"history entry {index} is not a record: {record!r}")
        missing = [name for name in HISTORY_SCHEMA.names if name not in record]
        if missing:
            raise ValueError(f"history entry {index} lacks fields {missing}")
        rows.append({name: record[name] for name in HISTORY_SCHEMA.names})
    return table_with_config(
        pd.DataFrame(rows, columns=HISTORY_SCHEMA.names), HISTORY_SCHEMA, config
    )


def updates_table(updates: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> pa.Table:
    """One row per policy update, from the flat metric dicts stored in `updates.json`.

    Keys must be `update`, `global_step`, `wall_time` or a constant of `src.algos.metrics`;
    anything else is an error, so a renamed metric cannot silently vanish from the tables.
    """
    if not isinstance(updates, Sequence) or isinstance(updates, str | bytes):
        raise ValueError(f"updates must be a list of metric dicts, got {type(updates).__name__}")
    known = set(_UPDATE_FIXED) | set(UPDATE_METRIC_KEYS)
    rows = []
    for index, record in enumerate(updates):
        if not isinstance(record, Mapping):
            raise ValueError(f"updates entry {index} is not a dict: {record!r}")
        missing = [key for key in _UPDATE_FIXED if key not in record]
        unknown = sorted(set(record) - known)
        if missing:
            raise ValueError(f"updates entry {index} lacks keys {missing}")
        if unknown:
            raise ValueError(
                f"updates entry {index} has keys that are not metric constants of "
                f"src.algos.metrics: {unknown}"
            )
        row = {key: record.get(key) for key in (*_UPDATE_FIXED, *UPDATE_METRIC_KEYS)}
        row.update(env=config["env_name"], algo=config["algo"], run=config["run_idx"])
        rows.append(row)
    return table_with_config(
        pd.DataFrame(rows, columns=UPDATES_SCHEMA.names), UPDATES_SCHEMA, config
    )


def export_run(run_dir: str | Path, history_out: str | Path, updates_out: str | Path) -> None:
    """Write a run's `history.json` and `updates.json` as Parquet with explicit schemas.

    `history_out` gets one row per training episode (`HISTORY_SCHEMA`), `updates_out` one row
    per policy update (`UPDATES_SCHEMA`); both carry the run's config as metadata. Both tables
    are built before either file is written, so a bad input writes nothing.
    """
    files = RunFiles(run_dir)
    config = files.read_config()
    tables = []
    for path, build in ((files.history_json, history_table), (files.updates_json, updates_table)):
        records = read_json(path)
        try:
            tables.append(build(records, config))
        except (TypeError, ValueError) as error:
            # One line naming the file: the builders name the record, not where it came from.
            raise CorruptFileError(
                f"{path}: {' '.join(str(error).split())[:500]}", path=path, format=".json"
            ) from None
    history, updates = tables
    for column, table in (("env", history), ("algo", history)):
        key = "env_name" if column == "env" else "algo"
        stray = set(table.column(column).to_pylist()) - {config[key]}
        if stray:
            raise ValueError(
                f"{files.history_json} has {column} values {stray} not {config[key]!r}"
            )
    write_parquet(history, history_out)
    write_parquet(updates, updates_out)
