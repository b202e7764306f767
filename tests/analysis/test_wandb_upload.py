"""upload_experiment: offline runs whose history holds the episodes and the per-update metrics
in env-step order, sync markers, no duplicates."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from src.analysis import wandb_upload
from src.analysis.wandb_upload import (
    credentials_available,
    upload_experiment,
    upload_later_command,
    wandb_command,
)
from src.config.workflow import resolve_run_config, validate_workflow_config
from src.core.io import save_to_file
from src.records import EpisodeLog
from src.schemas import certificate_columns
from tests.analysis.synthetic import make_certificate
from tests.wandb_file import find_run_files, read_history, read_records, read_summary

REPO = Path(__file__).resolve().parents[2]
RUNS = (("hazard_grid", "ippo_lag", 0), ("hazard_grid", "shield", 0))
# Env steps of the four policy updates of each run; episode 2 ends at env step 29 (t_end), on
# the last step before the second update.
UPDATE_STEPS = (12, 29, 44, 70)
LAMBDAS = (0.0, 0.125, 0.375, 0.75)
INTERVENTIONS = (0.0, 0.0, 3.0, 7.0)
# wandb's own keys of every row; `_step` is compared, the clock keys are not.
WANDB_CLOCK_KEYS = ("_timestamp", "_runtime")


def _workflow_config() -> dict:
    return validate_workflow_config(
        {
            "experiment_tag": "wb",
            "envs": ["hazard_grid"],
            "algos": ["ippo_lag", "shield"],
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


def _updates(algo: str, lambdas: tuple[float, ...] = LAMBDAS) -> list[dict]:
    """updates.json of a run: losses for all, lambda for ippo_lag, counters for the shield; a
    metric without a value (None, NaN) in some updates, as in a real run."""
    updates = []
    for update, step in enumerate(UPDATE_STEPS):
        row = {
            "update": update,
            "global_step": step,
            "wall_time": 0.5 * (update + 1),
            "charts/global_step": step,
            "losses/policy": -0.25 * (update + 1),
            # Undefined on the first update (constant returns), a null in updates.json.
            "losses/explained_variance": None if update == 0 else 0.5,
            # Diverged on the last update.
            "safety/episode_cost": float("nan") if update == 3 else 0.25 * update,
        }
        if algo == "ippo_lag":
            row["safety/lambda"] = lambdas[update]
        if algo == "shield":
            row["shield/armed"] = float(update >= 2)
            row["shield/interventions"] = INTERVENTIONS[update]
            row["shield/calibration"] = None if update < 2 else 1.5
        updates.append(row)
    return updates


def _expected_episode_row(episode: EpisodeLog) -> dict:
    return {
        "episode": episode.episode,
        "env_copy": episode.env_copy,
        "t_start": episode.t_start,
        "t_end": episode.t_end,
        "length": episode.length,
        "team_return": episode.team_return,
        "cost": episode.cost,
        "violated": int(episode.violated),
        "first_violation_step": episode.first_violation_step,
        "truncated_by_cap": int(episode.truncated_by_cap),
        "shield_interventions": episode.shield_interventions,
        "agent_returns/0": episode.agent_returns[0],
        "agent_returns/1": episode.agent_returns[1],
    }


def _expected_history(episodes: list[EpisodeLog], updates: list[dict]) -> list[dict]:
    """What the offline run must hold: a row per episode at its t_end and per update at its
    global_step (one row where both fall on one env step), metrics without value left out."""
    rows: dict[int, dict] = {}
    for episode in episodes:
        rows[episode.t_end] = {"_step": episode.t_end, **_expected_episode_row(episode)}
    for update in updates:
        row = rows.setdefault(update["global_step"], {"_step": update["global_step"]})
        for key, value in update.items():
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                row[key] = value
    return [rows[step] for step in sorted(rows)]


def _logged(path: Path) -> list[dict]:
    """The history rows of an offline run file without wandb's clock keys."""
    return [
        {key: value for key, value in row.items() if key not in WANDB_CLOCK_KEYS}
        for row in read_history(path)
    ]


def _run_dir(results: Path, env: str, algo: str, run: int) -> Path:
    return results / "runs" / env / algo / f"run{run}"


def _run_file(results: Path, env: str, algo: str, run: int) -> Path:
    """The `.wandb` file of the offline run that the manifest names for (env, algo, run)."""
    manifest = json.loads((results / "wandb" / "manifest.json").read_text())
    folder = results / "wandb" / manifest[f"{env}-{algo}-run{run}"]["folder"]
    (path,) = folder.glob("run-*.wandb")
    return path


