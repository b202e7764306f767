"""Nothing planted in a results folder reaches outside it.

Each test plants one thing an attacker who can write into a results folder might leave there
and runs the code path that used to follow it: a checkpoint folder that is a symlink to a
folder outside (training deleted its sub-folders), a wandb manifest entry naming a folder
outside (the upload deleted it), a video that is a symlink to `/dev/zero` (the video page
copied it until the disk was full), archives whose members inflate far beyond the job's memory,
a YAML alias bomb in the config, a seed offset no RNG accepts, and two workflows taking over
the same stale lock at once. Each must end in one line naming the file and what is wrong,
with nothing outside the folder deleted, nothing filled and nothing inflated past the limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from src.algos.checkpoint import save_checkpoint
from src.algos.train import build_trainer, make_vector_env_for, train_run
from src.config.run import RunConfig, make_run_config
from src.containment import ContainmentError
from tests.reliability.helpers import folder_state


def _one_line_naming(error: BaseException | str, path: Path) -> str:
    message = str(error)
    assert "\n" not in message.strip(), message
    assert str(path) in message, f"the message does not name {path}: {message}"
    assert "weights_only=False" not in message and "trust" not in message, message
    return message


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every results folder, with sub-folders and files to lose."""
    folder = tmp_path / "outside"
    for name in ("precious", "update-000009", "wandb"):
        (folder / name).mkdir(parents=True)
        (folder / name / "data.txt").write_text(f"{name} must survive")
    (folder / "update-000009" / "complete.json").write_text('{"update": 9}')
    return folder


def _intact(outside: Path, before: dict[str, bytes]) -> None:
    assert folder_state(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["precious", "update-000009", "wandb"]


# ------------------------------------------------------------- 1. checkpoint symlink


def _tiny_config() -> dict[str, Any]:
    return make_run_config(
        env_name="hazard_grid",
        algo="ippo",
        num_envs=2,
        timesteps=2 * 32 * 4,
        rollouts=32,
        mini_batches=2,
        env_params={"max_steps": 20},
        checkpoint_every=1,
    )


@pytest.fixture
def checkpointed(tmp_path: Path) -> Path:
    """A run folder holding a complete checkpoint after update 2 and no policy yet."""
    config = _tiny_config()
    run_dir = tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))

    class StopAfterTwo:
        def on_epoch_end(self, trainer: Any, epoch: int) -> None:
            pass

        def on_update_end(self, trainer: Any) -> None:
            if trainer.update == 2:
                save_checkpoint(trainer, run_dir)
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.train(callbacks=[StopAfterTwo()], progress=False)
    return run_dir


def test_a_checkpoint_symlinked_outside_is_refused_and_nothing_deleted(
    tmp_path: Path, outside: Path
):
    run_dir = tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    run_dir.mkdir(parents=True)
    link = run_dir / "checkpoint"
    link.symlink_to(outside, target_is_directory=True)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        train_run(_tiny_config(), run_dir, progress=False)

    message = _one_line_naming(error.value, link)
    assert "symbolic link" in message
    _intact(outside, before)
    assert link.is_symlink() and not (run_dir / "policy.pt").exists()


def test_a_symlink_inside_the_checkpoint_folder_is_refused(checkpointed: Path, outside: Path):
    link = checkpointed / "checkpoint" / "update-000001"
    link.symlink_to(outside / "update-000009", target_is_directory=True)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        train_run(_tiny_config(), checkpointed, progress=False)

    _one_line_naming(error.value, link)
    _intact(outside, before)
    assert not (checkpointed / "policy.pt").exists()


def test_an_intact_checkpoint_still_resumes_and_is_removed(checkpointed: Path):
    train_run(_tiny_config(), checkpointed, progress=False)
    assert (checkpointed / "policy.pt").is_file() and not (checkpointed / "checkpoint").exists()


# ------------------------------------------------------------- 2. wandb manifest


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A results folder (`results/test`) of one finished run, ready for the wandb upload."""
    import pandas as pd

    from src.config.workflow import resolve_run_config, validate_workflow_config
    from src.core.io import save_to_file

    workflow_config = validate_workflow_config(
        {
            "experiment_tag": "test",
            "envs": ["hazard_grid"],
            "algos": ["ippo"],
            "num_runs": 1,
            "base": {"num_envs": 2, "timesteps": 64, "rollouts": 16, "mini_batches": 2},
            "env_params": {"hazard_grid": {"n_agents": 2, "max_steps": 20}},
        }
    )
    results = tmp_path / "results" / "test"
    run_dir = results / "runs" / "hazard_grid" / "ippo" / "run0"
    config = resolve_run_config(workflow_config, "hazard_grid", "ippo", 0).to_dict()
    save_to_file(config, run_dir, "config.json")
    save_to_file([], run_dir, "history.json")
    save_to_file(pd.DataFrame({"horizon": [10], "p_violation": [0.1]}), run_dir, "eval.parquet")
    (run_dir / "videos").mkdir()
    return results


def _plant_manifest(results: Path, folder: str) -> Path:
    """A manifest whose entry for the run names `folder`, with a stale fingerprint and never
    synced: the upload would delete that folder to make a new offline run."""
    import json

    wandb_dir = results / "wandb"
    wandb_dir.mkdir(exist_ok=True)
    manifest = wandb_dir / "manifest.json"
    entry = {"fingerprint": "stale", "folder": folder, "synced": False}
    manifest.write_text(json.dumps({"hazard_grid-ippo-run0": entry}))
    (wandb_dir / "upload.done").unlink(missing_ok=True)
    return manifest


@pytest.mark.parametrize(
    "kind", ["absolute", "climbing", "climbing inside wandb/", "wandb folder itself", "symlink"]
)
def test_a_manifest_folder_outside_is_refused_and_nothing_deleted(
    finished: Path, outside: Path, kind: str, monkeypatch: pytest.MonkeyPatch
):
    from src.analysis.wandb_upload import upload_experiment

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(finished / "no.netrc"))
    if kind == "symlink":
        (finished / "wandb" / "wandb").mkdir(parents=True)
        (finished / "wandb" / "wandb" / "offline-run-x").symlink_to(outside / "precious")
    folder = {
        "absolute": str(outside / "precious"),
        "climbing": "../../../outside/precious",
        "climbing inside wandb/": "wandb/../../../../outside/precious",
        "wandb folder itself": "wandb",
        "symlink": "wandb/offline-run-x",
    }[kind]
    manifest = _plant_manifest(finished, folder)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        upload_experiment(finished, sync=False)

    message = _one_line_naming(error.value, manifest)
    assert repr(folder) in message
    _intact(outside, before)
    assert not (finished / "wandb" / "upload.done").exists()
