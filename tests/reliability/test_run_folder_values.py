"""Values in a handed-over run folder are checked before anything is built from them, and
every refusal is one line naming the file and the value.

A 65 KB `policy.pt` recording `hidden_sizes: [1, 30000000]` made the evaluation build a 2.3 GB
network before it compared shapes; one whose config held a list nested 8 deep of shared
references cost 1.7 GB, 35 s and a 498 MB error message; a `config.json` asking 400,000
evaluation episodes at horizon 5,000 ran on where the same values in a workflow config are
refused. Bad values in `config.json`, `history.json` or a floor record ended in tracebacks
without the file's name, and a refused `.pt` lost torch's reason.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from src.analysis.aggregate import aggregate
from src.analysis.export import export_run
from src.analysis.floor import write_floor
from src.analysis.tables import make_summary
from src.containment import memory_budget
from src.core.io import CorruptFileError, PersistenceError, load_from_file, save_to_file
from src.evaluation.evaluate import evaluate_run
from src.evaluation.render import render_run
from tests.analysis.synthetic import write_experiment
from tests.analysis.test_floor import _floor


def _one_line(error: BaseException, *names: object, longest: int = 600) -> str:
    message = str(error)
    assert "\n" not in message.strip(), message[:2000]
    assert len(message) <= longest, f"{len(message)} characters: {message[:300]}..."
    for name in names:
        assert str(name) in message, f"the message does not name {name}: {message}"
    assert "YAML" not in message and "Traceback" not in message, message
    return message


def _policy(run_dir: Path) -> dict[str, Any]:
    return load_from_file(run_dir, "policy.pt")


def _rewrite_config(run_dir: Path, **changes: Any) -> None:
    path = run_dir / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


# ---------------------------------------------------------------- a policy's recorded shapes


def test_a_policy_recording_a_huge_network_is_refused_before_building_it(
    trained_run: Path, tmp_path: Path
):
    path = trained_run / "policy.pt"
    state = _policy(trained_run)
    state["network"]["hidden_sizes"] = [1, 30_000_000]
    save_to_file(state, trained_run, "policy.pt")
    assert path.stat().st_size < 256 * 1024
    out = tmp_path / "eval.parquet"
    for call in (
        lambda: evaluate_run(trained_run, out),
        lambda: render_run(trained_run, tmp_path / "videos", episodes=1),
    ):
        with memory_budget(1000), pytest.raises(CorruptFileError) as refused:
            call()
        _one_line(refused.value, path, "hidden_sizes=[1, 30000000]", "[64, 64]")
    # A record the run config agrees with (the largest it accepts: 16 layers of 4096, 2 GB
    # of weights) does not help: the file holds far fewer weights.
    wide = [4096] * 16
    recorded = json.loads((trained_run / "config.json").read_text())
    sections = recorded["sections"]
    sections["ppo"]["hidden_sizes"] = wide
    _rewrite_config(trained_run, algo_params={"hidden_sizes": wide}, sections=sections)
    state["config"]["algo_params"] = {"hidden_sizes": wide}
    state["config"]["sections"] = sections
    state["network"]["hidden_sizes"] = wide
    save_to_file(state, trained_run, "policy.pt")
    with memory_budget(1000), pytest.raises(CorruptFileError) as refused:
        evaluate_run(trained_run, out)
    _one_line(refused.value, path, "needs at least", "weights, the file holds")
    assert not out.exists()


def _shared_bomb(levels: int) -> list:
    """A list nested `levels` deep, ten references to the same list at each level: a few
    hundred bytes pickled, 10**levels values spelt out."""
    value: list = [0] * 10
    for _ in range(levels - 1):
        value = [value] * 10
    return value


def test_a_policy_config_of_shared_references_is_refused_at_once(trained_run: Path):
    path = trained_run / "policy.pt"
    state = _policy(trained_run)
    state["config"]["seed_offset"] = _shared_bomb(7)
    torch.save(state, path)  # the pickle's memo keeps one copy of each level
    assert path.stat().st_size < 256 * 1024
    started = time.monotonic()
    with pytest.raises(CorruptFileError) as refused:
        evaluate_run(trained_run, trained_run / "again.parquet")
    assert time.monotonic() - started < 10
    _one_line(refused.value, path, "more than 100000 values")


def test_a_deep_or_huge_config_json_is_refused_before_it_is_used(trained_run: Path):
    path = trained_run / "config.json"
    deep: Any = 0
    for _ in range(40):
        deep = [deep]
    _rewrite_config(trained_run, env_params={"max_steps": 20, "layout": deep})
    with pytest.raises(CorruptFileError) as refused:
        evaluate_run(trained_run, trained_run / "again.parquet")
    _one_line(refused.value, path, "nested deeper than 32 levels")
    _rewrite_config(trained_run, env_params={"max_steps": 20}, notes="x" * (5 * 2**20))
    with pytest.raises(CorruptFileError) as refused:
        evaluate_run(trained_run, trained_run / "again.parquet")
    _one_line(refused.value, path, "more than the 4194304")


def test_evaluation_episodes_beyond_the_job_memory_are_refused_from_config_json(
    trained_run: Path,
):
    path = trained_run / "config.json"
    _rewrite_config(
        trained_run, final_policy_eval_episodes=400_000, final_policy_eval_horizons=[1, 10, 5000]
    )
    with memory_budget(2000), pytest.raises(CorruptFileError) as refused:
        evaluate_run(trained_run, trained_run / "again.parquet")
    _one_line(
        refused.value, path, "final_policy_eval_episodes=400000", "5000", "32", "mem_mb of 2000"
    )


# ---------------------------------------------------------------- one line naming the file


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("run_idx", "0", "run_idx='0'"),
        ("final_policy_eval_seed_offset", 2**40, "final_policy_eval_seed_offset=1099511627776"),
        ("final_policy_eval_seed_offset", "x", "final_policy_eval_seed_offset='x'"),
    ],
)
def test_a_bad_value_in_config_json_is_one_line_naming_it(
    trained_run: Path, key: str, value: Any, named: str
):
    _rewrite_config(trained_run, **{key: value})
    for call in (
        lambda: evaluate_run(trained_run, trained_run / "again.parquet"),
        lambda: export_run(trained_run, trained_run / "h.parquet", trained_run / "u.parquet"),
    ):
        try:
            call()
        except PersistenceError as error:  # a job ends with its line, without a traceback
            _one_line(error, trained_run / "config.json", named)
        else:
            assert key != "run_idx", "the string run_idx was taken"


def test_a_history_holding_an_object_is_one_line_naming_it(trained_run: Path):
    path = trained_run / "history.json"
    path.write_text(json.dumps({"episodes": []}))
    with pytest.raises(PersistenceError) as refused:
        export_run(trained_run, trained_run / "h.parquet", trained_run / "u.parquet")
    _one_line(refused.value, path, "got dict")


def test_a_floor_value_that_is_a_string_is_one_line_naming_it(tmp_path: Path):
    root = tmp_path / "results" / "test"
    run_dirs = write_experiment(root, envs=("hazard_grid",), algos=("ippo",), runs=1)
    aggregate(run_dirs, root / "tables")
    floor = root / "floors" / "hazard_grid.json"
    write_floor(_floor(), floor)
    record = json.loads(floor.read_text())
    record["p_upper"] = "0.01"
    floor.write_text(json.dumps(record))
    with pytest.raises(PersistenceError) as refused:
        make_summary(root / "tables", floors=[floor])
    _one_line(refused.value, floor, "p_upper='0.01'")


def test_a_refused_pt_keeps_the_reason_and_names_the_file_once(tmp_path: Path):
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    path = tmp_path / "policy.pt"

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.system, ("true",))

    with zipfile.ZipFile(plain) as original, zipfile.ZipFile(path, "w") as archive:
        for info in original.infolist():
            data = original.read(info)
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps({"weights": Payload()}, protocol=2)
            archive.writestr(info, data)
    with pytest.raises(CorruptFileError) as refused:
        load_from_file(tmp_path, "policy.pt")
    message = _one_line(refused.value, path, "GLOBAL posix.system")
    assert message.count(str(path)) == 1 and not message.startswith("refused")
    assert "weights_only" not in message and "trust" not in message
