"""A config naming tasks and algorithms by import path: every bad one is refused before any
job, in one line naming the key and what is missing; good ones reach the run configs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from src.checks import ConfigError
from src.config.run import RunConfig
from src.config.workflow import WorkflowConfigError, check_workflow_config, resolve_run_config
from tests.custom.conftest import tiny_config
from tests.workflow.conftest import REPO

BROKEN = "tests.custom.tasks"


def _walk(factory: str, **changes: Any) -> dict:
    config = tiny_config(["walk"], ["ippo"], **changes)
    config["custom_envs"]["walk"] = f"{BROKEN}:{factory}"
    return config


def _toy(entry: str) -> dict:
    config = tiny_config(["walk"], ["ippo", "toy"])
    config["custom_algos"]["toy"] = entry
    return config


CASES = [
    (  # the factory's module cannot be imported
        lambda: tiny_config(["walk"], ["ippo"], custom_envs={"walk": "my_package.tasks:make_env"}),
        "config key 'custom_envs.walk' = 'my_package.tasks:make_env': cannot import module "
        "'my_package.tasks' (ModuleNotFoundError: No module named 'my_package')",
    ),
    (
        lambda: _walk("make_env"),
        f"config key 'custom_envs.walk' = '{BROKEN}:make_env': module '{BROKEN}' has no "
        "attribute 'make_env'",
    ),
    (
        lambda: _walk("NOT_A_FACTORY"),
        f"config key 'custom_envs.walk' = '{BROKEN}:NOT_A_FACTORY': factory "
        f"'{BROKEN}:NOT_A_FACTORY' is a int, not callable",
    ),
    (  # a factory returning an AEC env, not a parallel one
        lambda: tiny_config(
            ["tag"], ["ippo"], custom_envs={"tag": {"factory": "mpe2.simple_tag_v3:env"}}
        ),
        "config key 'custom_envs.tag' = {'factory': 'mpe2.simple_tag_v3:env'}: "
        "mpe2.simple_tag_v3:env returned a pettingzoo.utils.wrappers.order_enforcing."
        "OrderEnforcingWrapper, not a pettingzoo ParallelEnv",
    ),
    (  # mpe2 puts no cost into its infos, and no cost function is named
        lambda: tiny_config(
            ["tag"], ["ippo"], custom_envs={"tag": "mpe2.simple_tag_v3:parallel_env"}
        ),
        "config key 'custom_envs.tag' = 'mpe2.simple_tag_v3:parallel_env': env tag: infos of "
        "['adversary_0', 'adversary_1', 'adversary_2', 'agent_0'] hold no 'cost' after step 1, "
        "and no cost function is named",
    ),
    (
        lambda: tiny_config(
            ["tag"],
            ["ippo"],
            custom_envs={"tag": {"factory": "mpe2.simple_tag_v3:parallel_env", "cost": "hits"}},
        ),
        "config key 'custom_envs.tag' = {'factory': 'mpe2.simple_tag_v3:parallel_env', 'cost': "
        "'hits'}: cost 'hits': not a cost function name (mpe2_adversary_proximity, "
        "mpe2_collisions) nor an import path",
    ),
    (
        lambda: _walk("without_cost"),
        f"config key 'custom_envs.walk' = '{BROKEN}:without_cost': env walk: infos of "
        "['agent_0', 'agent_1'] hold no 'cost' after step 1, and no cost function is named",
    ),
    (  # agents that change between reset and step
        lambda: _walk("agent_leaves"),
        f"config key 'custom_envs.walk' = '{BROKEN}:agent_leaves': env walk: at step 2 the "
        "agents ['agent_1'] finished while ['agent_0'] went on",
    ),
    (
        lambda: _walk("partial_reset"),
        f"config key 'custom_envs.walk' = '{BROKEN}:partial_reset': env walk: reset() started "
        "the agents ['agent_0'], not every possible agent ['agent_0', 'agent_1']",
    ),
    (
        lambda: _walk("mixed_actions"),
        f"config key 'custom_envs.walk' = '{BROKEN}:mixed_actions': agents 'agent_0' and "
        "'agent_1' act in different spaces (Discrete(2) and Discrete(3))",
    ),
    (
        lambda: tiny_config(
            ["walk"],
            ["ippo"],
            custom_envs={"walk": {"factory": f"{BROKEN}:walk", "vector": f"{BROKEN}:Walks"}},
        ),
        f"config key 'custom_envs.walk' = {{'factory': '{BROKEN}:walk', 'vector': "
        f"'{BROKEN}:Walks'}}: module '{BROKEN}' has no attribute 'Walks'",
    ),
    (
        lambda: tiny_config(["tag"], ["ippo"], custom_envs={"tag": "mpe2.simple_tag_v3"}),
        "config key 'custom_envs.tag' = 'mpe2.simple_tag_v3': must be an import path "
        "'package.module:attribute'",
    ),
    (
        lambda: tiny_config(["walk"], ["ippo"], custom_envs={"hazard_grid": "x.y:z"}),
        "config key 'custom_envs.hazard_grid' = 'x.y:z': 'hazard_grid' is a built-in env; give "
        "yours another name",
    ),
    (
        lambda: tiny_config(["tag"], ["ippo"], env_params={"tag": {"n_agents": 3}}),
        "config key 'env_params.tag': n_agents=3: env tag has 4 agents (adversary_0, "
        "adversary_1, adversary_2, agent_0)",
    ),
    (
        lambda: tiny_config(["tag"], ["ippo"], env_params={"tag": {"n_agents": 4, "speed": 2}}),
        "config key 'env_params.tag': mpe2.simple_tag_v3:parallel_env(**{'speed': 2}) failed: "
        "TypeError:",
    ),
    (  # an algorithm without the methods the pipeline calls
        lambda: _toy(f"{BROKEN}:NoMethods"),
        f"config key 'custom_algos.toy' = '{BROKEN}:NoMethods': class NoMethods lacks the "
        "methods ['train', 'state', 'load_state', 'policy_state', 'load_actor']",
    ),
    (
        lambda: _toy("tests.custom.toy_algorithms:Preferences"),
        "config key 'custom_algos.toy' = 'tests.custom.toy_algorithms:Preferences': cannot "
        "import module 'tests.custom.toy_algorithms'",
    ),
    (
        lambda: tiny_config(["walk"], ["ippo", "shield"], custom_algos={"shield": "x.y:Z"}),
        "config key 'custom_algos.shield' = 'x.y:Z': 'shield' is a built-in algorithm",
    ),
    (  # Box actions: the shield judges sampled candidates there, and its policy learns from
        # them with their exact log-density, not from its own proposals
        lambda: tiny_config(
            ["tag"],
            ["toy", "shield"],
            env_params={"tag": {"n_agents": 4, "max_cycles": 10, "continuous_actions": True}},
            algo_params={"shield": {"learn_from": "proposals"}},
        ),
        "config key 'algo_params.shield.learn_from' = 'proposals': must be 'executed' on Box "
        "actions",
    ),
    (  # a shield key whose option lost on measurement names nothing now (docs/design.md, 6.3)
        lambda: tiny_config(["walk"], ["shield"], algo_params={"shield": {"lookahead": 1}}),
        "config key 'algo_params.shield' = ['lookahead']: removed from the shield: lookahead "
        "(the critic values the first imagined step's successor; more imagined steps are gone)",
    ),
    (
        lambda: tiny_config(["walk", "maze"], ["ippo"]),
        "config key 'envs[1]' = 'maze': must be one of hazard_grid, intersection, mamujoco, "
        "spread, spread_mpe2, walk (or a name given under custom_envs)",
    ),
]


@pytest.mark.parametrize(("make", "expected"), CASES)
def test_bad_input_is_refused_in_one_line_naming_the_key(make, expected):
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(make())
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_run_configs_record_the_import_paths_of_their_task_and_algorithm():
    config = check_workflow_config(
        tiny_config(
            ["hazard_grid", "adversary"],
            ["ippo", "toy"],
            env_params={"hazard_grid": {"n_agents": 2}, "adversary": {"n_agents": 3}},
        )
    )
    adversary = {
        "factory": "mpe2.simple_adversary_v3:parallel_env",
        "cost": "mpe2_adversary_proximity",
    }
    toy = "tests.custom.toy_algorithm:Preferences"
    assert resolve_run_config(config, "adversary", "toy", 0).custom == {
        "env": adversary,
        "algo": toy,
    }
    assert resolve_run_config(config, "adversary", "ippo", 0).custom == {"env": adversary}
    assert resolve_run_config(config, "hazard_grid", "toy", 0).custom == {"algo": toy}
    # Built-in runs are what they always were: no `custom` key at all.
    assert "custom" not in resolve_run_config(config, "hazard_grid", "ippo", 0).to_dict()


def test_a_run_config_names_only_what_is_registered():
    config = check_workflow_config(tiny_config(["corridor"], ["toy"]))
    flat = resolve_run_config(config, "corridor", "toy", 0).to_dict()
    assert RunConfig.from_dict(flat).custom == flat["custom"]
    other = {**flat, "custom": {**flat["custom"], "algo": "tests.custom.other:Algorithm"}}
    with pytest.raises(ConfigError, match=r"^custom=.*: must be \{.*\}, what this process has"):
        RunConfig.from_dict(other)
    unnamed = {key: value for key, value in flat.items() if key != "custom"}
    with pytest.raises(ConfigError, match=r"^custom=\{\}: must be"):
        RunConfig.from_dict(unnamed)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_readme_example_is_the_shipped_one_and_valid():
    """The README's task and config are the files in examples/, so they work as written."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Your own task and algorithm", 1)[1].split("\n## ", 1)[0]
    assert (REPO / "examples" / "corridor.py").read_text() in _blocks(section, "python")
    config_text = (REPO / "examples" / "corridor.yaml").read_text()
    assert config_text in _blocks(section, "yaml")
    assert "snakemake --cores 2 --configfile examples/corridor.yaml" in section
    config = check_workflow_config(yaml.safe_load(config_text))
    assert config["custom_envs"] == {"corridor": "examples.corridor:Corridor"}