def _write_mp4(path: Path) -> None:
    from moviepy import ImageSequenceClip

    frames = [np.full((32, 32, 3), 40 * i, dtype=np.uint8) for i in range(4)]
    ImageSequenceClip(frames, fps=4).write_videofile(str(path), logger=None, audio=False)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A finished experiment: two runs with config, history, updates, eval table and a video."""
    workflow_config = _workflow_config()
    root = tmp_path / "wb"
    for index, (env, algo, run) in enumerate(RUNS):
        run_dir = root / "runs" / env / algo / f"run{run}"
        config = resolve_run_config(workflow_config, env, algo, run).to_dict()
        save_to_file(config, run_dir, "config.json")
        save_to_file(_history(env, algo, run, episodes=5 + index), run_dir, "history.json")
        save_to_file(_updates(algo), run_dir, "updates.json")
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
def test_offline_runs_hold_one_history_row_per_episode_and_per_update(
    results: Path, no_credentials: None, workers: int
):
    upload_experiment(results, sync=False, workers=workers)

    assert len(find_run_files(results / "wandb")) == len(RUNS)
    for index, (env, algo, run) in enumerate(RUNS):
        episodes = 5 + index
        rows = _logged(_run_file(results, env, algo, run))
        # One row per env step: the episode ending at 29 shares the update's row there.
        assert len(rows) == episodes + len(UPDATE_STEPS) - 1
        episode_steps = [row["_step"] for row in rows if "team_return" in row]
        assert episode_steps == [10 * episode + 9 for episode in range(episodes)]
        update_steps = [row["_step"] for row in rows if "global_step" in row]
        assert update_steps == list(UPDATE_STEPS)
    outcome = _outcome(results)
    assert outcome["created"] == len(RUNS)
    assert "\n" not in outcome["outcome"] and "upload off" in outcome["outcome"]
    assert outcome["status"] == "offline" and outcome["not_synced"] == len(RUNS)
    assert not (results / "wandb" / "synced").exists()


def test_history_merges_episodes_and_updates_in_env_step_order(results: Path, no_credentials: None):
    upload_experiment(results, sync=False)

    for index, (env, algo, run) in enumerate(RUNS):
        rows = _logged(_run_file(results, env, algo, run))
        expected = _expected_history(_history(env, algo, run, 5 + index), _updates(algo))
        # Every episode row unchanged, every update row with its env step, one row at 29.
        assert rows == expected
        steps = [row["_step"] for row in rows]
        assert steps == sorted(set(steps))
        for row in rows:
            if "global_step" in row:
                assert row["global_step"] == row["charts/global_step"] == row["_step"]
            if "team_return" in row:
                assert row["t_end"] == row["_step"]


def test_lambda_and_shield_interventions_are_logged_at_their_env_step(
    results: Path, no_credentials: None
):
    upload_experiment(results, sync=False)

    lag_rows = _logged(_run_file(results, "hazard_grid", "ippo_lag", 0))
    lambdas = [(row["global_step"], row["safety/lambda"]) for row in lag_rows if "update" in row]
    assert lambdas == list(zip(UPDATE_STEPS, LAMBDAS, strict=True))
    assert not any("shield/interventions" in row for row in lag_rows)

    shield_rows = _logged(_run_file(results, "hazard_grid", "shield", 0))
    interventions = [
        (row["global_step"], row["shield/interventions"]) for row in shield_rows if "update" in row
    ]
    assert interventions == list(zip(UPDATE_STEPS, INTERVENTIONS, strict=True))
    assert not any("safety/lambda" in row for row in shield_rows)
    # A metric without a value is not in its row (None or NaN), never logged as NaN.
    updates = {row["update"]: row for row in shield_rows if "update" in row}
    assert "losses/explained_variance" not in updates[0]
    assert updates[1]["losses/explained_variance"] == 0.5
    assert "shield/calibration" not in updates[0] and "shield/calibration" not in updates[1]
    assert updates[2]["shield/calibration"] == 1.5
    assert "safety/episode_cost" not in updates[3]
    assert updates[2]["safety/episode_cost"] == 0.5


def test_every_metric_names_its_env_step_axis(results: Path, no_credentials: None):
    upload_experiment(results, sync=False)

    path = _run_file(results, "hazard_grid", "shield", 0)
    axes = {
        record.metric.name: record.metric.step_metric
        for record in read_records(path)
        if record.WhichOneof("record_type") == "metric"
    }
    update_keys = {key for update in _updates("shield") for key in update} - {"global_step"}
    episode_keys = set(_expected_episode_row(_history("hazard_grid", "shield", 0, 1)[0]))
    assert {key: axes[key] for key in update_keys} == dict.fromkeys(update_keys, "global_step")
    assert {key: axes[key] for key in episode_keys - {"t_end"}} == dict.fromkeys(
        episode_keys - {"t_end"}, "t_end"
    )
    assert axes["global_step"] == axes["t_end"] == ""


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


def test_changed_updates_replace_only_that_unsynced_run(results: Path, no_credentials: None):
    upload_experiment(results, sync=False)
    before = set(_offline_runs(results))
    env, algo, run = RUNS[0]
    changed = (0.0, 0.5, 1.0, 2.0)
    save_to_file(_updates(algo, lambdas=changed), _run_dir(results, env, algo, run), "updates.json")

    upload_experiment(results, sync=False)

    after = set(_offline_runs(results))
    assert len(after) == len(RUNS)
    assert len(after - before) == 1 and len(before - after) == 1
    assert _outcome(results)["created"] == 1 and _outcome(results)["kept"] == len(RUNS) - 1
    rows = _logged(_run_file(results, env, algo, run))
    assert [row["safety/lambda"] for row in rows if "update" in row] == list(changed)


def test_updates_that_differ_only_in_wall_clock_keep_the_run(results: Path, no_credentials: None):
    """A resumed run measures its clocks anew; the run it logs is the same one."""
    upload_experiment(results, sync=False)
    before = set(_offline_runs(results))
    env, algo, run = RUNS[0]
    updates = _updates(algo)
    for row in updates:
        row["wall_time"] = float(row.get("wall_time") or 0.0) + 1000.0
        row["charts/steps_per_second"] = 1.0
    save_to_file(updates, _run_dir(results, env, algo, run), "updates.json")

    upload_experiment(results, sync=False)

    assert set(_offline_runs(results)) == before
    assert _outcome(results)["created"] == 0


def test_the_rule_lists_every_run_input():
    # What the manifest's fingerprint covers must also make Snakemake rerun the rule.
    rule = (REPO / "workflow" / "rules" / "wandb.smk").read_text()
    inputs = rule.split("input:", 1)[1].split("output:", 1)[0]
    assert "updates_json" in wandb_upload.RUN_INPUTS
    for name in (*wandb_upload.RUN_INPUTS, "videos"):
        assert f'all_runs(RUN["{name}"])' in inputs, name


def test_bad_updates_are_refused_naming_the_file_before_any_run(
    results: Path, no_credentials: None
):
    env, algo, run = RUNS[0]
    updates = _updates(algo)
    updates[1]["safety/lamda"] = 0.5  # not a metric of src.algos.metrics
    save_to_file(updates, _run_dir(results, env, algo, run), "updates.json")
    with pytest.raises(ValueError, match=r"updates\.json: updates entry 1 .*safety/lamda"):
        upload_experiment(results, sync=False)
    assert not _offline_runs(results)


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


@pytest.mark.parametrize("name", ["eval.parquet", "updates.json"])
def test_missing_run_input_is_named(name: str, results: Path, no_credentials: None):
    env, algo, run = RUNS[1]
    (_run_dir(results, env, algo, run) / name).unlink()
    with pytest.raises(FileNotFoundError, match=f"{re.escape(name)} is missing"):
        upload_experiment(results, sync=False)


def _with_certificate(results: Path, certificate: dict) -> None:
    """Give the shield run's eval.parquet the columns of `certificate` on every row."""
    env, algo, run = RUNS[1]
    run_dir = _run_dir(results, env, algo, run)
    frame = pd.read_parquet(run_dir / "eval.parquet")
    for name, value in certificate_columns(certificate).items():
        frame[name] = pd.Series([value] * len(frame), dtype=object)
    save_to_file(frame, run_dir, "eval.parquet")


