"""An interrupted `train_run` ends with one line saying where it stopped and what a rerun does;
its checkpoint stays valid, and the rerun says on the console that it resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from src.algos.train import train_run
from src.core.io import load_from_file
from src.core.logging import reset_logging
from tests.algos.conftest import toy_config
from tests.algos.toy_env import make_toy_env


class InterruptAt:
    """A training callback standing for a Ctrl-C at the end of update `update`."""

    def __init__(self, update: int) -> None:
        self.update = update

    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        pass

    def on_update_end(self, trainer: Any) -> None:
        if trainer.update == self.update:
            raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def _console_logging() -> Any:
    """Logging as configured by default: the console sink writes to the current stderr."""
    reset_logging()
    yield
    reset_logging()


def test_an_interrupt_after_a_checkpoint_says_a_rerun_resumes_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    config = toy_config(checkpoint_every=2)  # 4 updates
    run = tmp_path / "run0"
    with pytest.raises(KeyboardInterrupt) as interrupted:
        train_run(config, run, make_env=make_toy_env, progress=False, callbacks=[InterruptAt(3)])
    assert str(interrupted.value) == (
        f"interrupted training {run} during update 4 of 4; rerun the same command to resume "
        "from its last checkpoint (after update 2)"
    )
    assert interrupted.value.__cause__ is None and interrupted.value.__suppress_context__
    assert not (run / ".train.lock").exists()  # released: the rerun may take it
    assert [p.name for p in (run / "checkpoint").iterdir()] == ["update-000002"]
    capsys.readouterr()

    train_run(config, run, make_env=make_toy_env, progress=False)
    console = capsys.readouterr().err.splitlines()
    (line,) = [ln for ln in console if "resumed" in ln]
    assert line.endswith(
        f"[train] resumed {run} from its checkpoint after update 2 of 4 (checkpoint/update-000002)"
    ), line

    # The checkpoint the interrupt left ends the run as an uninterrupted one.
    reference = tmp_path / "reference"
    train_run(config, reference, make_env=make_toy_env, progress=False)
    expected = load_from_file(reference, "policy.pt")["actor_critic"]
    resumed = load_from_file(run, "policy.pt")["actor_critic"]
    assert all(torch.equal(expected[key], resumed[key]) for key in expected)


def test_an_interrupt_before_the_first_checkpoint_says_a_rerun_starts_again(tmp_path: Path):
    run = tmp_path / "run0"
    with pytest.raises(KeyboardInterrupt) as interrupted:
        train_run(
            toy_config(checkpoint_every=2),
            run,
            make_env=make_toy_env,
            progress=False,
            callbacks=[InterruptAt(1)],
        )
    assert str(interrupted.value) == (
        f"interrupted training {run} during update 2 of 4, before its first checkpoint (one "
        "every 2 updates); rerun the same command to start it again"
    )


def test_an_interrupt_before_training_began(tmp_path: Path):
    def make_env(config: Any) -> Any:
        raise KeyboardInterrupt

    run = tmp_path / "run0"
    with pytest.raises(KeyboardInterrupt) as interrupted:
        train_run(toy_config(), run, make_env=make_env, progress=False)
    assert str(interrupted.value) == (
        f"interrupted before training {run} began; rerun the same command to start it"
    )
    assert not (run / ".train.lock").exists()
