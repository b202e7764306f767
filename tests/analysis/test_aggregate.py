"""Aggregation of run folders into experiment tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from src.analysis.aggregate import CONFIGS_METADATA_KEY, RUN_TABLES, aggregate, load_table
from src.schemas import CERTIFICATE_COLUMNS
from tests.analysis.synthetic import make_certificate, write_experiment, write_run_dir


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("experiment")
    run_dirs = write_experiment(root, envs=("hazard_grid",), algos=("ippo", "shield"), runs=2)
    aggregate(run_dirs, root / "tables")
    return run_dirs, root / "tables"


def test_tables_concatenate_every_run(experiment: tuple[list[Path], Path]) -> None:
    run_dirs, tables = experiment
    for name, schema in RUN_TABLES.items():
        table = load_table(tables, name)
        assert table.schema.equals(schema, check_metadata=False)
        per_run = sum(pq.read_table(d / f"{name}.parquet").num_rows for d in run_dirs)
        assert table.num_rows == per_run
        configs = json.loads(table.schema.metadata[CONFIGS_METADATA_KEY])
        assert [(c["algo"], c["run_idx"]) for c in configs] == [
            ("ippo", 0),
            ("ippo", 1),
            ("shield", 0),
            ("shield", 1),
        ]
        csv = pd.read_csv(tables / f"{name}.csv")
        assert list(csv.columns) == schema.names
        assert len(csv) == per_run


def test_csv_lists_are_json(experiment: tuple[list[Path], Path]) -> None:
    _, tables = experiment
    csv = pd.read_csv(tables / "history.csv")
    parquet = load_table(tables, "history").to_pandas()
    assert json.loads(csv.loc[0, "agent_returns"]) == pytest.approx(
        list(parquet.loc[0, "agent_returns"])
    )


def test_empty_input_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        aggregate([], tmp_path / "tables")
    with pytest.raises(ValueError, match="non-empty"):
        aggregate(str(tmp_path), tmp_path / "tables")


def test_duplicate_run_is_an_error(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path, "hazard_grid", "ippo", 0, eval_episodes=5)
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    with pytest.raises(ValueError, match="appears twice"):
        aggregate([run_dir, copy], tmp_path / "tables")
    assert not (tmp_path / "tables").exists()


def test_missing_table_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    good = write_run_dir(tmp_path, "hazard_grid", "ippo", 0, eval_episodes=5)
    bad = write_run_dir(tmp_path, "hazard_grid", "ippo", 1, eval_episodes=5)
    (bad / "updates.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="updates"):
        aggregate([good, bad], tmp_path / "tables")
    assert not (tmp_path / "tables").exists()


def test_table_of_another_run_is_rejected(tmp_path: Path) -> None:
    first = write_run_dir(tmp_path, "hazard_grid", "ippo", 0, eval_episodes=5)
    second = write_run_dir(tmp_path, "hazard_grid", "ippo", 1, eval_episodes=5)
    shutil.copy(first / "eval.parquet", second / "eval.parquet")
    with pytest.raises(ValueError, match="run values"):
        aggregate([first, second], tmp_path / "tables")


def test_load_table_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown table"):
        load_table(tmp_path, "summary")


def _without_certificate_columns(path: Path) -> None:
    """Rewrite an eval.parquet as it was written before the certificate columns existed."""
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(list(CERTIFICATE_COLUMNS)), path)


def test_eval_files_from_before_the_certificate_read_as_null(tmp_path: Path) -> None:
    old = write_run_dir(tmp_path, "hazard_grid", "shield", 0, eval_episodes=5)
    new = write_run_dir(
        tmp_path,
        "hazard_grid",
        "shield",
        1,
        eval_episodes=5,
        certificate=make_certificate(1, certified=True),
    )
    _without_certificate_columns(old / "eval.parquet")
    aggregate([old, new], tmp_path / "tables")
    frame = load_table(tmp_path / "tables", "eval").to_pandas()
    certified = frame.groupby("run")["certified"].agg(lambda x: x.tolist())
    assert certified[0] == [None] * 10 and certified[1] == [True] * 10
    # An aggregated table from before the columns reads the same way.
    _without_certificate_columns(tmp_path / "tables" / "eval.parquet")
    table = load_table(tmp_path / "tables", "eval")
    assert table.schema.equals(RUN_TABLES["eval"], check_metadata=False)
    assert table.column("cert_episodes").null_count == table.num_rows
    assert CONFIGS_METADATA_KEY in table.schema.metadata
    # Only columns that were added later are filled in; a file lacking others is still wrong.
    bare = pq.read_table(old / "eval.parquet").drop_columns(["mean_goals"])
    pq.write_table(bare, old / "eval.parquet")
    with pytest.raises(ValueError, match="mean_goals"):
        aggregate([old, new], tmp_path / "again")
