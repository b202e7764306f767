"""A run killed with SIGKILL and resumed ends with the same weights as an uninterrupted run."""

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

from src.algos import checkpoint as checkpoint_module
from src.algos import train as train_module
from src.algos.checkpoint import latest_checkpoint, run_fingerprint, save_checkpoint
from src.algos.train import build_trainer, train_run
from src.config.run import RunConfig, make_run_config
from src.core.io import load_from_file, save_to_file
from tests.algos.conftest import toy_config
from tests.algos.toy_env import make_toy_env

ROOT = Path(__file__).resolve().parents[2]
# Its sitecustomize pauses training where RELIABILITY_PAUSE_TRAINING says.
FAULTS = ROOT / "tests" / "reliability" / "fault_injection"
SCRIPT = (
    "import json, sys\n"
    "from src.algos.train import train_run\n"
    "train_run(json.loads(sys.argv[1]), sys.argv[2], progress=False)\n"
)


def _config(algo: str) -> dict:
    # The real hazard_grid (its env state goes through the checkpoint): 6 updates,
    # a checkpoint after every second one.
    return make_run_config(
        env_name="hazard_grid",
        algo=algo,
        num_envs=4,
        n_agents=2,
        rollouts=16,
        timesteps=4 * 16 * 6,
        learning_epochs=2,
        mini_batches=4,
        learning_rate=3e-3,
        checkpoint_every=2,
        lag_version="pid",
    )


def _start_and_kill(config: dict, out_dir: Path, pause_at: str) -> None:
    """Run train_run in a child that pauses at `pause_at`; SIGKILL it once it is there."""
    marker = out_dir.parent / f"{out_dir.name}.paused"
    env = {
        **os.environ,
        "RELIABILITY_PAUSE_TRAINING": f"{pause_at}:{marker}",
        "PYTHONPATH": os.pathsep.join((str(ROOT), str(FAULTS))),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps(config), str(out_dir)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if child.poll() is not None:
                raise AssertionError(f"child exited early: {child.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError("child never reached the pause point")
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ippo", "ippo_lag"])
@pytest.mark.parametrize(
    ("pause_at", "checkpoint_update"),
    [("after_checkpoint:3", 4), ("mid_update:3", 2)],
    ids=["update-boundary", "mid-update"],
)
def test_killed_run_resumes_bit_for_bit(tmp_path, algo, pause_at, checkpoint_update):
    config = _config(algo)
    reference = tmp_path / "reference"
    train_run(config, reference, progress=False)

    killed = tmp_path / "killed"
    _start_and_kill(config, killed, pause_at)
    assert not (killed / "policy.pt").exists()
    checkpoint = latest_checkpoint(killed)
    assert checkpoint is not None and checkpoint.name == f"update-{checkpoint_update:06d}"

    train_run(config, killed, progress=False)
    assert not (killed / "checkpoint").exists()
    expected = load_from_file(reference, "policy.pt")["actor_critic"]
    resumed = load_from_file(killed, "policy.pt")["actor_critic"]
    assert expected.keys() == resumed.keys()
    for key in expected:
        assert torch.equal(expected[key], resumed[key]), key
    assert load_from_file(reference, "history.json") == load_from_file(killed, "history.json")
    strip = ("wall_time", "charts/steps_per_second")
    rows = [
        [
            {k: v for k, v in row.items() if k not in strip}
            for row in load_from_file(d, "updates.json")
        ]
        for d in (reference, killed)
    ]
    assert rows[0] == rows[1]


def test_half_written_checkpoint_is_ignored(tmp_path):
    config = toy_config()
    trainer = build_trainer(config, make_toy_env(config))
    trainer.train(progress=False)
    save_checkpoint(trainer, tmp_path)
    # A later checkpoint killed before its marker was written must not be picked up.
    broken = tmp_path / "checkpoint" / "update-000009"
    broken.mkdir()
    (broken / "state.json").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == f"update-{trainer.update:06d}"


def _stale_checkpoint(config: dict, run_dir: Path, **marker: object) -> None:
    """A complete checkpoint after update 2 of `config` in `run_dir`, its marker `marker`."""
    trainer = build_trainer(config, make_toy_env(config))
    trainer.train(progress=False)
    trainer.update = 2  # as if it had stopped there
    folder = save_checkpoint(trainer, run_dir)
    save_to_file({"update": 2, **marker}, folder, "complete.json")


@pytest.mark.parametrize("written_by", ["another config", "other code", "no fingerprint"])
def test_a_checkpoint_of_another_config_or_code_is_not_resumed(tmp_path, monkeypatch, written_by):
    config = toy_config()
    reference = tmp_path / "reference"
    train_run(config, reference, make_env=make_toy_env, progress=False)
    other = {**config, "learning_rate": 2 * config["learning_rate"]}
    marker = {
        "another config": {"fingerprint": run_fingerprint(RunConfig.from_dict(other))},
        "other code": {"fingerprint": "0" * 64},
        "no fingerprint": {},
    }[written_by]
    stale = tmp_path / "stale"
    _stale_checkpoint(other, stale, **marker)
    lines: list[str] = []
    monkeypatch.setattr(train_module, "log", lambda text, **kw: lines.append(text))
    train_run(config, stale, make_env=make_toy_env, progress=False)
    assert any("not resumed" in line and "training starts afresh" in line for line in lines)
    assert not any(line.startswith("resumed") for line in lines)
    # Trained from scratch: the same as the uninterrupted run.
    assert load_from_file(reference, "history.json") == load_from_file(stale, "history.json")


def test_the_fingerprint_follows_the_config_and_the_code(monkeypatch, tmp_path):
    config = RunConfig.from_dict(toy_config())
    first = run_fingerprint(config)
    assert run_fingerprint(config.to_dict()) == first  # the flat form is the same run
    changed = RunConfig.from_dict({**toy_config(), "learning_rate": 1e-2})
    assert run_fingerprint(changed) != first
    # The code: an edit to any file of the training's code changes it.
    code = checkpoint_module.training_code(config)
    module = tmp_path / "module.py"
    module.write_text("x = 1\n")
    monkeypatch.setattr(checkpoint_module, "training_code", lambda config: [*code, module])
    before = run_fingerprint(config)
    assert before != first
    module.write_text("x = 2\n")
    assert run_fingerprint(config) != before


def test_the_training_code_is_what_the_run_imports():
    """A run's training code holds its own algorithm's modules and not what the training
    never imports (the reports, another algorithm), so editing those resumes part-way runs."""
    root = Path(checkpoint_module.__file__).resolve().parents[2]

    def names(algo: str) -> set[str]:
        config = RunConfig.from_dict(toy_config(algo=algo))
        return {p.relative_to(root).as_posix() for p in checkpoint_module.training_code(config)}

    ippo, shield = names("ippo"), names("shield_dec")
    assert {"src/algos/train.py", "src/algos/ippo.py", "src/algos/checkpoint.py"} <= ippo
    assert "src/algos/shield/budget.py" in shield and "src/algos/shield/budget.py" not in ippo
    assert not any(name.startswith("src/analysis/") for name in ippo | shield)
