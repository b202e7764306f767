"""src.config: schema validation with defaults, one-line errors, resolved run configs."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from src.config.workflow import (
    WorkflowConfigError,
    check_workflow_config,
    iter_runs,
    resolve_run_config,
    validate_workflow_config,
)
from src.core.wandb import ConfigError, create_base_config
from tests.workflow.conftest import REPO


def _minimal() -> dict:
    return {
        "experiment_tag": "t",
        "envs": ["hazard_grid"],
        "algos": ["ippo"],
        "num_runs": 2,
        "env_params": {"hazard_grid": {"n_agents": 2, "max_steps": 30}},
    }


def _shipped(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


@pytest.mark.parametrize(
    "name",
    [
        "config/config.yaml",
        "config/paper.yaml",
        ".test/config.yaml",
        ".test/custom.yaml",
        "examples/corridor.yaml",
        "examples/mpe2.yaml",
    ],
)
def test_shipped_configs_are_valid(name: str):
    config = check_workflow_config(_shipped(name))
    assert len(list(iter_runs(config))) == (
        len(config["envs"]) * len(config["algos"]) * config["num_runs"]
    )


def test_defaults_are_filled_in_nested_objects():
    config = validate_workflow_config(_minimal())
    assert config["results_dir"] == "results"
    assert config["threads"] == 1
    assert config["base"]["mini_batches"] == 4
    assert config["base"]["final_policy_eval_horizons"] == [1, 10, 50, 100, 200]
    assert config["resources"]["train"] == {"mem_mb": 2000, "runtime": 60}
    assert config["wandb"] == {
        "upload": False,
        "project": "safe-marl",
        "mode": "offline",
        "sync_timeout": 300,
    }
    # Defaults are copies: filling one config leaves the next one's defaults untouched.
    config["base"]["final_policy_eval_horizons"].append(400)
    assert validate_workflow_config(_minimal())["base"]["final_policy_eval_horizons"] == [
        1,
        10,
        50,
        100,
        200,
    ]


def test_resolved_run_config_matches_create_base_config():
    config = validate_workflow_config(_minimal())
    config["algo_params"] = {"ippo": {"hidden_sizes": [32, 32]}}
    resolved = resolve_run_config(config, "hazard_grid", "ippo", 1).to_dict()
    base = create_base_config(
        "hazard_grid",
        **{k: v for k, v in config["base"].items() if k != "final_policy_eval_horizons"},
        final_policy_eval_horizons=tuple(config["base"]["final_policy_eval_horizons"]),
        n_agents=2,
        num_runs=2,
        experiment_tag="t",
        wandb_project="safe-marl",
        wandb_mode="offline",
    )
    extras = {
        "algo": "ippo",
        "run_idx": 1,
        "seed": 1,
        "env_params": {"max_steps": 30},
        "algo_params": {"hidden_sizes": [32, 32]},
        "threads": 1,
        "checkpoint_every": 10,
    }
    assert resolved == base | extras


def test_seed_is_seed_offset_plus_run_index():
    config = _minimal()
    config["base"] = {"seed_offset": 100}
    config = validate_workflow_config(config)
    assert [resolve_run_config(config, "hazard_grid", "ippo", i).seed for i in (0, 1)] == [
        100,
        101,
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.update(envs=["hazard_grid", "gridworld"]), "'envs[1]' = 'gridworld'"),
        (lambda c: c.update(algos=["ppo"]), "'algos[0]' = 'ppo': must be one of ippo"),
        (lambda c: c.update(num_runs=0), "'num_runs' = 0"),
        (lambda c: c.update(num_runs="2"), "'num_runs' = '2'"),
        (lambda c: c.update(colour="red"), "unknown config key 'colour'"),
        (lambda c: c.update(base={"learning_rat": 0.1}), "unknown config key 'base.learning_rat'"),
        (lambda c: c.update(base={"learning_rate": -1}), "'base.learning_rate' = -1"),
        (lambda c: c.update(base={"max_risk": 1.5}), "'base.max_risk' = 1.5"),
        (
            lambda c: c.update(base={"shield_reward_mode": "greedy"}),
            "'base.shield_reward_mode' = 'greedy': must be one of bayesian",
        ),
        (lambda c: c.update(experiment_tag="a/b"), "'experiment_tag' = 'a/b'"),
        (lambda c: c.pop("num_runs"), "'num_runs' is a required property"),
        (lambda c: c.update(wandb={"upload": "yes"}), "'wandb.upload' = 'yes'"),
        (
            lambda c: c["env_params"]["hazard_grid"].update(n_agents=0),
            "'env_params.hazard_grid.n_agents' = 0",
        ),
        (lambda c: c.update(envs=["hazard_grid", "spread"]), "'env_params.spread' is missing"),
        (lambda c: c.update(render={"episodes": 0}), "'render.episodes' = 0"),
    ],
)
def test_schema_errors_are_one_line_naming_key_and_value(change, expected: str):
    config = copy.deepcopy(_minimal())
    change(config)
    with pytest.raises(WorkflowConfigError) as error:
        validate_workflow_config(config)
    message = str(error.value)
    assert expected in message
    assert "\n" not in message
    assert isinstance(error.value, ConfigError)


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ({"mini_batches": 3}, "'base.mini_batches' = 3: must divide the PPO batch"),
        ({"timesteps": 10, "num_envs": 4, "rollouts": 64}, "'base.timesteps' = 10"),
        ({"final_policy_eval_horizons": [50, 10]}, "'base.final_policy_eval_horizons'"),
    ],
)
def test_cross_key_errors_surface_before_any_job(base: dict, expected: str):
    config = _minimal()
    config["base"] = base
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(config, check_components=False)
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_env_parameters_are_checked_by_the_env():
    config = _minimal()
    config["env_params"]["hazard_grid"]["slipperiness"] = 0.5
    with pytest.raises(WorkflowConfigError, match=r"env_params\.hazard_grid.*slipperiness"):
        check_workflow_config(config)


def test_unknown_algo_params_are_rejected():
    config = _minimal()
    config["algo_params"] = {"ippo": {"hidden_size": 64}}
    with pytest.raises(WorkflowConfigError, match=r"algo_params\.ippo.*hidden_size"):
        check_workflow_config(config)


def test_resolve_refuses_runs_outside_the_config():
    config = validate_workflow_config(_minimal())
    with pytest.raises(WorkflowConfigError, match="run_idx=2"):
        resolve_run_config(config, "hazard_grid", "ippo", 2)
    with pytest.raises(WorkflowConfigError, match="algo='shield'"):
        resolve_run_config(config, "hazard_grid", "shield", 0)
    with pytest.raises(WorkflowConfigError, match="env='spread'"):
        resolve_run_config(config, "spread", "ippo", 0)


def test_schema_file_is_the_shipped_one():
    from src.config.workflow import SCHEMA_PATH

    assert SCHEMA_PATH == REPO / "workflow" / "schemas" / "config.schema.yaml"
    assert Path(SCHEMA_PATH).is_file()


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (1_000_100, "meet the evaluation seeds 1000000..1000399"),
        (0, "meet the training seeds 0.."),
        (2**32 - 300, "must be at most 4294967295"),
    ],
)
def test_calibration_seeds_must_miss_training_and_evaluation_seeds(offset: int, expected: str):
    config = _minimal()
    config["algos"] = ["shield"]
    config["base"] = {"final_policy_eval_episodes": 200, "shield_patience": 1}
    config["algo_params"] = {
        "shield": {"calibration_seed_offset": offset, "calibration_episodes": 200}
    }
    with pytest.raises(WorkflowConfigError, match=r"algo_params\.shield\.calibration_seed_offset"):
        check_workflow_config(config)
    with pytest.raises(WorkflowConfigError, match=re.escape(expected)):
        check_workflow_config(_minimal() | {k: config[k] for k in ("algos", "base", "algo_params")})
    config["algo_params"]["shield"]["calibration_episodes"] = 0  # nothing tested: no seeds
    check_workflow_config(config)


@pytest.mark.parametrize(
    ("offset", "met"),
    [
        # Training seeds 1000..1004 (seed_offset 1000, 2 runs, 4 env copies); calibration
        # seeds offset..offset + 399 (2 runs x 200).
        (599, None),  # ..998: one seed apart
        (600, None),  # ..999: touching
        (601, "training seeds 1000..1004"),  # ..1000: one seed shared
        (1004, "training seeds 1000..1004"),  # 1004..: one seed shared
        (1005, None),
        (1006, None),
        # Evaluation seeds 1_000_000..1_000_399 (2 runs x 200).
        (999_599, None),
        (999_600, None),  # ..999_999
        (999_601, "evaluation seeds 1000000..1000399"),  # ..1_000_000
        (1_000_399, "evaluation seeds 1000000..1000399"),
        (1_000_400, None),
        (1_000_401, None),
    ],
)
def test_calibration_seeds_may_touch_other_seeds_but_share_none(
    offset: int, met: str | None
) -> None:
    """The overlap check at its edges: ranges that touch or lie one seed apart pass, a range
    sharing exactly one seed is refused."""
    config = _minimal()
    config["algos"] = ["shield"]
    config["base"] = {
        "final_policy_eval_episodes": 200,
        "shield_patience": 1,
        "seed_offset": 1000,
        "num_envs": 4,
    }
    config["algo_params"] = {
        "shield": {"calibration_seed_offset": offset, "calibration_episodes": 200}
    }
    if met is None:
        check_workflow_config(config)
        return
    with pytest.raises(WorkflowConfigError, match=re.escape(f"meet the {met}")):
        check_workflow_config(config)
