"""upload_experiment: offline runs, one history row per episode, sync markers, no duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from src.analysis import wandb_upload
from src.analysis.wandb_upload import credentials_available, upload_experiment, wandb_command
from src.config.workflow import resolve_run_config, validate_workflow_config
from src.core.io import save_to_file
from src.records import EpisodeLog
from tests.wandb_file import find_run_files, read_history

RUNS = (("hazard_grid", "ippo", 0), ("hazard_grid", "shield", 0))


def _workflow_config() -> dict:
    return validate_workflow_config(
        {
            "experiment_tag": "wb",
            "envs": ["hazard_grid"],
            "algos": ["ippo", "shield"],
            "num_runs": 1,
            "base": {"num_envs": 2, "timesteps": 64, "rollouts": 16, "mini_batches": 2},
            "env_params": {"hazard_grid": {"n_agents": 2, "max_steps": 20}},
        }
    )


def _history(env: str, algo: str, run: int, episodes: int) -> list[EpisodeLog]:
    records = []
    for episode in range(episodes):
        violated = episode % 3 == 0
        records.append(
            EpisodeLog(
                env=env,
                algo=algo,
                run=run,
                episode=episode,
                env_copy=episode % 2,
                t_start=10 * episode,
                t_end=10 * episode + 9,
                length=9,
                team_return=float(episode),
                agent_returns=(episode / 2, episode / 2),
                cost=1.0 if violated else 0.0,
                violated=violated,
                first_violation_step=3 if violated else -1,
                truncated_by_cap=False,
                shield_interventions=episode if algo == "shield" else 0,
            )
        )
    return records


def _write_mp4(path: Path) -> None:
    from moviepy import ImageSequenceClip

    frames = [np.full((32, 32, 3), 40 * i, dtype=np.uint8) for i in range(4)]
    ImageSequenceClip(frames, fps=4).write_videofile(str(path), logger=None, audio=False)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A finished experiment: two runs with config, history, eval table and a video."""
    workflow_config = _workflow_config()
    root = tmp_path / "wb"
    for index, (env, algo, run) in enumerate(RUNS):
        run_dir = root / "runs" / env / algo / f"run{run}"
        config = resolve_run_config(workflow_config, env, algo, run).to_dict()
        save_to_file(config, run_dir, "config.json")
        save_to_file(_history(env, algo, run, episodes=5 + index), run_dir, "history.json")
        eval_frame = pd.DataFrame(
            {"env": [env], "algo": [algo], "run": [run], "horizon": [10], "p_violation": [0.1]}
        )
        save_to_file(eval_frame, run_dir, "eval.parquet")
        (run_dir / "videos").mkdir()
        _write_mp4(run_dir / "videos" / f"{env}-{algo}-run{run}-episode-0.mp4")
    return root


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "missing.netrc"))


def _outcome(results: Path) -> dict:
    return json.loads((results / "wandb" / "upload.done").read_text())


