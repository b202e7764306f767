"""The shield-variants benchmark: configs it builds and the section it writes."""

from __future__ import annotations

from benchmarks.shield_variants import VARIANTS, render_markdown, variant_config


def test_each_variant_changes_one_setting_and_keeps_the_rest():
    base = {"timesteps": 100, "shield_patience": 32, "algo_params": {"model_epochs": 2}}
    episode = variant_config(base, VARIANTS["episode"])
    assert episode["algo_params"] == {"model_epochs": 2, "risk_scope": "episode"}
    assert episode["shield_patience"] == 32 and episode["timesteps"] == 100
    early = variant_config(base, VARIANTS["patience_8"])
    assert early["shield_patience"] == 8 and early["algo_params"] == {"model_epochs": 2}
    assert variant_config(base, VARIANTS["default"]) == base
    assert base["algo_params"] == {"model_epochs": 2}  # the base config is not changed


def test_the_section_has_one_row_per_env_and_variant():
    row = {
        "train_cpu_s": 12.0,
        "p_on": 0.2,
        "p_on_low": 0.15,
        "p_on_high": 0.26,
        "return_on": 2.5,
        "p_off": 0.5,
        "p_off_low": 0.43,
        "p_off_high": 0.57,
        "return_off": 2.9,
        "train_violation_after_arming": None,
    }
    results = {
        "machine": {"platform": "x", "cpus": 2, "torch": "2", "threads": 1},
        "config": "config/config.yaml",
        "rows": [{"env": "hazard_grid", "variant": v, **row} for v in ("default", "episode")],
    }
    text = render_markdown(results)
    assert text.count("| hazard_grid |") == 2
    assert "0.200 [0.150, 0.260]" in text and "0.500 [0.430, 0.570]" in text
