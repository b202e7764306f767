"""src.config: schema validation with defaults, one-line errors, resolved run configs."""

from __future__ import annotations

import copy
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from src.config.ppo import PPOConfig
from src.config.workflow import (
    WorkflowConfigError,
    check_workflow_config,
    iter_runs,
    resolve_run_config,
    validate_workflow_config,
)
from src.core.wandb import ConfigError, create_base_config
from src.seeds import copy_seeds
from tests.workflow.conftest import REPO


def _minimal() -> dict:
    return {
        "experiment_tag": "t",
        "envs": ["hazard_grid"],
        "algos": ["ippo"],
        "num_runs": 2,
        "env_params": {"hazard_grid": {"n_agents": 2, "max_steps": 50}},
    }


def _shipped(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


@pytest.mark.parametrize(
    "name",
    [
        "config/config.yaml",
        "config/paper.yaml",
        "config/mamujoco.yaml",
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


def test_the_paper_ladder_reaches_the_share_of_the_episode_one_risk_window_covers():
    """config/paper.yaml's first rung is H / T of the training allowance (docs/design.md, "The
    ladder's depth"), for both shields and every env: the shield's horizon over the episode."""
    config = check_workflow_config(_shipped("config/paper.yaml"))
    shielded = [(env, algo) for env, algo, idx in iter_runs(config) if algo.startswith("shield")]
    assert len(shielded) == 30
    for env, algo in shielded:
        run = resolve_run_config(config, env, algo, 0)
        multiples = run.shield.certify_multiples
        assert multiples[0] == pytest.approx(run.shield.horizon / run.constraint_horizon) == 0.05
        assert list(multiples) == sorted(multiples) and multiples[-1] == 1.0


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
        constraint_horizon=50,  # the env's episode cap, recorded by the workflow
    )
    extras = {
        "algo": "ippo",
        "run_idx": 1,
        "seed": 1,
        "env_params": {"max_steps": 50},
        "algo_params": {"hidden_sizes": [32, 32]},
        "threads": 1,
        "checkpoint_every": 10,
        # What the resolution gave: ippo's one section, every tunable field recorded.
        "shielded": False,
        "sections": {"ppo": PPOConfig.from_parts(base, {}).tunables() | {"hidden_sizes": [32, 32]}},
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
            "'base.shield_reward_mode' = 'greedy': no shield version decides by another value",
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


def test_schema_descriptions_state_the_shield_defaults():
    """The shield keys the schema describes name the defaults `ShieldConfig` gives them."""
    from src.config.shield import ShieldConfig
    from src.config.workflow import SCHEMA_PATH

    schema = yaml.safe_load(Path(SCHEMA_PATH).read_text())
    shield = schema["properties"]["algo_params"]["properties"]["shield"]["properties"]
    defaults = {f.name: f.default for f in fields(ShieldConfig)}
    assert shield, "the schema describes no shield key"
    for key, entry in shield.items():
        stated = re.search(r"\(default (\d+)", entry["description"])
        assert stated, f"{key}: the description states no default"
        assert int(stated.group(1)) == defaults[key], key


# Training copies of the config below: seed_offset 1000, 2 runs, 4 env copies.
TRAINING_SEED = copy_seeds(1001, 4)[2]


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (1_000_100, "the seeds of evaluation (1000000..1000399) and of the calibration of shield"),
        (
            TRAINING_SEED,
            f"training (8 hashed seeds) and of the calibration of shield ({TRAINING_SEED}..",
        ),
        (2_000_000, "of the ladder's tuning (spent) (2000000..2999999) share seed 2000000"),
        (9_999_999, "of earlier certificate checks (spent) (9000000..9999999) share seed 9999999"),
        (30_500_000, "of earlier certificate checks (spent) (30000000..34999999)"),
        (33_500_000, "of earlier certificate checks (spent) (30000000..34999999)"),
        (34_500_000, "of earlier certificate checks (spent) (30000000..34999999)"),
        (35_500_000, "of the certificate check (benchmarks/certificate_check.py)"),
        (
            22_000_000,
            "of the default experiment's calibration at the per-run level (spent) "
            "(22000000..22999999)",
        ),
        (40_000_000, "of the hyperparameter tuning (benchmarks/tuning.py, spent)"),
        (2**32 - 300, "must be at most 4294967295"),
    ],
)
def test_calibration_seeds_must_miss_every_other_use_and_reserved_range(offset: int, expected: str):
    """Training copies (hashed, src.seeds.copy_seeds), evaluation, the spent ranges and the
    certificate check's: a calibration range that meets any is refused, naming its key."""
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
    with pytest.raises(WorkflowConfigError, match=r"algo_params\.shield\.calibration_seed_offset"):
        check_workflow_config(copy.deepcopy(config))
    with pytest.raises(WorkflowConfigError, match=re.escape(expected)):
        check_workflow_config(copy.deepcopy(config))
    config["algo_params"]["shield"]["calibration_episodes"] = 0  # nothing tested: no seeds
    check_workflow_config(config)


@pytest.mark.parametrize(
    ("offset", "met"),
    [
        # Calibration seeds offset..offset + 399 (2 runs x 200); evaluation seeds
        # 1_000_000..1_000_399 (2 runs x 200).
        (999_599, None),  # ..999_998: one seed apart
        (999_600, None),  # ..999_999: touching
        (999_601, "evaluation (1000000..1000399)"),  # ..1_000_000: one seed shared
        (1_000_399, "evaluation (1000000..1000399)"),  # 1_000_399..: one seed shared
        (1_000_400, None),
        (1_000_401, None),
        # The ladder's tuning range 2,000,000..2,999,999 (spent).
        (1_999_600, None),
        (1_999_601, "the ladder's tuning (spent)"),
        (2_999_999, "the ladder's tuning (spent)"),
        (3_000_000, None),
    ],
)
def test_calibration_seeds_may_touch_other_seeds_but_share_none(
    offset: int, met: str | None
) -> None:
    """The overlap check at its edges: ranges that touch or lie one seed apart pass, a range
    sharing exactly one seed is refused."""
    config = _minimal()
    config["algos"] = ["shield"]
    config["base"] = {"final_policy_eval_episodes": 200, "shield_patience": 1}
    config["algo_params"] = {
        "shield": {"calibration_seed_offset": offset, "calibration_episodes": 200}
    }
    if met is None:
        check_workflow_config(config)
        return
    with pytest.raises(WorkflowConfigError, match=re.escape(met)):
        check_workflow_config(config)


def _shielded(**base: object) -> dict:
    """`_minimal` with the central and the decentralised shield, 8 updates per run."""
    config = _minimal()
    config["algos"] = ["ippo", "shield"]
    config["base"] = {"timesteps": 8 * 4 * 64, "num_envs": 4, "rollouts": 64, **base}
    return config


def test_a_shield_that_would_never_arm_is_refused() -> None:
    with pytest.raises(
        WorkflowConfigError,
        match=re.escape(
            "config key 'base.shield_patience' = 8: the shield of shield on hazard_grid would "
            "never arm; it must be less than the run's 8 policy updates"
        ),
    ):
        check_workflow_config(_shielded(shield_patience=8), check_components=False)
    check_workflow_config(_shielded(shield_patience=7), check_components=False)


@pytest.mark.parametrize("algos", [["ippo", "shield"], ["shield", "shield_dec"]])
def test_the_opponent_mode_is_refused_when_no_decentralised_shield_reads_it(
    algos: list[str],
) -> None:
    """Only the decentralised shield reads `shield_opponent_mode`: set off its default in an
    experiment whose shields are all central, it is refused naming who would read it."""
    config = _shielded(shield_patience=4, shield_opponent_mode="model")
    config["algos"] = algos
    if "shield_dec" in algos:
        check_workflow_config(config, check_components=False)
        return
    message = (
        "config key 'base.shield_opponent_mode' = 'model': no shield of this experiment reads "
        "it (read by the decentralised shield (coordination: decentralised, e.g. shield_dec) "
        "only; the central shield judges the others' actual proposals); leave it at its default "
        "'monotone_floor' or remove it"
    )
    with pytest.raises(WorkflowConfigError, match=f"^{re.escape(message)}$"):
        check_workflow_config(config, check_components=False)


@pytest.mark.parametrize(
    ("key", "value", "default"),
    [
        ("shield_reward_mode", "mean", "bayesian"),
        ("shield_reward_mode", "frequentist", "bayesian"),
        ("shield_credible_schedule", "constant", "summable"),
    ],
)
@pytest.mark.parametrize("algos", [["ippo"], ["ippo", "shield"], ["shield", "shield_dec"]])
def test_a_knob_no_shield_decides_by_is_refused_off_its_default_whatever_runs(
    key: str, value: str, default: str, algos: list[str]
) -> None:
    """No shield version decides by `shield_reward_mode` or `shield_credible_schedule`: a
    value off the default is refused before any job, in one line naming the key, whichever
    algorithms the experiment runs; the default passes."""
    config = _shielded(shield_patience=4, **{key: value})
    config["algos"] = algos
    message = (
        f"config key 'base.{key}' = {value!r}: no shield version decides by another value (the "
        "shield decides by its models' risk against its allowance and certifies with its own "
        f"exact test; the calibrated risk it reports uses the default {default!r}); leave it at "
        f"{default!r} or remove it"
    )
    with pytest.raises(WorkflowConfigError, match=f"^{re.escape(message)}$"):
        check_workflow_config(config, check_components=False)
    config["base"][key] = default
    check_workflow_config(config, check_components=False)


def test_joint_certificates_share_delta_between_the_runs_that_test_an_allowance() -> None:
    """Two runs of shield and shield_dec (2 x 2 certificates; ippo has none): each shielded
    run tests at delta / 4, ippo's config is untouched, and a calibration-free algorithm adds
    no certificate; off by default; an explicit certificate_family with it is refused."""
    config = _shielded(shield_patience=4)
    config["algos"] = ["ippo", "shield", "shield_dec"]
    config["joint_certificates"] = True
    check_workflow_config(config, check_components=False)
    for algo in ("shield", "shield_dec"):
        run = resolve_run_config(config, "hazard_grid", algo, 1)
        assert run.shield.certificate_family == 4
        assert run.shield.certificate_delta == pytest.approx(0.05 / 4)
    assert (
        "certificate_family" not in resolve_run_config(config, "hazard_grid", "ippo", 0).algo_params
    )
    config["algo_params"] = {"shield_dec": {"calibration_episodes": 0}}
    assert resolve_run_config(config, "hazard_grid", "shield", 0).shield.certificate_family == 2
    assert (
        resolve_run_config(config, "hazard_grid", "shield", 0).shield.to_dict()[
            "certificate_family"
        ]
        == 2
    )
    # Off: family 1, in no record (a shield's records are what they were before the option).
    plain = check_workflow_config(_shielded(shield_patience=4), check_components=False)
    shield = resolve_run_config(plain, "hazard_grid", "shield", 0).shield
    assert shield.certificate_family == 1 and "certificate_family" not in shield.to_dict()
    assert "certificate_family" not in shield.tunables()
    config["algo_params"] = {"shield": {"certificate_family": 3}}
    with pytest.raises(
        WorkflowConfigError,
        match=re.escape(
            "config key 'algo_params.shield.certificate_family' = 3: `joint_certificates: true` "
            "sets it (to the experiment's number of certificates); remove one of the two"
        ),
    ):
        check_workflow_config(config, check_components=False)


def test_a_knob_some_run_reads_is_kept() -> None:
    """shield_dec reads the opponent mode; defaults pass; an experiment without shields keeps
    its shield keys for later."""
    config = _shielded(shield_patience=4, shield_opponent_mode="model")
    config["algos"] = ["ippo_lag", "shield", "shield_dec"]
    check_workflow_config(config, check_components=False)
    check_workflow_config(_shielded(shield_patience=4), check_components=False)
    unshielded = _shielded(shield_patience=99, shield_opponent_mode="model")
    unshielded["algos"] = ["ippo"]
    check_workflow_config(unshielded, check_components=False)


def test_the_constraint_horizon_is_the_episode_cap_unless_set() -> None:
    """Unset: each env's max_steps (the whole episode), recorded in the run config; set: that
    value, which must fit the episode and be evaluated."""
    config = check_workflow_config(_minimal())
    assert resolve_run_config(config, "hazard_grid", "ippo", 0).constraint_horizon == 50
    assert resolve_run_config(config, "hazard_grid", "ippo", 0).base["constraint_horizon"] == 50
    set_to = _minimal()
    set_to["base"] = {"constraint_horizon": 10}
    check_workflow_config(set_to)
    assert resolve_run_config(set_to, "hazard_grid", "ippo", 1).constraint_horizon == 10
    longer = _minimal()
    longer["base"] = {"constraint_horizon": 100}
    with pytest.raises(
        WorkflowConfigError,
        match=re.escape("'base.constraint_horizon' = 100: at most the episode cap max_steps = 50"),
    ):
        check_workflow_config(longer)
    unevaluated = _minimal()
    unevaluated["base"] = {"final_policy_eval_horizons": [1, 10, 100]}
    with pytest.raises(
        WorkflowConfigError,
        match=re.escape(
            "'base.final_policy_eval_horizons' = [1, 10, 100]: must include the constraint "
            "horizon (50, the episode cap max_steps of env hazard_grid)"
        ),
    ):
        check_workflow_config(unevaluated)


@pytest.mark.parametrize(
    ("value", "why"),
    [(0, "must be an int in [1, 100000]"), ("100", "must be an int in [1, 100000] (got a string")],
)
def test_a_bad_constraint_horizon_is_refused_naming_it(value: object, why: str) -> None:
    """In the API (create_base_config's overrides) and in a workflow config alike."""
    with pytest.raises(ConfigError, match=re.escape(f"constraint_horizon={value!r}: {why}")):
        create_base_config(
            "hazard_grid", 2, 2, 64, 1, 16, 2, 4, 3e-4, 0.1, False, constraint_horizon=value
        )
    config = _minimal()
    config["base"] = {"constraint_horizon": value}
    with pytest.raises(WorkflowConfigError, match=re.escape("'base.constraint_horizon'")):
        check_workflow_config(config)


def test_a_shield_is_sized_by_the_joint_actions_it_judges_not_by_a_product_over_the_team():
    """Six agents on spread (5 ** 6 joint actions): the Discrete shield judges the proposal
    and its one-agent changes, the Box shield sampled joint actions (the proposal, its
    candidates and the search's), so both fit the default memory; the decentralised shield's
    evaluation, every agent's actions against the others' completions, is refused naming
    the memory it needs."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(envs=["spread"], algos=["shield"], num_runs=1)
    config["env_params"] = {"spread": {"n_agents": 6, "max_steps": 100}}
    check_workflow_config(copy.deepcopy(config))
    config["env_params"]["spread"]["continuous_actions"] = True
    check_workflow_config(copy.deepcopy(config))
    config["env_params"]["spread"]["continuous_actions"] = False
    config["algos"] = ["shield_dec"]
    with pytest.raises(WorkflowConfigError, match="evaluate job of shield_dec on spread needs"):
        check_workflow_config(config)
