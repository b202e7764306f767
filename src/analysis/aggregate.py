"""Concatenate the per-run tables of an experiment into `tables_dir/{eval,history,updates}`.

Each table is written as Parquet (same explicit schema as the per-run files; the run configs
as a JSON list under the metadata key `b"configs"`) and as CSV for spreadsheets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from src.containment import open_regular
from src.core.io import atomic_output
from src.runfiles import RunFiles
from src.schemas import (
    CERTIFICATE_COLUMNS,
    EVAL_SCHEMA,
    HISTORY_SCHEMA,
    UPDATES_SCHEMA,
    VIOLATING_EPISODES,
    read_parquet,
    write_parquet,
)

__all__ = ["ADDED_COLUMNS", "CONFIGS_METADATA_KEY", "RUN_TABLES", "aggregate", "load_table"]

CONFIGS_METADATA_KEY = b"configs"

# File name stem -> schema of every per-run table the aggregation concatenates.
RUN_TABLES: dict[str, pa.Schema] = {
    "eval": EVAL_SCHEMA,
    "history": HISTORY_SCHEMA,
    "updates": UPDATES_SCHEMA,
}

# File name stem -> nullable columns added after files of that table were first written:
# read as null from older files (`src.schemas.read_parquet`).
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"eval": (*CERTIFICATE_COLUMNS, VIOLATING_EPISODES)}


def load_table(
    tables_dir: str | Path, name: str, *, root: str | Path | None = None, limit: int | None = None
) -> pa.Table:
    """Read an aggregated table `tables_dir/{name}.parquet`, checking its schema (columns
    added since, `ADDED_COLUMNS`, are null when the file lacks them).

    With `root` (a results folder holding `tables_dir`), only a regular file inside it is
    read, of at most `limit` bytes (`src.containment.open_regular`)."""
    if name not in RUN_TABLES:
        raise ValueError(f"unknown table {name!r}; known: {sorted(RUN_TABLES)}")
    path = Path(tables_dir) / f"{name}.parquet"
    missing = ADDED_COLUMNS.get(name, ())
    if root is None:
        return read_parquet(path, RUN_TABLES[name], missing_as_null=missing)
    with open_regular(root, path.absolute(), limit=limit) as handle:
        return read_parquet(path, RUN_TABLES[name], missing_as_null=missing, handle=handle)


def _check_identity(table: pa.Table, path: Path, config: dict) -> None:
    expected = {"env": config["env_name"], "algo": config["algo"], "run": int(config["run_idx"])}
    for column, value in expected.items():
        found = set(table.column(column).to_pylist())
        if found - {value}:
            raise ValueError(
                f"{path} has {column} values {sorted(found - {value})}, config says {value!r}"
            )


def _write_csv(table: pa.Table, path: Path) -> None:
    frame = table.to_pandas()
    for field in table.schema:
        if pa.types.is_list(field.type):
            # One JSON list per cell (null stays empty), readable back with json.loads.
            kind = int if pa.types.is_integer(field.type.value_type) else float
            frame[field.name] = [
                None if v is None else json.dumps([kind(x) for x in v]) for v in frame[field.name]
            ]
    with atomic_output(path) as tmp:
        frame.to_csv(tmp, index=False)


def aggregate(run_dirs: Sequence[str | Path], tables_dir: str | Path) -> None:
    """Concatenate `eval`, `history` and `updates` of all runs into `tables_dir` (Parquet + CSV).

    Every run dir must hold `config.json`, `eval.parquet`, `history.parquet` and
    `updates.parquet` with the schemas of `src.schemas` (files from before a column of
    `ADDED_COLUMNS` existed are read with it null). Runs must be distinct
    (env, algo, run) triples. All inputs are read and checked before anything is written.
    """
    if isinstance(run_dirs, str | Path) or len(run_dirs) == 0:
        raise ValueError(f"run_dirs must be a non-empty list of run folders, got {run_dirs!r}")
    configs = []
    parts: dict[str, list[pa.Table]] = {name: [] for name in RUN_TABLES}
    seen: dict[tuple[str, str, int], Path] = {}
    for run_dir in run_dirs:
        run_path = Path(run_dir)
        config = RunFiles(run_path).read_config()
        identity = (config["env_name"], config["algo"], int(config["run_idx"]))
        if identity in seen:
            raise ValueError(f"run {identity} appears twice: {seen[identity]} and {run_path}")
        seen[identity] = run_path
        configs.append(config)
        for name, schema in RUN_TABLES.items():
            path = getattr(RunFiles(run_path), name)
            table = read_parquet(path, schema, missing_as_null=ADDED_COLUMNS.get(name, ()))
            _check_identity(table, path, config)
            parts[name].append(table.replace_schema_metadata(None))
    metadata = {CONFIGS_METADATA_KEY: json.dumps(configs, sort_keys=True, default=str)}
    out = Path(tables_dir)
    for name, schema in RUN_TABLES.items():
        table = pa.concat_tables(parts[name]).cast(schema.with_metadata(metadata))
        write_parquet(table, out / f"{name}.parquet")
        _write_csv(table, out / f"{name}.csv")
