"""One reader of a run folder: `read_run_config` gives back the typed run config that
training recorded in config.json, exactly, without the algorithm registry, custom entries or
version names; a config.json of another code version is refused in one line naming the keys
that differ, a bad value naming the file and the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import src.config.run as run_module
from src.algos.train import run_metadata
from src.checks import ConfigError
from src.config.recorded import read_run_config, recorded_run_config
from src.config.run import RunConfig
from src.config.workflow import iter_runs, resolve_run_config, validate_workflow_config
from src.core.io import CorruptFileError, save_to_file
from src.runfiles import RunConfigError, RunFiles

REPO = Path(__file__).resolve().parents[1]


def _yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / name).read_text(encoding="utf-8"))


def _box() -> dict[str, Any]:
    """`.test/config.yaml` on spread with Box actions and every built-in algorithm, as the
    workflow test of Box actions runs it."""
    config = _yaml(".test/config.yaml")
    config.update(envs=["spread"], algos=["ippo", "ippo_lag", "shield", "shield_dec"])
    config["env_params"] = {"spread": {"n_agents": 2, "max_steps": 10, "continuous_actions": True}}
    shield = {"calibration_episodes": 4, "candidates": 8}
    config["algo_params"] = {"shield": shield, "shield_dec": shield}
    return config


# The workflow configs the tests run: every task and algorithm they use.
WORKFLOW_CONFIGS = {
    "test": lambda: _yaml(".test/config.yaml"),
    "custom": lambda: _yaml(".test/custom.yaml"),
    "box": _box,
    "default": lambda: _yaml("config/config.yaml"),
}


def _trained(config: RunConfig, run_dir: Path) -> Path:
    """`run_dir` with config.json as `src.algos.train.train_run` writes it."""
    save_to_file({**config.to_dict(), **run_metadata()}, run_dir, "config.json")
    return run_dir


def _config_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "config.json").read_text(encoding="utf-8"))


def _rewrite(run_dir: Path, recorded: dict[str, Any]) -> None:
    (run_dir / "config.json").write_text(json.dumps(recorded), encoding="utf-8")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run folder of shield on hazard_grid (`.test/config.yaml`) with its config.json."""
    workflow = validate_workflow_config(_yaml(".test/config.yaml"))
    return _trained(resolve_run_config(workflow, "hazard_grid", "shield", 0), tmp_path / "run0")


@pytest.mark.parametrize("name", sorted(WORKFLOW_CONFIGS))
def test_what_training_records_reads_back_as_the_same_run_config(name: str, tmp_path: Path):
    workflow = validate_workflow_config(WORKFLOW_CONFIGS[name]())
    runs = [(env, algo) for env, algo, index in iter_runs(workflow) if index == 0]
    assert runs
    for env, algo in runs:
        config = resolve_run_config(workflow, env, algo, 0)
        files = RunFiles(_trained(config, tmp_path / env / algo / "run0"))
        recorded, read = read_run_config(files)
        assert read == config, f"{env}/{algo}"
        assert read.eval_modes == ((True, False) if read.shielded else (False,))
        assert recorded == files.read_config() == _config_json(files.root)
        # The flat form reads the same both ways: resolved again, or as recorded.
        assert RunConfig.from_dict(recorded) == config


def test_reading_consults_no_registry_custom_entry_or_version(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    def consulted(*args: object, **kwargs: object) -> None:
        raise AssertionError("the recorded config was resolved again")

    for name in ("get_algorithm", "versions_of", "recorded_entries"):
        monkeypatch.setattr(run_module, name, consulted)
    _, config = read_run_config(run_dir)
    assert config.algo == "shield" and config.shielded and config.shield is not None
    assert config.lagrange is None


def test_a_config_json_of_another_code_version_is_refused_naming_the_keys(run_dir: Path):
    path = run_dir / "config.json"
    recorded = _config_json(run_dir)
    recorded["sections"]["shield"]["retired_knob"] = 2
    del recorded["sections"]["shield"]["horizon"]
    recorded["algo_params"]["another_knob"] = 1
    _rewrite(run_dir, recorded)
    with pytest.raises(RunConfigError) as refused:
        read_run_config(run_dir)
    assert str(refused.value) == (
        f"{path}: recorded by another code version: unknown keys "
        "['sections.shield.retired_knob', 'algo_params.another_knob'], missing keys "
        "['sections.shield.horizon']; rerun the training"
    )
    # One recorded before the sections were: it names what it lacks.
    for key in ("shielded", "sections"):
        del recorded[key]
    recorded["algo_params"] = {}
    _rewrite(run_dir, recorded)
    with pytest.raises(CorruptFileError, match=r"missing keys \['shielded', 'sections'\]"):
        read_run_config(run_dir)
    # The raw reader of the analysis reads it still: it needs only the run's identity.
    assert RunFiles(run_dir).read_config()["algo"] == "shield"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r["sections"]["ppo"].update(gamma=2.0), "gamma=2.0"),
        (lambda r: r["sections"].update(ppo=[1]), "sections.ppo=[1]"),
        (lambda r: r.update(shielded="yes"), "shielded='yes'"),
        (lambda r: r.update(seed=7), "seed=7"),
        (lambda r: r.update(max_risk=1.5), "max_risk=1.5"),
        (lambda r: r["algo_params"].update(calibration_episodes=5), "calibration_episodes=5"),
    ],
)
def test_a_bad_recorded_value_is_one_line_naming_the_file_and_the_value(
    run_dir: Path, change: Any, named: str
):
    recorded = _config_json(run_dir)
    change(recorded)
    _rewrite(run_dir, recorded)
    with pytest.raises(RunConfigError) as refused:
        read_run_config(run_dir)
    message = str(refused.value)
    assert isinstance(refused.value, ConfigError) and "\n" not in message
    assert message.startswith(f"{run_dir / 'config.json'}: ") and named in message, message


def test_the_config_a_policy_records_is_read_the_same_way(run_dir: Path):
    recorded = _config_json(run_dir)
    path = run_dir / "policy.pt"
    assert recorded_run_config(recorded, path) == read_run_config(run_dir)[1]
    with pytest.raises(CorruptFileError, match=r"policy\.pt: its run config is a list"):
        recorded_run_config([recorded], path)
    shared: list = [0] * 10
    for _ in range(6):
        shared = [shared] * 10
    with pytest.raises(CorruptFileError, match=r"policy\.pt: its run config holds more than"):
        recorded_run_config({**recorded, "env_params": {"layout": shared}}, path)
