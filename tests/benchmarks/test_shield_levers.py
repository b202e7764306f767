"""The shield-levers benchmark: the configs it builds, a tiny run and the section it writes."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import shield_levers as levers
from benchmarks.common import experiment, run_config
from src.config.run import RunConfig


def _shield_settings(config: dict, env: str = "intersection") -> dict:
    return RunConfig.from_dict(run_config(config, env, "shield")).shield.to_dict()


def test_each_lever_changes_its_settings_and_keeps_the_rest():
    default = experiment()
    before = _shield_settings(default)
    for name, change in levers.LEVERS.items():
        after = _shield_settings(levers.lever_experiment(default, name))
        changed = {k for k in before if before[k] != after[k]}
        assert changed == set(change), name
        for key, value in change.items():
            assert list(after[key]) == value if isinstance(value, list) else after[key] == value
    assert _shield_settings(default) == before  # the experiment itself is not changed


def test_an_unknown_lever_is_named():
    with pytest.raises(ValueError, match="unknown lever 'bigger'"):
        levers.lever_experiment(experiment(), "bigger")
    with pytest.raises(ValueError, match="unknown lever"):
        levers.benchmark(levers.QUICK, levers=["default", "bigger"], envs=["hazard_grid"])


def test_a_tiny_run_trains_certifies_and_evaluates_each_lever():
    threads = torch.get_num_threads()
    try:
        result = levers.benchmark(
            levers.QUICK,
            levers=["default", "ensemble_2"],
            envs=["hazard_grid"],
            config=levers.quick_experiment(),
        )
    finally:
        torch.set_num_threads(threads)
    assert [(r["env"], r["lever"]) for r in result["rows"]] == [
        ("hazard_grid", "default"),
        ("hazard_grid", "ensemble_2"),
    ]
    for row in result["rows"]:
        assert math.isfinite(row["ratio_armed"]) and row["ratio_armed"] > 0
        assert math.isfinite(row["eval_ratio"]) and row["eval_ratio"] > 0
        assert 0 <= row["violating_on"] <= row["violating_high_on"] <= 1
        assert 0 <= row["violating_off"] <= 1 and row["horizon"] == levers.QUICK.eval_steps
        assert 0 <= row["training_overridden_share"] <= 1
        assert row["certificate"] and row["episodes"] == levers.QUICK.eval_episodes
        assert row["max_risk"] == experiment()["base"]["max_risk"]


def _row(env: str, lever: str, ratio: float, eval_ratio: float, violating: float) -> dict:
    return {
        "env": env,
        "lever": lever,
        "settings": levers.LEVERS[lever],
        "max_risk": 0.1,
        "ratio_armed": ratio,
        "filter_seconds": 4.0,
        "model_seconds": 5.0,
        "ippo_armed_seconds": 2.5,
        "training_overridden_share": 0.2,
        "certificate": "certified",
        "eval_ratio": eval_ratio,
        "eval_overridden_share": 0.15,
        "violating_on": violating,
        "violating_high_on": violating + 0.03,
        "confidence": 0.95,
        "horizon": 100,
        "violating_off": 0.5,
        "return_on": 30.0,
        "episodes": 200,
    }


def test_the_verdict_takes_the_cheapest_lever_within_max_risk():
    machine = {
        "date": "d",
        "platform": "p",
        "cpus": 2,
        "python": "3.11",
        "torch": "2",
        "torch_threads": 1,
        "load_before": [0.0],
        "load_after": [0.0],
        "wall_seconds": 60.0,
    }
    result = {
        "sizes": {"patience": None, "armed_updates": 24},
        "algo_params": {"model_epochs": 2},
        "shield": {"ensemble_size": 4, "wm_hidden": [64, 64], "critic_hidden": [48, 48]},
        "machine": machine,
        "rows": [
            _row("intersection", "default", 4.6, 7.0, 0.05),
            _row("intersection", "ensemble_2", 3.6, 5.5, 0.065),
            _row("intersection", "model_epochs_1", 3.0, 5.0, 0.12),  # cheaper, not safe
            _row("intersection", "width_32", 1.9, 4.0, 0.2),  # cheap, but not safe
            _row("hazard_grid", "default", 3.9, 4.9, 0.3),
        ],
    }
    text = levers.render_markdown(result)
    assert text.count("| intersection |") == 4 and text.count("| hazard_grid |") == 1
    assert "wm_hidden (32, 32), critic_hidden (32, 32)" in text
    assert "ensemble 4 x (64, 64), critic (48, 48)" in text
    verdict = next(line for line in text.splitlines() if line.startswith("- intersection"))
    assert "max_risk (default, ensemble_2)" in verdict
    assert "ensemble_2 at 3.60x ippo (target 2x: NOT met)" in verdict
    assert "ensemble_2 at 5.50x shield-off (target 5x: NOT met)" in verdict
    assert "- hazard_grid: no lever keeps the shield within max_risk." in text
