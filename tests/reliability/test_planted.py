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


# ------------------------------------------------------------- 3. special files as videos

# A child process, so that a regression (copying /dev/zero endlessly) hits a file size limit
# and a timeout instead of filling the disk.
LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
try:
    exec(sys.argv[1])
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(3)
"""


def _run_limited(code: str, *args: str) -> str:
    """Run `code` (with `sys.argv[2:]` = args) in a child with the file size capped at 16 MB;
    returns the one line of the error it ended with."""
    import subprocess
    import sys

    from tests.reliability.helpers import child_env

    done = subprocess.run(
        [sys.executable, "-c", LIMITED, code, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert done.returncode == 3, f"not refused: {done.returncode} {done.stdout} {done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0]


def _videos(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "episode-0.mp4").write_bytes(b"a real video")
    (folder / "poster.png").write_bytes(b"a real poster")
    return folder


PAGE = """
import sys
from src.analysis.video_page import write_video_page
write_video_page(sys.argv[2:-1], ["x"] * len(sys.argv[2:-1]), sys.argv[-1], title="T")
"""


@pytest.mark.parametrize("name", ["episode-1.mp4", "poster.png"])
def test_a_video_symlinked_to_dev_zero_is_refused_and_nothing_copied(tmp_path: Path, name: str):
    videos = _videos(tmp_path / "results" / "test" / "runs" / "e" / "a" / "run0" / "videos")
    planted = videos / name
    planted.unlink(missing_ok=True)
    planted.symlink_to("/dev/zero")
    page = tmp_path / "results" / "test" / "video_page"

    line = _run_limited(PAGE, str(videos), str(page))

    assert line.startswith("ContainmentError: ") and "symbolic link" in line
    _one_line_naming(line, planted)
    # Nothing copied: no page, no staging folder beside it.
    assert sorted(p.name for p in page.parent.iterdir()) == ["runs"]


def test_a_fifo_as_a_video_is_refused(tmp_path: Path):
    import os

    from src.analysis.video_page import write_video_page

    videos = _videos(tmp_path / "videos")
    fifo = videos / "episode-1.mp4"
    os.mkfifo(fifo)
    with pytest.raises(ContainmentError, match="FIFO") as error:
        write_video_page([videos], ["x"], tmp_path / "page", title="T")
    _one_line_naming(error.value, fifo)
    assert not (tmp_path / "page").exists()


def test_a_video_folder_symlinked_outside_is_refused(tmp_path: Path, outside: Path):
    from src.analysis.video_page import write_video_page

    _videos(outside / "videos")
    link = tmp_path / "videos"
    link.symlink_to(outside / "videos", target_is_directory=True)
    with pytest.raises(ContainmentError) as error:
        write_video_page([link], ["x"], tmp_path / "page", title="T")
    _one_line_naming(error.value, link)
    assert not (tmp_path / "page").exists()


def test_a_video_page_folder_symlinked_outside_is_not_deleted(tmp_path: Path, outside: Path):
    from src.analysis.video_page import write_video_page

    videos = _videos(tmp_path / "videos")
    page = tmp_path / "page"
    page.symlink_to(outside, target_is_directory=True)
    before = folder_state(outside)
    with pytest.raises(ContainmentError) as error:
        write_video_page([videos], ["x"], page, title="T")
    _one_line_naming(error.value, page)
    _intact(outside, before)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".page")] == []


UPLOAD = """
import sys
from src.analysis.wandb_upload import upload_experiment
upload_experiment(sys.argv[2], sync=False)
"""


def test_a_video_symlinked_to_dev_zero_is_not_given_to_wandb(finished: Path):
    planted = finished / "runs" / "hazard_grid" / "ippo" / "run0" / "videos" / "e.mp4"
    planted.symlink_to("/dev/zero")

    line = _run_limited(UPLOAD, str(finished))

    assert line.startswith("ContainmentError: ")
    _one_line_naming(line, planted)
    assert not (finished / "wandb").exists()
