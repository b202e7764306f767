"""A bad config is rejected before any job runs, with one line naming the key and value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.workflow.conftest import REPO, snakemake


def _test_config(results_dir: Path) -> dict:
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())
    config["results_dir"] = str(results_dir)
    return config


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c["base"].update(mini_batches=3),
            "invalid config: config key 'base.mini_batches' = 3: must divide the PPO batch",
        ),
        (
            lambda c: c.update(envs=["hazard_grid", "maze"]),
            "invalid config: config key 'envs[1]' = 'maze': must be one of",
        ),
        (
            lambda c: c["base"].update(max_risk=2.0),
            "invalid config: config key 'base.max_risk' = 2.0:",
        ),
        (
            # The shield's risk horizon cannot be longer than the episode cap (50 here).
            lambda c: c.update(algo_params={"shield": {"horizon": 60}}),
            "invalid config: config key 'algo_params.shield.horizon' = 60: "
            "must be at most the episode cap max_steps=50",
        ),
        (
            lambda c: c["wandb"].update(projct="x"),
            "invalid config: unknown config key 'wandb.projct'",
        ),
        (  # a task given by import path whose env has no cost, and no cost function named
            lambda c: c.update(
                envs=["tag"],
                custom_envs={"tag": "mpe2.simple_tag_v3:parallel_env"},
                env_params={"tag": {"n_agents": 4}},
            ),
            "invalid config: config key 'custom_envs.tag' = 'mpe2.simple_tag_v3:parallel_env': "
            "env tag: infos of ['adversary_0', 'adversary_1', 'adversary_2', 'agent_0'] hold no "
            "'cost' after step 1, and no cost function is named",
        ),
        (  # an algorithm given by import path without the methods the pipeline calls
            lambda c: c.update(
                algos=["ippo", "toy"], custom_algos={"toy": "tests.custom.tasks:NoMethods"}
            ),
            "invalid config: config key 'custom_algos.toy' = 'tests.custom.tasks:"
            "NoMethods': class NoMethods lacks the methods ['train', 'state', 'load_state', "
            "'policy_state', 'load_actor']",
        ),
    ],
)
def test_bad_config_fails_in_one_line_before_any_job(
    change, expected: str, tmp_path: Path, results_dir: Path
):
    config = _test_config(results_dir)
    change(config)
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(yaml.safe_dump(config))

    done = snakemake("--cores", "1", "--configfile", str(config_file))

    assert done.returncode == 1
    lines = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and not line.startswith("Using workflow specific profile")
    ]
    assert lines == [lines[0]] and lines[0].startswith(expected), done.stdout + done.stderr
    assert not results_dir.exists()