def test_shield_run_summary_carries_its_certificate(results: Path, no_credentials: None):
    _with_certificate(results, make_certificate(0, certified=True, delta=0.1))
    upload_experiment(results, sync=False)

    summary = read_summary(_run_file(results, *RUNS[1]))
    certificate = {k: v for k, v in summary.items() if k.startswith("certificate/")}
    assert certificate == {
        "certificate/certified": True,
        "certificate/allowance": 0.02,
        "certificate/episodes": 200,
        "certificate/violations": 8,
        "certificate/p_value": 0.0001,
        "certificate/delta": 0.1,
        "certificate/horizon": 100,
        "certificate/first_seed": 2_000_000,
    }
    assert "eval" in summary  # the evaluation table is still there
    # A run without a certificate has no certificate fields.
    other = read_summary(_run_file(results, *RUNS[0]))
    assert "eval" in other and not any(k.startswith("certificate/") for k in other)


def test_untested_certificate_leaves_out_what_was_not_measured(results: Path, no_credentials: None):
    _with_certificate(results, make_certificate(0, certified=False, episodes=0))
    upload_experiment(results, sync=False)

    summary = read_summary(_run_file(results, *RUNS[1]))
    assert summary["certificate/certified"] is False
    assert summary["certificate/episodes"] == 0
    # No violation count and no p-value: never logged as -1 or NaN.
    assert "certificate/violations" not in summary and "certificate/p_value" not in summary


def test_the_upload_later_line_names_the_experiment(results: Path, no_credentials: None) -> None:
    """The command written for uploading later is the one given, with this experiment's config
    file and results folder: pasted back it schedules this experiment, not the default one."""
    later = upload_later_command(
        ["my experiments/a.yaml"], results_dir=str(results.parent), experiment_tag=results.name
    )
    upload_experiment(results, sync=True, upload_later=later)
    done = _outcome(results)
    assert done["upload_later"] == later and later in done["outcome"]
    assert shlex.split(later) == [
        "snakemake",
        "--cores",
        "1",
        "--configfile",
        "my experiments/a.yaml",
        "--config",
        f"results_dir={results.parent}",
        f"experiment_tag={results.name}",
        "--forcerun",
        "wandb_upload",
    ]
    with pytest.raises(ValueError, match="config files"):
        upload_later_command([], results_dir="r", experiment_tag="t")
