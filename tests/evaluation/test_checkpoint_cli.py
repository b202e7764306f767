"""`python -m src.evaluation.checkpoint`: any saved run folder's policy on chosen seeds and
horizons, the numbers of eval.parquet on the run's own; bad arguments refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from src.algos.train import train_run
from src.evaluation.checkpoint import EVALUATION_METADATA_KEY, main
from src.evaluation.evaluate import evaluate_run
from src.runfiles import RunFiles
from src.schemas import EVAL_SCHEMA, config_from_metadata, read_parquet
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny trained and evaluated ippo and shield run on hazard_grid (4 episodes each, seeds
    1000000.., horizons 1, 5, 10)."""
    root = tmp_path_factory.mktemp("checkpoint")
    run_dirs = {}
    for algo in ("ippo", "shield"):
        params = {"calibration_episodes": 4, "critic_steps": 2} if algo == "shield" else {}
        run_dir = root / algo / "run0"
        train_run(tiny_run_config(algo, algo_params=params), run_dir, progress=False)
        evaluate_run(run_dir, RunFiles(run_dir).eval)
        run_dirs[algo] = run_dir
    return run_dirs


def _own_settings(run_dir: Path) -> tuple[int, int, list[int]]:
    config = json.loads(RunFiles(run_dir).config.read_text())
    first = (
        config["final_policy_eval_seed_offset"]
        + config["run_idx"] * (config["final_policy_eval_episodes"])
    )
    return first, config["final_policy_eval_episodes"], config["final_policy_eval_horizons"]


