"""Parquet export: explicit schemas and the config as metadata survive a round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from src.algos import metrics
from src.analysis.export import export_run
from src.schemas import (
    EVAL_SCHEMA,
    HISTORY_SCHEMA,
    UPDATE_METRIC_KEYS,
    UPDATES_SCHEMA,
    config_from_metadata,
    read_parquet,
    table_with_config,
)
from tests.analysis.synthetic import make_config, make_history, make_updates, write_run_dir


def write_inputs(run_dir: Path, history: object, updates: object, algo: str = "shield") -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = make_config("hazard_grid", algo, 3)
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "history.json").write_text(json.dumps(history))
    (run_dir / "updates.json").write_text(json.dumps(updates))
    return config


def test_round_trip_keeps_schema_metadata_and_values(tmp_path: Path) -> None:
    history = make_history("hazard_grid", "shield", 3, episodes=7)
    updates = make_updates("shield", updates=4)
    config = write_inputs(tmp_path, history, updates)
    export_run(tmp_path, tmp_path / "history.parquet", tmp_path / "updates.parquet")

    table = read_parquet(tmp_path / "history.parquet", HISTORY_SCHEMA)
    assert table.schema.equals(HISTORY_SCHEMA, check_metadata=False)
    assert config_from_metadata(table) == config
    rows = table.to_pylist()
    assert len(rows) == 7
    for row, record in zip(rows, history, strict=True):
        assert row == record  # every field, including the per-agent returns list, unchanged

    updates_table = read_parquet(tmp_path / "updates.parquet", UPDATES_SCHEMA)
    assert config_from_metadata(updates_table)["run_idx"] == 3
    frame = updates_table.to_pandas()
    assert frame["update"].tolist() == [0, 1, 2, 3]
    assert (frame["env"] == "hazard_grid").all() and (frame["run"] == 3).all()
    assert frame[metrics.SHIELD_INTERVENTIONS].notna().all()
    # Metrics an algorithm does not log are null, not zero.
    assert frame[metrics.LAMBDA].isna().all()


def test_update_columns_are_every_metric_constant() -> None:
    assert metrics.POLICY_LOSS in UPDATE_METRIC_KEYS
    assert metrics.SHIELD_INTERVENTIONS in UPDATE_METRIC_KEYS
    assert UPDATES_SCHEMA.names[:6] == ["env", "algo", "run", "update", "global_step", "wall_time"]
    assert UPDATES_SCHEMA.names[6:] == list(UPDATE_METRIC_KEYS)


def test_empty_history_gives_an_empty_table_with_the_schema(tmp_path: Path) -> None:
    write_inputs(tmp_path, [], [])
    export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")
    table = pq.read_table(tmp_path / "h.parquet")
    assert table.num_rows == 0
    assert table.schema.equals(HISTORY_SCHEMA, check_metadata=False)


@pytest.mark.parametrize(
    ("history", "updates", "message"),
    [
        ({"not": "a list"}, [], "history must be a list"),
        ([{"env": "hazard_grid"}], [], "lacks fields"),
        (
            [],
            [{"update": 0, "global_step": 1, "wall_time": 0.1, "losses/typo": 1.0}],
            "losses/typo",
        ),
        ([], [{"update": 0, "wall_time": 0.1}], "global_step"),
    ],
)
def test_bad_inputs_raise_and_write_nothing(
    tmp_path: Path, history: object, updates: object, message: str
) -> None:
    write_inputs(tmp_path, history, updates)
    with pytest.raises(ValueError, match=message):
        export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")
    assert not (tmp_path / "h.parquet").exists() and not (tmp_path / "u.parquet").exists()


def test_wrong_dtype_names_the_column(tmp_path: Path) -> None:
    history = make_history("hazard_grid", "shield", 3, episodes=2)
    history[1]["length"] = "long"
    write_inputs(tmp_path, history, [])
    with pytest.raises(ValueError, match="'length'"):
        export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")


def test_history_of_another_run_is_rejected(tmp_path: Path) -> None:
    write_inputs(tmp_path, make_history("spread", "shield", 3, episodes=2), [])
    with pytest.raises(ValueError, match="env values"):
        export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")


def test_missing_and_corrupt_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config"):
        export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")
    write_inputs(tmp_path, [], [])
    (tmp_path / "history.json").write_text("[{")
    with pytest.raises(ValueError, match="history"):
        export_run(tmp_path, tmp_path / "h.parquet", tmp_path / "u.parquet")


def test_eval_table_round_trip(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path, "hazard_grid", "shield", 1, eval_episodes=30)
    table = read_parquet(run_dir / "eval.parquet", EVAL_SCHEMA)
    assert table.num_rows == 10  # five horizons, shield on and off
    assert config_from_metadata(table)["algo"] == "shield"
    with pytest.raises(ValueError, match="missing"):
        table_with_config([{"env": "x"}], EVAL_SCHEMA, {})


def test_read_parquet_reports_a_schema_mismatch(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path, "hazard_grid", "ippo", 0, eval_episodes=10)
    with pytest.raises(ValueError, match="expected schema"):
        read_parquet(run_dir / "eval.parquet", HISTORY_SCHEMA)
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"broken\.parquet"):
        read_parquet(tmp_path / "broken.parquet", HISTORY_SCHEMA)


def documented_columns(section: str) -> dict[str, str]:
    """`column -> dtype` rows of the table under `### {section}` in docs/schemas.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "schemas.md").read_text()
    block = text.split(f"### `{section}`", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def dtype_name(field) -> str:
    return {
        "list<item: double>": "list<float64>",
        "list<item: int32>": "list<int32>",
        "double": "float64",
    }.get(str(field.type), str(field.type))


@pytest.mark.parametrize(
    ("section", "schema", "strict"),
    [
        ("history.parquet", HISTORY_SCHEMA, True),
        ("eval.parquet", EVAL_SCHEMA, True),
        # Metric columns follow src.algos.metrics; the fixed ones must be documented.
        ("updates.parquet", UPDATES_SCHEMA, False),
    ],
)
def test_schemas_are_documented(section: str, schema, strict: bool) -> None:
    documented = documented_columns(section)
    actual = {field.name: dtype_name(field) for field in schema}
    for name, dtype in documented.items():
        assert actual.get(name) == dtype, f"docs/schemas.md: {section} column {name}"
    if strict:
        assert list(documented) == schema.names
    else:
        assert list(documented)[:6] == schema.names[:6]