def _offline_runs(results: Path) -> list[Path]:
    return sorted((results / "wandb" / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("workers", [1, 2])
def test_offline_runs_hold_one_history_row_per_episode(
    results: Path, no_credentials: None, workers: int
):
    upload_experiment(results, sync=False, workers=workers)

    files = find_run_files(results / "wandb")
    assert len(files) == len(RUNS)
    episodes_by_run = sorted(5 + index for index in range(len(RUNS)))
    rows_by_run = sorted(len(read_history(path)) for path in files)
    assert rows_by_run == episodes_by_run
    for path in files:
        rows = read_history(path)
        steps = [row["_step"] for row in rows]
        assert steps == [10 * episode + 9 for episode in range(len(rows))]
        assert all("team_return" in row for row in rows)
    outcome = _outcome(results)
    assert outcome["created"] == len(RUNS)
    assert "\n" not in outcome["outcome"] and "upload off" in outcome["outcome"]
    assert outcome["status"] == "offline" and outcome["not_synced"] == len(RUNS)
    assert not (results / "wandb" / "synced").exists()


def test_rerun_with_unchanged_inputs_creates_no_run(results: Path, no_credentials: None):
    upload_experiment(results, sync=False)
    before = _offline_runs(results)
    upload_experiment(results, sync=False)
    assert _offline_runs(results) == before
    assert _outcome(results)["created"] == 0
    assert _outcome(results)["kept"] == len(RUNS)


def test_changed_history_replaces_only_that_unsynced_run(results: Path, no_credentials: None):
    upload_experiment(results, sync=False)
    before = set(_offline_runs(results))
    env, algo, run = RUNS[0]
    run_dir = results / "runs" / env / algo / f"run{run}"
    save_to_file(_history(env, algo, run, episodes=2), run_dir, "history.json")

    upload_experiment(results, sync=False)

    after = set(_offline_runs(results))
    assert len(after) == len(RUNS)
    assert len(after - before) == 1 and len(before - after) == 1
    assert _outcome(results)["created"] == 1


def test_unreachable_server_keeps_offline_runs_in_one_line(
    results: Path, monkeypatch: pytest.MonkeyPatch
):
    # Credentials exist but nothing listens on the server's port.
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    upload_experiment(results, sync=True, timeout=20)

    outcome = _outcome(results)["outcome"]
    assert "\n" not in outcome
    assert outcome.startswith("wandb upload skipped: server 127.0.0.1:9 unreachable")
    assert len(_offline_runs(results)) == len(RUNS)
    assert not list((results / "wandb" / "synced").glob("*.done"))
    manifest = json.loads((results / "wandb" / "manifest.json").read_text())
    assert not any(entry["synced"] for entry in manifest.values())
    for path in find_run_files(results / "wandb"):
        assert read_history(path)  # the offline run is intact

    upload_experiment(results, sync=True, timeout=20)
    assert len(_offline_runs(results)) == len(RUNS)
    assert _outcome(results)["created"] == 0


def test_no_credentials_skips_sync_in_one_line(results: Path, no_credentials: None):
    assert credentials_available() is not None
    upload_experiment(results, sync=True)
    done = _outcome(results)
    outcome = done["outcome"]
    assert outcome.startswith("wandb upload skipped: no credentials")
    assert "\n" not in outcome
    assert len(_offline_runs(results)) == len(RUNS)
    # The marker says that nothing was uploaded, why, and how to upload later.
    assert done["status"] == "skipped" and done["reason"].startswith("no credentials")
    assert done["synced_now"] == done["synced_total"] == 0
    assert done["not_synced"] == done["offline_runs"] == len(RUNS)
    assert done["upload_later"] == "snakemake --cores 1 --forcerun wandb_upload"
    assert f"{len(RUNS)} offline runs kept" in outcome and done["upload_later"] in outcome


def test_synced_runs_are_marked_and_never_uploaded_twice(
    results: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    synced: list[Path] = []

    def fake_sync(run_folder: Path, timeout: float) -> None:
        synced.append(run_folder)

    monkeypatch.setattr(wandb_upload, "_sync", fake_sync)
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda: None)
    upload_experiment(results, sync=True)
    assert sorted(synced) == _offline_runs(results)
    markers = sorted((results / "wandb" / "synced").glob("*.done"))
    assert [m.name for m in markers] == sorted(f"{p.name}.done" for p in synced)

    done = _outcome(results)
    assert done["status"] == "synced" and done["reason"] is None
    assert done["synced_now"] == done["synced_total"] == len(RUNS)
    assert done["not_synced"] == 0 and done["upload_later"] is None

    upload_experiment(results, sync=True)
    assert len(synced) == len(RUNS)
    assert _outcome(results)["synced_now"] == 0
    assert _outcome(results)["synced_total"] == len(RUNS)


def test_marker_without_manifest_entry_counts_as_synced(
    results: Path, monkeypatch: pytest.MonkeyPatch
):
    # As after a kill between writing a run's marker and saving the manifest.
    upload_experiment(results, sync=False)
    first = _offline_runs(results)[0]
    (results / "wandb" / "synced").mkdir()
    (results / "wandb" / "synced" / f"{first.name}.done").write_text("{}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    synced: list[Path] = []
    monkeypatch.setattr(wandb_upload, "_sync", lambda folder, timeout: synced.append(folder))
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda: None)

    upload_experiment(results, sync=True)

    assert first not in synced and len(synced) == len(RUNS) - 1
    manifest = json.loads((results / "wandb" / "manifest.json").read_text())
    assert all(entry["synced"] for entry in manifest.values())
    assert _outcome(results)["synced_now"] == len(RUNS) - 1


def test_failed_sync_stops_with_one_line_and_marks_nothing(
    results: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # A `wandb` command that fails like a sync whose server went away after the probe.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "wandb"
    fake.write_text("#!/bin/sh\necho 'wandb: ERROR network error' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda: None)
    monkeypatch.setenv("SAFE_MARL_WANDB_CLI", str(fake))
    upload_experiment(results, sync=True, timeout=20)

    done = _outcome(results)
    outcome = done["outcome"]
    assert outcome.startswith("wandb upload stopped: `wandb sync` failed (exit 1)")
    assert "\n" not in outcome
    assert not list((results / "wandb" / "synced").glob("*.done"))
    assert len(_offline_runs(results)) == len(RUNS)
    assert done["status"] == "stopped" and done["reason"] in outcome
    assert done["synced_now"] == 0 and done["not_synced"] == len(RUNS)
    assert done["upload_later"] == "snakemake --cores 1 --forcerun wandb_upload"
    assert done["upload_later"] in outcome


def test_wandb_command_default_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv(wandb_upload.WANDB_CLI_ENV_VAR, raising=False)
    (default,) = wandb_command()
    assert Path(default).name == "wandb"
    monkeypatch.setenv(wandb_upload.WANDB_CLI_ENV_VAR, "  ")  # blank counts as unset
    assert wandb_command() == [default]
    monkeypatch.setenv(wandb_upload.WANDB_CLI_ENV_VAR, "'/opt/my env/python' -m wandb")
    assert wandb_command() == ["/opt/my env/python", "-m", "wandb"]


def test_override_with_arguments_runs_that_command(
    results: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # A script that is not executable, run through `sh`: only a split command line works.
    calls = tmp_path / "calls.txt"
    script = tmp_path / "fake_wandb.sh"
    script.write_text(f'echo "$@" >> "{calls}"\n')
    monkeypatch.setenv("SAFE_MARL_WANDB_CLI", f"sh {script}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda: None)

    upload_experiment(results, sync=True, timeout=20)

    assert sorted(calls.read_text().splitlines()) == [f"sync {p}" for p in _offline_runs(results)]
    assert _outcome(results)["synced_now"] == len(RUNS)


def test_unsplittable_override_is_refused_before_any_work(
    results: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SAFE_MARL_WANDB_CLI", "'/opt/wandb")
    with pytest.raises(ValueError, match=r"SAFE_MARL_WANDB_CLI=.*quotation"):
        upload_experiment(results, sync=True)
    assert not (results / "wandb").exists()


def test_netrc_entry_counts_as_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    netrc_file = tmp_path / ".netrc"
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    netrc_file.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_file))
    assert credentials_available() is None


@pytest.mark.parametrize("change", [{"use_wandb": False}, {"wandb_mode": "disabled"}])
def test_disabled_wandb_creates_no_run(change: dict, results: Path, no_credentials: None):
    for config_path in results.glob("runs/*/*/run*/config.json"):
        config = json.loads(config_path.read_text())
        config.update(change)
        config_path.write_text(json.dumps(config))
    upload_experiment(results, sync=True)
    assert not _offline_runs(results)
    assert _outcome(results)["outcome"].startswith("wandb disabled by the config")


def test_bad_arguments_are_refused(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="holds no run"):
        upload_experiment(tmp_path, sync=False)
    with pytest.raises(TypeError, match="sync must be a bool"):
        upload_experiment(tmp_path, sync="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        upload_experiment(tmp_path, sync=False, timeout=0)
    with pytest.raises(ValueError, match="workers"):
        upload_experiment(tmp_path, sync=False, workers=0)


def test_missing_run_input_is_named(results: Path, no_credentials: None):
    env, algo, run = RUNS[1]
    (results / "runs" / env / algo / f"run{run}" / "eval.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"eval\.parquet is missing"):
        upload_experiment(results, sync=False)