@pytest.mark.parametrize("algo", ["ippo", "shield"])
def test_the_runs_own_seeds_and_horizons_give_the_numbers_of_eval_parquet(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], algo: str
) -> None:
    run_dir = runs[algo]
    first, count, horizons = _own_settings(run_dir)
    out = tmp_path / "again.parquet"
    args = [str(run_dir), "--seeds", str(first), str(count), "--horizons", *map(str, horizons)]
    assert main([*args, "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    table = read_parquet(out, EVAL_SCHEMA)
    assert table.equals(read_parquet(RunFiles(run_dir).eval, EVAL_SCHEMA))
    assert config_from_metadata(table)["algo"] == algo
    evaluated = json.loads(table.schema.metadata[EVALUATION_METADATA_KEY])
    assert evaluated["first_seed"] == first and evaluated["episodes"] == count
    assert evaluated["horizons"] == horizons
    # Without --seeds and --horizons: the run's own, the same file.
    default = tmp_path / "default.parquet"
    assert main([str(run_dir), "--out", str(default)]) == 0
    assert read_parquet(default, EVAL_SCHEMA).equals(table)


def test_one_shield_mode_gives_its_rows_of_eval_parquet(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = runs["shield"]
    own = read_parquet(RunFiles(run_dir).eval, EVAL_SCHEMA).to_pandas()
    for mode, shielded in (("on", True), ("off", False)):
        out = tmp_path / f"{mode}.parquet"
        assert main([str(run_dir), "--shield", mode, "--out", str(out)]) == 0
        rows = read_parquet(out, EVAL_SCHEMA).to_pandas()
        expected = own[own["shielded"] == shielded].reset_index(drop=True)
        assert rows.drop(columns="violating_episodes").equals(
            expected.drop(columns="violating_episodes")
        )
        assert rows["violating_episodes"].map(list).tolist() == (
            expected["violating_episodes"].map(list).tolist()
        )


def test_other_seeds_and_horizons(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "other.parquet"
    args = ["--seeds", "5000", "6", "--horizons", "20", "3", "--out", str(out)]
    assert main([str(runs["shield"]), *args]) == 0
    rows = read_parquet(out, EVAL_SCHEMA).to_pylist()
    # Shield on then off, horizons increasing; the hidden cap (10) is lifted to 20.
    assert [(r["shielded"], r["horizon"]) for r in rows] == [
        (True, 3),
        (True, 20),
        (False, 3),
        (False, 20),
    ]
    assert {r["n"] for r in rows} == {6}
    assert all(r["violations"] == len(r["violating_episodes"]) for r in rows)


def test_the_command_runs_as_a_module(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "module.parquet"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "src.evaluation.checkpoint", str(runs["ippo"])),
            *("--seeds", "1000000", "4", "--horizons", "1", "5", "10", "--out", str(out)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).equals(pq.read_table(RunFiles(runs["ippo"]).eval))


BAD_ARGUMENTS = [
    # (arguments after RUN_DIR, words the one line must contain)
    (["--seeds", "-1", "4"], "--seeds: FIRST"),
    (["--seeds", "10", "0"], "--seeds: COUNT must be >= 1"),
    (["--seeds", "4294967295", "2"], "exceeds 4294967295"),
    (["--seeds", "x", "2"], "argument --seeds: invalid int value: 'x'"),
    (["--seeds", "1"], "argument --seeds: expected 2 arguments"),
    (["--horizons", "0", "5"], "--horizons must be >= 1, got 0"),
    (["--horizons", "5", "5"], "--horizons must be distinct"),
    (["--shield", "on"], "--shield on: ippo has no shield"),
    (["--shield", "both"], "--shield both: ippo has no shield"),
    (["--shield", "maybe"], "argument --shield: invalid choice: 'maybe'"),
    (["--num-envs", "0"], "--num-envs must be >= 1"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_ARGUMENTS)
def test_bad_arguments_get_one_line_and_status_2(
    runs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    out = tmp_path / "out.parquet"
    try:
        status = main([str(runs["ippo"]), *extra, "--out", str(out)])
    except SystemExit as stop:  # argparse's own refusals
        status = stop.code
    assert status == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    assert status == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_outputs_and_run_folders_are_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(runs["ippo"])
    assert "must end with .parquet" in _refused([run, "--out", str(tmp_path / "x.csv")], capsys)
    assert "is a folder" in _refused([run, "--out", str(tmp_path)], capsys)
    missing = tmp_path / "no" / "x.parquet"
    assert "does not exist" in _refused([run, "--out", str(missing)], capsys)
    own = str(RunFiles(runs["ippo"]).eval)
    assert "a file of the run folder itself" in _refused([run, "--out", own], capsys)
    out = str(tmp_path / "x.parquet")
    assert "is not a folder" in _refused([str(tmp_path / "nowhere"), "--out", out], capsys)
    assert "has no config.json" in _refused([str(tmp_path), "--out", out], capsys)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(RunFiles(runs["ippo"]).config, bare / "config.json")
    assert "has no policy.pt" in _refused([str(bare), "--out", out], capsys)
    (bare / "policy.pt").write_bytes(b"not a torch file")
    assert "policy.pt" in _refused([str(bare), "--out", out], capsys)
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("name", ["policy.pt", "config.json"])
def test_a_symlink_in_the_run_folder_is_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A run folder whose file is a link to one outside it (here: the real run's) is refused
    without reading it."""
    planted = tmp_path / "planted" / "run0"
    planted.mkdir(parents=True)
    for file in ("config.json", "policy.pt"):
        source = runs["shield"] / file
        if file == name:
            os.symlink(source, planted / file)
        else:
            shutil.copy(source, planted / file)
    out = tmp_path / "x.parquet"
    line = _refused([str(planted), "--out", str(out)], capsys)
    assert f"{planted / name} is a symbolic link" in line
    assert not out.exists()


def test_a_run_folder_that_is_itself_a_link_is_evaluated(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """The run folder itself may be a link (results on scratch storage); its files may not."""
    link = tmp_path / "linked"
    os.symlink(runs["ippo"], link)
    out = tmp_path / "x.parquet"
    assert main([str(link), "--out", str(out)]) == 0
    assert pq.read_table(out).equals(pq.read_table(RunFiles(runs["ippo"]).eval))
