"""Bad workflow configs are rejected before any job, in one line naming the key and the value.

Every case changes one key of `.test/config.yaml`. All cases go through
`src.config.check_workflow_config` (what `workflow/rules/common.smk` runs when the Snakefile
loads); a handful also go through `snakemake` itself, dry and real, to show that the workflow
stops before scheduling anything and prints the same one line.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from src.config.workflow import WorkflowConfigError, check_workflow_config
from tests.reliability.helpers import REPO, child_env

TEST_CONFIG = REPO / ".test" / "config.yaml"
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


class BadConfig(NamedTuple):
    """One bad value: where it goes, and the key and value the message must name."""

    path: tuple[str, ...]
    value: Any
    key: str
    shown: str


def _case(path: str, value: Any, *, key: str | None = None, shown: str | None = None) -> BadConfig:
    return BadConfig(
        tuple(path.split(".")), value, key or path, str(value) if shown is None else shown
    )


CASES: dict[str, BadConfig] = {
    # wrong types
    "num_envs is a string": _case("base.num_envs", "four"),
    "num_envs is a float": _case("base.num_envs", 2.0),
    "learning_epochs is a float": _case("base.learning_epochs", 2.5),
    "learning_rate is a quoted number": _case("base.learning_rate", "3e-4"),
    "use_wandb is a string": _case("base.use_wandb", "yes"),
    "num_runs is a string": _case("num_runs", "3"),
    "envs is a string": _case("envs", "hazard_grid"),
    # unknown names
    "unknown env": _case("envs", ["hazard_grid", "lava_world"], key="envs", shown="lava_world"),
    "unknown algorithm": _case("algos", ["ippo", "ppo_magic"], key="algos", shown="ppo_magic"),
    # For an unknown key the key itself is the bad value.
    "unknown top-level key": _case("learning_rate", 0.1, shown="learning_rate"),
    "misspelt base key": _case("base.learing_rate", 0.1, shown="learing_rate"),
    "unknown algo_params field": _case("algo_params.ippo", {"clip_coeff": 0.2}, shown="clip_coeff"),
    "unknown world model version": _case("base.wm_version", "v9", key="wm_version"),
    "unknown opponent model version": _case("base.om_version", "v9", key="om_version"),
    "unknown shield version": _case("base.shield_version", "v9", key="shield_version"),
    # the certified shield's names before the old v0 shield was removed
    "retired shield version": _case("base.shield_version", "v1", key="shield_version"),
    "retired world model version": _case("base.wm_version", "v1", key="wm_version"),
    # zero or negative sizes
    "zero num_envs": _case("base.num_envs", 0),
    "negative timesteps": _case("base.timesteps", -256),
    "zero rollouts": _case("base.rollouts", 0),
    "zero mini_batches": _case("base.mini_batches", 0),
    "zero num_runs": _case("num_runs", 0),
    "zero threads": _case("threads", 0),
    "negative checkpoint_every": _case("checkpoint_every", -1),
    "zero evaluation episodes": _case("base.final_policy_eval_episodes", 0),
    "zero render episodes": _case("render.episodes", 0),
    "zero agents": _case("env_params.hazard_grid.n_agents", 0),
    "negative episode cap": _case("env_params.hazard_grid.max_steps", -5),
    "negative seed_offset": _case("base.seed_offset", -1),
    "negative shield_patience": _case("base.shield_patience", -1),
    "negative learning rate": _case("base.learning_rate", -0.001),
    "tiny memory request": _case("resources.train.mem_mb", 10),
    # horizons
    "unsorted horizons": _case("base.final_policy_eval_horizons", [50, 10, 1], shown="50, 10, 1"),
    "negative horizon": _case("base.final_policy_eval_horizons", [1, -10], shown="-10"),
    "repeated horizon": _case("base.final_policy_eval_horizons", [1, 10, 10], shown="1, 10, 10"),
    "no horizons": _case("base.final_policy_eval_horizons", [], shown="[]"),
    # probabilities outside (0, 1)
    "max_risk zero": _case("base.max_risk", 0),
    "max_risk one": _case("base.max_risk", 1.0),
    "max_risk above one": _case("base.max_risk", 1.5),
    "max_risk negative": _case("base.max_risk", -0.1),
    "credible delta zero": _case("base.shield_credible_delta", 0),
    "confidence one": _case("base.final_policy_eval_confidence", 1.0),
    "slip probability above one": _case(
        "env_params.hazard_grid", {"n_agents": 2, "slip_prob": 2.0}, shown="2.0"
    ),
    # unknown modes
    "unknown shield opponent mode": _case("base.shield_opponent_mode", "optimistic"),
    "unknown shield reward mode": _case("base.shield_reward_mode", "bayes"),
    "unknown credible schedule": _case("base.shield_credible_schedule", "linear"),
    # knobs no shield version decides by: their defaults only
    "shield reward mode off its default": _case("base.shield_reward_mode", "frequentist"),
    "credible schedule off its default": _case("base.shield_credible_schedule", "constant"),
    "unknown wandb mode": _case("wandb.mode", "online"),
    # cross-key rules
    "mini_batches does not divide the batch": _case("base.mini_batches", 3),
    "fewer timesteps than one update": _case("base.timesteps", 32),
    "env without env_params": _case(
        "envs", ["hazard_grid", "intersection"], key="env_params.intersection", shown="intersection"
    ),
    # paths
    "tag that leaves the results folder": _case("experiment_tag", "../elsewhere"),
    "empty results_dir": _case("results_dir", "", shown="''"),
}

# Versions of the trainers themselves, looked up in IPPO_VERSIONS / LAG_VERSIONS.
TRAINER_VERSIONS: dict[str, BadConfig] = {
    "unknown lag version": _case("base.lag_version", "v9"),
    "unknown ippo version": _case("base.ippo_version", "v9"),
}


def _bad_config(case: BadConfig) -> dict:
    config = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    config = copy.deepcopy(config)
    node = config
    for part in case.path[:-1]:
        node = node.setdefault(part, {})
    node[case.path[-1]] = case.value
    return config


def _assert_one_line_naming(message: str, case: BadConfig) -> None:
    assert "\n" not in message.strip(), message
    assert case.key in message, f"the message does not name the key {case.key!r}: {message}"
    assert case.shown in message, f"the message does not show the value {case.shown!r}: {message}"


def test_the_test_config_itself_is_valid():
    # Guards every case below: each differs from a config that passes in exactly one key.
    config = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    check_workflow_config(config)


def test_there_are_at_least_twenty_distinct_cases():
    assert len(CASES) >= 20
    assert len({(case.path, repr(case.value)) for case in CASES.values()}) == len(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_config_is_rejected_naming_key_and_value(name: str):
    case = CASES[name]
    with pytest.raises(WorkflowConfigError) as excinfo:
        check_workflow_config(_bad_config(case))
    _assert_one_line_naming(str(excinfo.value), case)


@pytest.mark.parametrize("name", sorted(TRAINER_VERSIONS))
def test_unknown_trainer_version_is_rejected_before_any_job(name: str):
    case = TRAINER_VERSIONS[name]
    with pytest.raises(WorkflowConfigError) as excinfo:
        check_workflow_config(_bad_config(case))
    _assert_one_line_naming(str(excinfo.value), case)


# ------------------------------------------------------------------- through snakemake

SNAKEMAKE_CASES = (
    "num_envs is a string",
    "unknown algorithm",
    "unsorted horizons",
    "mini_batches does not divide the batch",
    "unknown algo_params field",
)


def _snakemake(config_path: Path, workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(REPO / "Snakefile"),
            "--configfile",
            str(config_path),
            "--directory",
            str(workdir),
            "--cores",
            "1",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )


@pytest.mark.parametrize("name", SNAKEMAKE_CASES)
def test_snakemake_dry_run_stops_before_any_job(tmp_path: Path, name: str):
    case = CASES[name]
    workdir = tmp_path / "work"
    workdir.mkdir()
    config_path = tmp_path / "bad.yaml"
    config_path.write_text(yaml.safe_dump(_bad_config(case)), encoding="utf-8")

    done = _snakemake(config_path, workdir, "--dry-run")

    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("invalid config:")]
    assert len(errors) == 1, done.stderr
    _assert_one_line_naming(errors[0], case)
    assert "Job stats" not in done.stdout + done.stderr  # nothing was scheduled
    assert not (workdir / "results").exists()


def test_snakemake_real_run_with_a_bad_config_runs_no_job(tmp_path: Path):
    case = CASES["max_risk above one"]
    workdir = tmp_path / "work"
    workdir.mkdir()
    config_path = tmp_path / "bad.yaml"
    config_path.write_text(yaml.safe_dump(_bad_config(case)), encoding="utf-8")

    done = _snakemake(config_path, workdir)

    assert done.returncode != 0
    assert "Traceback" not in done.stderr  # the message is the diagnosis, not a stack
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("invalid config:")]
    _assert_one_line_naming(error, case)
    created = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
    assert not any(name.startswith("results") for name in created), created


# ------------------------------------------------------------------- messages that say what to do


def _spread_with_box_actions(config: dict) -> None:
    """The built-in spread with continuous (Box) actions, which an algorithm of the user's that
    declares Discrete actions only does not take."""
    config["envs"] = ["spread"]
    config["algos"] = ["ippo", "ippo_lag", "reinforce"]
    config["custom_algos"] = {"reinforce": "examples.reinforce:Reinforce"}
    config["env_params"] = {"spread": {"n_agents": 3, "max_steps": 25, "continuous_actions": True}}
    config["base"]["final_policy_eval_horizons"] = [1, 10, 25]


def _box_actions_on_two_envs(config: dict) -> None:
    """Two envs with Box actions next to a discrete one, and an algorithm of the user's and
    ippo, which take Box actions, next to another of the user's, which does not."""
    _spread_with_box_actions(config)
    config["envs"] = ["hazard_grid", "spread", "tag"]
    config["custom_envs"] = {
        "tag": {"factory": "mpe2.simple_tag_v3:parallel_env", "cost": "mpe2_collisions"}
    }
    config["env_params"]["tag"] = {"n_agents": 4, "max_cycles": 25, "continuous_actions": True}
    config["env_params"]["hazard_grid"] = {"n_agents": 2, "max_steps": 25}
    config["algos"] = ["ippo", "toy", "reinforce"]
    config["custom_algos"] = {
        "toy": "tests.custom.toy_algorithm:Preferences",
        "reinforce": "examples.reinforce:Reinforce",
    }


