"""A real run of `spread` with Box actions (`continuous_actions: true`) through Snakemake: ippo,
ippo_lag, shield and shield_dec train their Gaussian policies (the shields their models, and
their certificates are tested), are evaluated (the shields on and off) and rendered, and reach
the tables, the figures and the risk floor like Discrete runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from src.core.io import load_from_file
from src.schemas import EVAL_SCHEMA, read_parquet
from tests.workflow.conftest import REPO, job_counts, snakemake

pytestmark = pytest.mark.slow

ALGOS = ["ippo", "ippo_lag", "shield", "shield_dec"]


def _box_config(results: Path) -> dict:
    """`.test/config.yaml` on spread with Box actions, at a few seconds per job."""
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config.update(
        experiment_tag="box", results_dir=str(results), envs=["spread"], algos=list(ALGOS)
    )
    config["env_params"] = {"spread": {"n_agents": 2, "max_steps": 10, "continuous_actions": True}}
    shield = {"calibration_episodes": 4, "candidates": 8}
    config["algo_params"] = {"shield": shield, "shield_dec": shield}
    config["base"].update(
        timesteps=2 * 32 * 3,
        use_wandb=False,
        final_policy_eval_episodes=4,
        final_policy_eval_horizons=[1, 5, 10],
    )
    return config


def test_spread_with_box_actions_runs_every_built_in_algorithm_end_to_end(tmp_path: Path):
    results = tmp_path / "results"
    config_file = tmp_path / "box.yaml"
    config_file.write_text(yaml.safe_dump(_box_config(results)), encoding="utf-8")

    done = snakemake("--cores", "2", "--configfile", str(config_file), timeout=900)

    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    counts = job_counts(done.stdout + done.stderr)
    assert counts["train"] == counts["evaluate"] == counts["render"] == len(ALGOS)
    experiment = results / "box"
    for algo in ALGOS:
        run = experiment / "runs" / "spread" / algo / "run0"
        assert json.loads((run / "history.json").read_text())
        policy = load_from_file(run, "policy.pt")
        assert policy["network"]["continuous"] and policy["action_space"]["shape"] == [5]
        evaluation = read_parquet(run / "eval.parquet", EVAL_SCHEMA).to_pandas()
        shielded = algo.startswith("shield")
        modes = [True, False] if shielded else [False]
        assert sorted(evaluation["horizon"]) == sorted([1, 5, 10] * len(modes))
        assert sorted(set(evaluation["shielded"])) == sorted(modes)
        assert (evaluation["n"] == 4).all()
        if shielded:
            assert policy["shield"]["certificate"]["episodes"] > 0
        assert (run / "videos" / f"spread-{algo}-run0-episode-0.mp4").stat().st_size > 0
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    assert set(summary["policy"]) == {*ALGOS, "shield (shield off)", "shield_dec (shield off)"}
    floor = json.loads((experiment / "floors" / "spread.json").read_text())
    assert floor["method"] == "witness" and floor["episodes"] == 4
