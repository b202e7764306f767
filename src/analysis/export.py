"""Parquet export of a run: explicit schemas for history, updates and evaluation tables.

Each table has a fixed pyarrow schema (column names and dtypes documented in
`docs/schemas.md`, section "Output schemas") and carries the run's resolved config as a JSON
string under the schema metadata key `b"config"`, so a Parquet file found on its own still
says which experiment produced it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from src.algos import metrics
from src.analysis.files import CONFIG_METADATA_KEY, read_json, write_parquet
from src.checks import is_int, nested_excess, shown
from src.config.base import VERSION_KEYS
from src.containment import regular_file
from src.core.io import CorruptFileError
from src.runfiles import RunFiles

__all__ = [
    "CERTIFICATE_COLUMNS",
    "EVAL_EPISODES_SCHEMA",
    "EVAL_SCHEMA",
    "HISTORY_SCHEMA",
    "RUN_CONFIG_BOUNDS",
    "RUN_CONFIG_BYTES",
    "UPDATES_SCHEMA",
    "UPDATE_METRIC_KEYS",
    "VIOLATING_EPISODES",
    "certificate_columns",
    "config_from_metadata",
    "export_run",
    "history_table",
    "load_run_config",
    "table_with_config",
    "updates_table",
]

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("env", pa.string(), nullable=False),
        pa.field("algo", pa.string(), nullable=False),
        pa.field("run", pa.int32(), nullable=False),
        pa.field("episode", pa.int64(), nullable=False),
        pa.field("env_copy", pa.int32(), nullable=False),
        pa.field("t_start", pa.int64(), nullable=False),
        pa.field("t_end", pa.int64(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("team_return", pa.float64(), nullable=False),
        pa.field("agent_returns", pa.list_(pa.float64()), nullable=False),
        pa.field("cost", pa.float64(), nullable=False),
        pa.field("violated", pa.bool_(), nullable=False),
        pa.field("first_violation_step", pa.int32(), nullable=False),
        pa.field("truncated_by_cap", pa.bool_(), nullable=False),
        pa.field("shield_interventions", pa.int64(), nullable=False),
    ]
)

# Every metric constant of src.algos.metrics, in definition order: the update columns are the
# same for every algorithm (absent metrics are null), so tables of all runs concatenate.
UPDATE_METRIC_KEYS: tuple[str, ...] = tuple(
    value
    for name, value in vars(metrics).items()
    if name.isupper() and isinstance(value, str) and "/" in value
)

UPDATES_SCHEMA = pa.schema(
    [
        pa.field("env", pa.string(), nullable=False),
        pa.field("algo", pa.string(), nullable=False),
        pa.field("run", pa.int32(), nullable=False),
        pa.field("update", pa.int64(), nullable=False),
        pa.field("global_step", pa.int64(), nullable=False),
        pa.field("wall_time", pa.float64(), nullable=False),
        *(pa.field(key, pa.float64(), nullable=True) for key in UPDATE_METRIC_KEYS),
    ]
)

# Eval column -> (key of the certificate dict, dtype): the certificate of a shield run's
# deployed policy (`src.algos.shield.calibration.Certificate.to_dict`), the same on every row
# of the run and null for runs without one.
CERTIFICATE_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "certified": ("certified", pa.bool_()),
    "cert_allowance": ("allowance", pa.float64()),
    "cert_episodes": ("episodes", pa.int64()),
    "cert_violations": ("violations", pa.int64()),
    "cert_p_value": ("p_value", pa.float64()),
    "cert_delta": ("delta", pa.float64()),
    "cert_horizon": ("horizon", pa.int64()),
    "cert_first_seed": ("first_seed", pa.int64()),
}

VIOLATING_EPISODES = "violating_episodes"
"""Eval column: the per-episode outcomes of a row (the paired comparisons read it)."""

EVAL_SCHEMA = pa.schema(
    [
        pa.field("env", pa.string(), nullable=False),
        pa.field("algo", pa.string(), nullable=False),
        pa.field("run", pa.int32(), nullable=False),
        pa.field("horizon", pa.int32(), nullable=False),
        pa.field("shielded", pa.bool_(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("violations", pa.int64(), nullable=False),
        pa.field("p_violation", pa.float64(), nullable=False),
        pa.field("ci_low", pa.float64(), nullable=False),
        pa.field("ci_high", pa.float64(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=False),
        pa.field("mean_return", pa.float64(), nullable=False),
        pa.field("mean_cost", pa.float64(), nullable=False),
        pa.field("collision_violations", pa.float64(), nullable=True),
        pa.field("mean_goals", pa.float64(), nullable=True),
        *(pa.field(key, pa.string(), nullable=False) for key in VERSION_KEYS),
        *(pa.field(name, dtype, nullable=True) for name, (_, dtype) in CERTIFICATE_COLUMNS.items()),
        # Indices i < n of the episodes whose first violation is within the horizon, sorted:
        # run r's episode i has reset seed final_policy_eval_seed_offset + r * n + i for every
        # algorithm, so two policies' outcomes pair episode by episode. Null in files written
        # before the column existed.
        pa.field(VIOLATING_EPISODES, pa.list_(pa.int32()), nullable=True),
    ]
)

# One row per evaluation episode and shield mode (`eval_episodes.parquet`, beside eval.parquet):
# the outcomes the rows of eval.parquet summarise, for tools that take per-episode values.
EVAL_EPISODES_SCHEMA = pa.schema(
    [
        pa.field("env", pa.string(), nullable=False),
        pa.field("algo", pa.string(), nullable=False),
        pa.field("run", pa.int32(), nullable=False),
        pa.field("shielded", pa.bool_(), nullable=False),
        pa.field("episode", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("team_return", pa.float64(), nullable=False),
        pa.field("cost", pa.float64(), nullable=False),
        pa.field("first_violation_step", pa.int32(), nullable=False),
        # Null when the policy does not say which actions its shield replaced.
        pa.field("shield_interventions", pa.int64(), nullable=True),
    ]
)

_UPDATE_FIXED = ("update", "global_step", "wall_time")


def certificate_columns(certificate: Mapping[str, Any] | None) -> dict[str, Any]:
    """The eval columns of a certificate dict (`CERTIFICATE_COLUMNS`); all None without one.

    A certificate that tested nothing (`episodes` 0) has no violation count and no p-value:
    those two are None (its dict holds -1 and NaN).
    """
    if certificate is None:
        return dict.fromkeys(CERTIFICATE_COLUMNS)
    missing = sorted({key for key, _ in CERTIFICATE_COLUMNS.values()} - set(certificate))
    if missing:
        raise ValueError(f"certificate lacks the keys {missing}")
    row = {name: certificate[key] for name, (key, _) in CERTIFICATE_COLUMNS.items()}
    row["certified"] = bool(row["certified"])
    if int(row["cert_episodes"]) == 0:
        row["cert_violations"] = row["cert_p_value"] = None
    return row


RUN_CONFIG_BYTES = 4 * 1024**2
"""The largest config.json read (a run's is a few kilobytes)."""
RUN_CONFIG_BOUNDS = {"max_depth": 32, "max_items": 100_000, "max_text": 65_536}
"""How deep, large and long the values of a run config may be (`src.checks.nested_excess`)."""


def _bad_run_config(path: Path, why: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {why}", path=path, format=".json")


def load_run_config(run_dir: str | Path) -> dict[str, Any]:
    """Read the run's config.json and check the identity keys every export needs.

    The file is bounded before it is read (`RUN_CONFIG_BYTES`) and its values after
    (`RUN_CONFIG_BOUNDS`: depth, count, text length); `env_name` and `algo` must be strings
    and `run_idx` an integer >= 0. Raises `CorruptFileError` (a `ValueError`), one line
    naming the file and the value, otherwise.
    """
    path = RunFiles(run_dir).config
    try:
        size = regular_file(path.parent, path.name).stat().st_size
    except FileNotFoundError:
        size = 0  # read_json names the missing file
    if size > RUN_CONFIG_BYTES:
        raise _bad_run_config(
            path, f"holds {size} bytes, more than the {RUN_CONFIG_BYTES} a run config may hold"
        )
    config = read_json(path)
    if not isinstance(config, dict):
        raise _bad_run_config(path, f"must hold a JSON object, not {type(config).__name__}")
    excess = nested_excess(config, **RUN_CONFIG_BOUNDS)
    if excess is not None:
        raise _bad_run_config(path, f"the run config {excess}")
    missing = [key for key in ("env_name", "algo", "run_idx") if key not in config]
    if missing:
        raise _bad_run_config(path, f"lacks required keys: {missing}")
    for key in ("env_name", "algo"):
        if not isinstance(config[key], str):
            raise _bad_run_config(path, f"{key}={shown(config[key])}: must be a string")
    if not is_int(config["run_idx"]) or config["run_idx"] < 0:
        raise _bad_run_config(
            path, f"run_idx={shown(config['run_idx'])}: must be a JSON integer >= 0"
        )
    return config


def table_with_config(
    data: pd.DataFrame | Sequence[Mapping[str, Any]],
    schema: pa.Schema,
    config: Mapping[str, Any],
) -> pa.Table:
    """Build a table with exactly `schema` (column order and dtypes) and the config as metadata.

    Raises `ValueError` naming missing or unexpected columns, or the column that cannot be
    converted to its dtype.
    """
    frame = pd.DataFrame(list(data)) if not isinstance(data, pd.DataFrame) else data
    names = list(schema.names)
    missing = [name for name in names if name not in frame.columns]
    extra = [name for name in frame.columns if name not in names]
    if (missing or extra) and len(frame) > 0:
        raise ValueError(f"columns do not match the schema: missing {missing}, unexpected {extra}")
    arrays = []
    for field in schema:
        values = frame[field.name].tolist() if field.name in frame.columns else []
        if pa.types.is_floating(field.type):
            # NaN and None both mean "not measured"; store them as null in nullable columns.
            values = [
                None
                if field.nullable and (v is None or (isinstance(v, float) and math.isnan(v)))
                else v
                for v in values
            ]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as error:
            raise ValueError(
                f"column {field.name!r} cannot be stored as {field.type}: {error}"
            ) from error
        if not field.nullable and arrays[-1].null_count > 0:
            raise ValueError(f"column {field.name!r} has missing values but is not nullable")
    metadata = {CONFIG_METADATA_KEY: json.dumps(dict(config), sort_keys=True, default=str)}
    return pa.Table.from_arrays(arrays, schema=schema.with_metadata(metadata))


def config_from_metadata(table: pa.Table) -> dict[str, Any]:
    """Return the run config stored in a table's schema metadata by `table_with_config`."""
    metadata = table.schema.metadata or {}
    if CONFIG_METADATA_KEY not in metadata:
        raise ValueError("table has no config in its schema metadata")
    return json.loads(metadata[CONFIG_METADATA_KEY])


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
    config = load_run_config(run_dir)
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