CUSTOM_ALGORITHM_HINT = (
    "the built-in algorithms that take box actions are ippo, ippo_lag, shield and shield_dec, "
    "and an algorithm of "
    "your own (custom_algos) "
    "takes the actions its class declares in its class attribute action_kinds, e.g. "
    'action_kinds = ("discrete", "box")'
)

# change -> the start of the message (the whole message where it ends in no list of keys; a
# list of names that grows with the registries stands as " ... ", and then the end is checked).
HINTS: dict[str, tuple[Any, str]] = {
    "box actions refused for one algorithm alone": (
        _spread_with_box_actions,
        "config key 'algos[2]' = 'reinforce': takes discrete actions, and env spread has box "
        "actions; leave it out for this env or give the env the actions the algorithm takes "
        "(an env that needs other algorithms goes in a config of its own); "
        f"{CUSTOM_ALGORITHM_HINT}",
    ),
    "box actions refused once for every env": (
        _box_actions_on_two_envs,
        "config key 'algos[2]' = 'reinforce': takes discrete actions, and envs spread and tag "
        "have "
        "box actions; leave it out for these envs or give the envs the actions the algorithm "
        "takes (an env that needs other algorithms goes in a config of its own); "
        f"{CUSTOM_ALGORITHM_HINT}",
    ),
    "misspelt top-level key": (
        lambda c: c.update(learning_rat=0.1),
        "unknown config key 'learning_rat' (did you mean 'base.learning_rate'?); known keys: ",
    ),
    "base key at the top level": (
        lambda c: c.update(max_risk=0.1),
        "unknown config key 'max_risk' (did you mean 'base.max_risk'?); known keys: ",
    ),
    "misspelt base key": (
        lambda c: c["base"].update(learing_rate=0.1),
        "unknown config key 'base.learing_rate' (did you mean 'base.learning_rate'?); known ",
    ),
    "misspelt algo_params field": (
        lambda c: c.update(algo_params={"ippo": {"clip_coeff": 0.2}}),
        "config key 'algo_params.ippo' = ['clip_coeff']: unknown for ippo (did you mean "
        "'clip_coef'?); known: ['adam_eps', ",
    ),
    "misspelt algo_params algorithm": (
        lambda c: c.update(algo_params={"shild": {"horizon": 5}}),
        "config key 'algo_params.shild': unknown algo (ippo, ... ); did you mean "
        "'algo_params.shield'?",
    ),
    "misspelt env parameter": (
        lambda c: c["env_params"]["hazard_grid"].update(max_step=30),
        "config key 'env_params.hazard_grid': unknown parameters ['max_step'] for env "
        "'hazard_grid'; known parameters: n_agents, size, slip_prob, slip_mode, continuing, "
        "neighbour_view, max_steps, progress_reward, goal_reward, step_penalty, cell_pixels, "
        "n_hazards, observe_moves; did you mean 'env_params.hazard_grid.max_steps'?",
    ),
    "misspelt env_params env": (
        lambda c: c["env_params"].update(hazard_grd={"n_agents": 2}),
        "config key 'env_params.hazard_grd': unknown env (known: hazard_grid, ... ); did you "
        "mean 'env_params.hazard_grid'?",
    ),
    "misspelt resources key": (
        lambda c: c["resources"]["train"].update(mem=100),
        "unknown config key 'resources.train.mem' (did you mean 'resources.train.mem_mb'?); "
        "known keys: mem_mb, runtime",
    ),
    "misspelt render key": (
        lambda c: c["render"].update(episode=1),
        "unknown config key 'render.episode' (did you mean 'render.episodes'?); known keys: "
        "episodes",
    ),
    "misspelt wandb key": (
        lambda c: c["wandb"].update(projct="x"),
        "unknown config key 'wandb.projct' (did you mean 'wandb.project'?); known keys: mode, "
        "project, sync_timeout, upload",
    ),
    "misspelt algorithm name": (
        lambda c: c.update(algos=["ippo", "shild"]),
        "config key 'algos[1]' = 'shild': must be one of ippo, ... (or a name given under "
        "custom_algos); did you mean 'shield'?",
    ),
    "unknown key close to none": (
        lambda c: c.update(colour="red"),
        "unknown config key 'colour'; known keys: algo_params, ",
    ),
    # PyYAML follows YAML 1.1: 1e-3 (no dot, no sign) is text, 1.0e-3 a number.
    "learning rate without a dot": (
        lambda c: c["base"].update(learning_rate="1e-3"),
        "config key 'base.learning_rate' = '1e-3': '1e-3' is not of type 'number'; write it as "
        "1.0e-3, with a dot and a signed exponent (YAML 1.1 reads 1e-3 as text)",
    ),
    "quoted learning rate": (
        lambda c: c["base"].update(learning_rate="0.001"),
        "config key 'base.learning_rate' = '0.001': '0.001' is not of type 'number'; write it "
        "as 0.001 without quotes (a quoted number is text)",
    ),
    "timesteps in exponent form": (
        lambda c: c["base"].update(timesteps="1e3"),
        "config key 'base.timesteps' = '1e3': '1e3' is not of type 'integer'; write it as 1000 "
        "(YAML 1.1 reads 1e3 as text)",
    ),
}


