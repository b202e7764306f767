"""Algorithms given by import path: a toy algorithm written outside src/ and the README's
penalised IPPO train, evaluate, render and resume through the pipeline's entry points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from src.algos.policy import load_actor
from src.algos.registry import ALGORITHMS, get_algorithm
from src.algos.train import train_run
from src.analysis.style import has_shield, policy_label
from src.config.workflow import check_workflow_config, resolve_run_config
from src.core.io import load_from_file
from src.custom import ComponentError, EnvEntry, register_algorithm
from src.evaluation.evaluate import evaluate_run
from src.evaluation.render import render_run
from tests.custom.conftest import tiny_config
from tests.custom.toy_algorithm import PreferenceActor

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "reliability" / "fault_injection"
# A training job of a config with custom entries: register them, then train (as a job does).
CHILD = (
    "import json, sys\n"
    "from src.custom import register_config\n"
    "register_config(json.loads(sys.argv[3]))\n"
    "from src.algos.train import train_run\n"
    "train_run(json.loads(sys.argv[1]), sys.argv[2], progress=False)\n"
)


def _run(config: dict, env: str, algo: str, out: Path) -> Path:
    """Validate `config` (which registers its entries), then train, evaluate and render."""
    check_workflow_config(config)
    train_run(resolve_run_config(config, env, algo, 0), out, progress=False)
    evaluate_run(out, out / "eval.parquet")
    render_run(out, out / "videos", episodes=1)
    return out


def test_toy_algorithm_capabilities_come_from_its_class():
    register_algorithm("toy", "tests.custom.toy_algorithm:Preferences")
    spec = get_algorithm("toy")
    assert (spec.constrained, spec.shielded, spec.multiplier) == (True, False, False)
    assert spec.sections == ("ppo",) and spec.version_keys == ()
    assert spec.action_kinds == ("discrete", "box")
    assert spec.entry == "tests.custom.toy_algorithm:Preferences"
    assert "toy" not in ALGORITHMS  # the built-in table is unchanged


@pytest.mark.parametrize(
    ("env", "algo", "params"),
    [
        ("corridor", "toy", {}),
        ("corridor", "ippo_penalty", {}),
        # Box actions, which the toy algorithm takes (the shields are refused on them).
        ("tag", "toy", {"continuous_actions": True}),
        # A task vectorised by hand: training and evaluation use its own VectorEnv.
        ("walk_vector", "toy", {}),
    ],
)
def test_custom_algorithm_trains_evaluates_and_renders(tmp_path, env, algo, params):
    config = tiny_config([env], [algo])
    config["env_params"][env].update(params)
    out = _run(config, env, algo, tmp_path / "run")
    recorded = load_from_file(out, "config.json")["custom"]
    assert recorded == {
        "env": EnvEntry.from_config(config["custom_envs"][env]).to_dict(),
        "algo": config["custom_algos"][algo],
    }
    history = load_from_file(out, "history.json")
    assert history and {episode["algo"] for episode in history} == {algo}
    evaluation = load_from_file(out, "eval.parquet")
    assert evaluation["horizon"].tolist() == [1, 5, 10]
    assert (evaluation["n"] == 4).all() and not evaluation["shielded"].any()
    assert (out / "videos" / f"{env}-{algo}-run0-episode-0.mp4").stat().st_size > 0
    actor = load_actor(out)
    if algo == "toy":
        assert isinstance(actor, PreferenceActor)


def test_a_shielded_algorithm_is_evaluated_with_its_shield_on_and_off(tmp_path):
    register_algorithm("my_shield", "tests.custom.tasks:ShieldedPenalty")
    config = tiny_config(["corridor"], ["my_shield"])
    config["custom_algos"] = {"my_shield": "tests.custom.tasks:ShieldedPenalty"}
    config["algo_params"] = {
        "my_shield": {"model_epochs": 1, "critic_steps": 2, "critic_batch_size": 16}
    }
    out = _run(config, "corridor", "my_shield", tmp_path / "run")
    evaluation = load_from_file(out, "eval.parquet")
    assert evaluation["shielded"].tolist() == [True] * 3 + [False] * 3
    assert load_actor(out).shielded and not load_actor(out, shielded=False).shielded
    assert has_shield("my_shield") and policy_label("my_shield", False).endswith("(shield off)")


def test_same_config_same_numbers(tmp_path):
    config = tiny_config(["corridor"], ["toy"])
    first, second = (_run(config, "corridor", "toy", tmp_path / name) for name in "ab")
    assert load_from_file(first, "history.json") == load_from_file(second, "history.json")
    a, b = (load_from_file(d, "policy.pt")["prefs"] for d in (first, second))
    assert torch.equal(a, b)
    assert load_from_file(first, "eval.parquet").equals(load_from_file(second, "eval.parquet"))


def _kill_after_checkpoint(config: dict, run_config: dict, out: Path) -> None:
    """Train in a child that stops for good after its first checkpoint; SIGKILL it there."""
    marker = out.parent / f"{out.name}.paused"
    env = {
        **os.environ,
        "RELIABILITY_PAUSE_TRAINING": f"after_checkpoint:1:{marker}",
        "PYTHONPATH": os.pathsep.join((str(ROOT), str(FAULTS))),
    }
    args = [json.dumps(run_config), str(out), json.dumps(config)]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], cwd=ROOT, env=env, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if child.poll() is not None:
                raise AssertionError(f"child exited early: {child.stderr.read().decode()}")
            assert time.monotonic() < deadline, "child never reached the pause point"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()


@pytest.mark.parametrize(("env", "algo"), [("tag", "ippo"), ("corridor", "toy")])
def test_killed_run_resumes_bit_for_bit(tmp_path, env, algo):
    # The env copies are restored by replaying their running episodes from the reset seed.
    config = tiny_config([env], [algo])
    config["base"]["timesteps"] = 2 * 16 * 3
    check_workflow_config(config)
    run_config = resolve_run_config(config, env, algo, 0).to_dict()
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    train_run(run_config, reference, progress=False)
    _kill_after_checkpoint(config, run_config, killed)
    assert not (killed / "policy.pt").exists() and (killed / "checkpoint").is_dir()
    train_run(run_config, killed, progress=False)
    assert load_from_file(reference, "history.json") == load_from_file(killed, "history.json")
    expected, resumed = (load_from_file(d, "policy.pt") for d in (reference, killed))
    key = "actor_critic" if algo == "ippo" else None
    first, second = (
        state[key] if key else {"prefs": state["prefs"]} for state in (expected, resumed)
    )
    for name in first:
        assert torch.equal(first[name], second[name]), name


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("tests.custom.tasks:NoMethods", r"class NoMethods lacks the methods \['train',"),
        ("tests.custom.tasks:walk", r"is a function, not a class"),
        ("tests.custom.nowhere:Algo", r"cannot import module 'tests.custom.nowhere'"),
    ],
)
def test_an_algorithm_that_cannot_serve_is_refused_in_one_line(entry, message):
    register_algorithm("broken_algo", entry)
    with pytest.raises(ComponentError, match=message) as error:
        get_algorithm("broken_algo")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("WithoutPPO", r"WithoutPPO.sections = \('shield',\): must include 'ppo'"),
        ("PixelActions", r"PixelActions.action_kinds = \('pixels',\): must be a non-empty"),
        ("NotABool", r"NotABool.shielded = 'yes': must be a bool"),
    ],
)
def test_declared_capabilities_are_checked(name, message):
    register_algorithm("badly_declared", f"tests.custom.tasks:{name}")
    with pytest.raises(ComponentError, match=message):
        get_algorithm("badly_declared")
