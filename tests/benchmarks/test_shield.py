"""The shield benchmark at a tiny size: matmul accounting, output structure, its section."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from benchmarks import shield as bench
from benchmarks.common import experiment, markers, run_config, write_section

TINY = bench.Sizes(
    passive=1,
    filter_calls=3,
    repeats=1,
    patience=1,
    armed_updates=1,
    eval_episodes=3,
    eval_steps=12,
    eval_repeats=1,
    num_envs=4,
    rollouts=8,
)


@pytest.fixture(scope="module")
def results():
    threads = torch.get_num_threads()
    try:
        yield bench.benchmark(TINY)
    finally:
        torch.set_num_threads(threads)


def test_matmuls_are_recorded_with_their_flops_and_replayed():
    linear = torch.nn.Linear(3, 8)
    with torch.inference_mode(), bench.MatmulRecorder() as recorder:
        bias, x, w = torch.randn(4, 1, 8), torch.randn(4, 5, 3), torch.randn(4, 3, 8)
        torch.baddbmm(bias, x, w, out=torch.empty(4, 5, 8))
        linear(torch.randn(2, 5, 3))
        torch.randn(5, 3) @ torch.randn(3, 2)
        torch.relu(x)  # not a matmul
    calls = recorder.calls
    assert [c.op for c in calls] == ["baddbmm", "linear", "matmul"]
    assert [c.flops for c in calls] == [2 * 4 * 5 * 3 * 8, 2 * 10 * 3 * 8, 2 * 5 * 3 * 2]
    assert calls[0].shapes == ((4, 1, 8), (4, 5, 3), (4, 3, 8))
    bench.matmul_replay(calls)()  # the same ops on preallocated tensors


def test_run_config_follows_the_experiment():
    default = experiment()
    config = run_config(default, "intersection", "shield")
    base = default["base"]
    assert config["num_envs"] == base["num_envs"] and config["rollouts"] == base["rollouts"]
    assert config["n_agents"] == default["env_params"]["intersection"]["n_agents"]
    assert config["shield_version"] == base["shield_version"]
    assert config["algo_params"] == default["algo_params"]["shield"]
    small = TINY.run_config(default, "hazard_grid", "ippo")
    assert small["shield_patience"] == 1 and small["num_envs"] == 4 and small["rollouts"] == 8
    assert small["timesteps"] == base["timesteps"]  # the rest as configured
    assert small["algo_params"] == {}


def test_tiny_benchmark_has_every_figure(results):
    assert [f["env"] for f in results["filter"]] == list(bench.ENVS)
    for f in results["filter"]:
        assert f["filter_calls"] == TINY.filter_calls and f["matmul_calls"] > 0
        assert f["gflop"] > 0 and f["filter_seconds"] > 0 and f["matmul_seconds"] > 0
        assert math.isfinite(f["arithmetic_fraction"]) and f["arithmetic_fraction"] > 0
        assert f["decisions"] == TINY.filter_calls * TINY.num_envs
        assert 0 <= f["searched_share"] <= f["one_change_share"] <= 1
    for t in results["training"]:
        assert t["patience"] == 1 and t["armed_updates"] == 1
        assert t["ippo_seconds"] > 0 and t["shield_seconds"] > 0
        assert math.isfinite(t["ratio_all"]) and math.isfinite(t["ratio_armed"])
        parts = ("collect", "filter", "model")
        assert all(t[f"armed_{part}_seconds"] >= 0 for part in parts)
        assert t["armed_filter_seconds"] > 0 and t["armed_model_seconds"] > 0
        # The floor judges the proposals of the armed updates' filter calls: a part of the
        # filter's work, above ippo alone.
        assert t["armed_proposal_seconds"] > 0 and t["ippo_armed_collect_seconds"] > 0
        assert 1 < t["floor_judged"] <= t["floor_stored"]
    for e in results["evaluation"]:
        assert e["episodes"] == TINY.eval_episodes and e["max_steps"] == TINY.eval_steps
        assert e["off_seconds"] > 0 and e["on_seconds"] > 0 and math.isfinite(e["ratio"])
        assert e["proposal_seconds"] > 0 and e["floor"] > 1
        assert 0 <= e["violating_on"] <= e["violating_high_on"] <= 1
        assert 0 <= e["violating_off"] <= e["violating_high_off"] <= 1
        assert math.isfinite(e["return_on"]) and math.isfinite(e["return_off"])
    # The default experiment has shield_dec: its training against ippo and its evaluation.
    assert [d["env"] for d in results["decentralised"]] == list(bench.ENVS)
    for d in results["decentralised"]:
        assert d["ippo_armed_seconds"] > 0 and d["shield_armed_seconds"] > 0
        assert d["ratio_armed"] == d["shield_armed_seconds"] / d["ippo_armed_seconds"]
        assert d["armed_filter_seconds"] > 0 and d["armed_model_seconds"] > 0
        e = d["evaluation"]
        assert e["off_seconds"] > 0 and e["on_seconds"] > 0 and "floor" not in e
        assert 0 <= e["overridden_share"] <= 1
    machine = results["machine"]
    assert machine["torch_threads"] == 1 and machine["cpus"] >= 1
    json.dumps(results)  # the saved file is plain JSON


def test_section_states_machine_config_and_targets(results, tmp_path):
    text = bench.render_markdown(results)
    assert text.startswith("## Shield")
    for needle in ("torch", "config/config.yaml", "python -m benchmarks.shield", "Targets"):
        assert needle in text
    for env in bench.ENVS:
        assert text.count(f"| {env} |") >= 4  # filter, training, evaluation, shield_dec
        assert f"- {env}: shield_dec training <= 5x ippo" in text
    path = tmp_path / "BENCHMARKS.md"
    write_section("shield", text, path=path)
    start, end = markers("shield")
    assert path.read_text().count(start) == 1 and end in path.read_text()


def test_the_floor_judges_every_recorded_proposal_once():
    judged = []

    class Recording:
        config = type("Config", (), {"horizon": 7})()

        def raw_risk(self, joint, actions, remaining):
            judged.append((joint.shape, actions.tolist(), remaining.tolist()))
            return torch.zeros(len(actions))

    obs = np.zeros((2, 3, 4), dtype=np.float32)  # 2 copies, 3 agents, 4 features
    inputs = [(obs, np.array([[0, 1, 2], [3, 4, 0]]), None, None)] * 3
    assert bench.proposal_seconds(Recording(), inputs) >= 0
    assert judged == [((2, 12), [[0, 1, 2], [3, 4, 0]], [7.0, 7.0])] * 3
