"""The result files' schemas (docs/schemas.md), and their files: each table built with exactly
its schema and carrying the run config, written atomically, read checked.

Each table has a fixed pyarrow schema, defined here once: a run's `history.parquet`
(`HISTORY_SCHEMA`) and `updates.parquet` (`UPDATES_SCHEMA`), which the export writes
(`src.analysis.export`), its `eval.parquet` (`EVAL_SCHEMA`) and `eval_episodes.parquet`
(`EVAL_EPISODES_SCHEMA`), which the evaluation writes (`src.evaluation.evaluate`) with the
shield's certificate as a record of its own (`certificate.json`, `certificate_record`); the
analysis reads them and concatenates them over runs. `table_with_config` builds a table with
exactly its schema and the run's config as a JSON string under the schema metadata key
`CONFIG_METADATA_KEY`, so a Parquet file found on its own still says which experiment produced
it (`config_from_metadata` reads it back).

Every write goes through `src.core.io` (atomic: hidden temp file in the same folder, fsync,
rename; a killed writer's temp is removed by the next write), so a killed job never leaves a
half file that Snakemake would take for a finished output. Parquet files carry a CRC per page
and are verified on read, so a damaged file is an error naming it, never other numbers.

>>> certificate = {"certified": True, "allowance": 0.05, "max_risk": 0.1, "delta": 0.05,
...     "horizon": 100, "episodes": 100, "violations": 2, "p_value": 0.002, "first_seed": 7,
...     "tested": []}
>>> record = certificate_record({"env_name": "hazard_grid", "algo": "shield", "run_idx": 0,
...     "shielded": True, "git_commit": "abc", "git_dirty": False}, certificate)
>>> record["n"], record["k"], record["calibration_seeds"], record["certified"]
(100, 2, {'first': 7, 'count': 100}, True)
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa

from src.algos import metrics
from src.config.base import VERSION_KEYS
from src.containment import ContainmentError
from src.core.io import CorruptFileError, check_parquet_size, load_parquet_table, save_to_file

__all__ = [
    "CERTIFICATE_COLUMNS",
    "CERTIFICATE_RECORD_KEYS",
    "CONFIG_METADATA_KEY",
    "EVAL_EPISODES_SCHEMA",
    "EVAL_SCHEMA",
    "HISTORY_SCHEMA",
    "UPDATES_SCHEMA",
    "UPDATE_METRIC_KEYS",
    "VIOLATING_EPISODES",
    "certificate_columns",
    "certificate_record",
    "config_from_metadata",
    "read_parquet",
    "table_with_config",
    "write_certificate_record",
    "write_parquet",
]

CONFIG_METADATA_KEY = b"config"
"""Schema metadata key of the run config (JSON) a per-run table carries."""

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


CERTIFICATE_RECORD_KEYS = (
    "env",
    "algo",
    "run",
    "shielded",
    "has_certificate",
    "certified",
    "n",
    "k",
    "max_risk",
    "delta",
    "horizon",
    "allowance",
    "p_value",
    "calibration_seeds",
    "tested",
    "git_commit",
    "git_dirty",
)
"""The keys of a `certificate.json` record, in the order written."""


def _finite(value: float) -> float | None:
    """`value` as a float, None when it is not finite (JSON has no NaN)."""
    number = float(value)
    return number if math.isfinite(number) else None


def certificate_record(
    config: Mapping[str, Any], certificate: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The `certificate.json` record of a run whose config.json holds `config` and whose
    policy.pt holds `certificate` (the dict of `src.algos.shield.calibration.Certificate`;
    None: none): the certificate stated once, in plain JSON, for readers that open neither
    Parquet nor torch files, with the code that produced it (the git commit config.json
    records). Runs without a certificate have `has_certificate: false` and null certificate
    fields.

    `n` and `k` are the calibration episodes the deployed allowance played and how many of
    them violated within `horizon` steps; their reset seeds are `calibration_seeds.first + i`,
    i < `calibration_seeds.count` (= n). A shield that tested nothing (`calibration_episodes:
    0`) has n = 0 and null k and p-value. `tested` lists every allowance the fixed-sequence
    test tried, in order.
    """
    record: dict[str, Any] = dict.fromkeys(CERTIFICATE_RECORD_KEYS)
    record.update(
        env=str(config["env_name"]),
        algo=str(config["algo"]),
        run=int(config["run_idx"]),
        shielded=bool(config["shielded"]),
        has_certificate=certificate is not None,
        git_commit=config.get("git_commit"),
        git_dirty=config.get("git_dirty"),
    )
    if certificate is None:
        return record
    episodes = int(certificate["episodes"])
    tested = episodes > 0
    record.update(
        certified=bool(certificate["certified"]),
        n=episodes,
        k=int(certificate["violations"]) if tested else None,
        max_risk=float(certificate["max_risk"]),
        delta=float(certificate["delta"]),
        horizon=int(certificate["horizon"]),
        allowance=_finite(certificate["allowance"]),
        p_value=_finite(certificate["p_value"]) if tested else None,
        calibration_seeds={"first": int(certificate["first_seed"]), "count": episodes},
        tested=[
            {
                key: _finite(value) if isinstance(value, float) else value
                for key, value in entry.items()
            }
            for entry in certificate["tested"]
        ],
    )
    return record


def write_certificate_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Write a record (`certificate_record`) to `path` as JSON, atomically."""
    target = Path(path)
    return save_to_file(dict(record), target.parent, target.name)


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