@pytest.mark.parametrize("name", sorted(HINTS))
def test_the_message_says_what_to_do(name: str):
    change, expected = HINTS[name]
    config = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    change(config)
    with pytest.raises(WorkflowConfigError) as excinfo:
        check_workflow_config(config)
    message = str(excinfo.value)
    assert "\n" not in message
    head, _, tail = expected.partition(" ... ")
    assert message.startswith(head) and message.endswith(tail), message
    if name == "unknown key close to none":
        assert "did you mean" not in message


def test_a_number_yaml_reads_as_text_is_refused_with_the_way_to_write_it():
    # Written as a user writes it: PyYAML reads the value as the string '1e-3'.
    config = TEST_CONFIG.read_text(encoding="utf-8").replace(
        "learning_rate: 3.0e-4", "learning_rate: 1e-3"
    )
    assert "learning_rate: 1e-3" in config
    with pytest.raises(WorkflowConfigError, match=r"write it as 1\.0e-3, with a dot"):
        check_workflow_config(yaml.safe_load(config))


def test_box_actions_for_a_discrete_algorithm_are_refused_in_one_line_through_snakemake(
    tmp_path: Path,
):
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    _spread_with_box_actions(config)
    config_path = tmp_path / "box.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    done = _snakemake(config_path, workdir, "--dry-run")

    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("invalid config:")]
    assert errors == [f"invalid config: {HINTS['box actions refused for one algorithm alone'][1]}"]
    assert "Job stats" not in done.stdout + done.stderr
