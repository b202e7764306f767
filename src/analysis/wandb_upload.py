"""Log a finished experiment to Weights & Biases: offline runs first, `wandb sync` when allowed.

Training jobs never touch the network. This step (the workflow's last, a local rule) creates
one offline run per (env, algo, run) under `results/{tag}/wandb/`, with the training history
and in the run summary the evaluation table, the experiment's figures and the run's videos,
and for a shield run with a certificate its fields (`certificate/certified`,
`certificate/allowance`, `certificate/episodes`, `certificate/violations`,
`certificate/p_value`, `certificate/delta`, `certificate/horizon`, `certificate/first_seed`,
from the `cert_*` columns of `eval.parquet`; a field without a value is left out).
The history holds one row per episode (`history.json`, at `step = t_end`) and one row per
policy update (`updates.json`: losses, lambda, the shield's counters and calibration, ... at
`step = global_step`), merged in env-step order; an episode that ended on the last env step
before an update shares that update's row. wandb's step is thus the env step, and each metric
also names its own x axis (`define_metric`): `t_end` for the episode keys, `global_step` for
the update keys. Update metrics without a value (None or NaN) are left out of their row.

When upload is enabled and credentials exist the step then runs `wandb sync` on each run and
leaves a marker per synced run; a rerun creates no run whose inputs (`RUN_INPUTS`: config,
episode and update history, evaluation; and videos) did not change and uploads nothing twice.
Without credentials or network it says so in one line and keeps every offline run; a later
call (the rule rerun with `upload_later_command`: `snakemake --cores 1 --configfile <the
experiment's config> ... --forcerun wandb_upload`) uploads the runs not
yet marked.

The sync command is the `wandb` CLI next to the Python interpreter (else `wandb` on the PATH),
or the command line in the environment variable `SAFE_MARL_WANDB_CLI` (split like a shell
does, e.g. `"/opt/wandb/bin/python -m wandb"`), to which `sync <offline run folder>` is added.

Files under `results/{tag}/wandb/`:

- `wandb/offline-run-*/`: the offline runs (wandb's own layout);
- `manifest.json`: run name -> offline run folder and fingerprint of the inputs it logged;
- `synced/<offline run folder>.done`: one marker per uploaded run;
- `upload.done`: what the last call did (the workflow's output), written whether or not
  anything was uploaded, so that the workflow also finishes offline. A JSON object: `status`
  (`synced`, `skipped`, `stopped`, `offline` or `disabled`), `outcome` (the line logged),
  `reason` (why nothing or not everything was uploaded, else null), `created` / `kept`
  (offline runs made / reused by this call), `offline_runs`, `synced_now`, `synced_total`,
  `not_synced`, and `upload_later` (the command that uploads the rest, else null).

The results folder may come from elsewhere, so nothing in it leads outside it
(`src.containment`): the folder is checked for symlinks and non-regular files first (wandb's
own `wandb/wandb/` tree aside); every manifest entry must name an offline run folder
`wandb/<name>` inside `results/{tag}/wandb/` (an absolute or climbing path, or a symlink, is
refused in one line naming the manifest); the files that wandb copies (figures, videos) and
the files of an offline run that `wandb sync` uploads (`files/`, `run-*.wandb`) must be
regular files inside the folder. A run's videos are bounded before any is read (at most
`render.episodes` of them, each at most half the job's `mem_mb`), as on the video page.

An upload killed after wandb created an offline run but before the manifest listed it leaves
that run behind; the next call deletes every offline run under `wandb/wandb/` that the
manifest does not list (one line saying so) before it logs their training runs again, so no
unlisted duplicate stays on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import multiprocessing
import netrc
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from src.algos import metrics as M
from src.analysis.export import updates_table
from src.analysis.video_page import MAX_VIDEOS, run_videos
from src.containment import (
    ContainmentError,
    archive_limit,
    check_results_folder,
    check_tree,
    inside,
    open_regular,
    regular_file,
    remove_tree,
)
from src.core.io import atomic_output, load_from_file, load_from_file_if_exists, save_to_file
from src.core.logging import log
from src.core.wandb import episode_rows, log_history, start_run
from src.records import load_history
from src.runfiles import RunFiles
from src.schemas import CERTIFICATE_COLUMNS, VIOLATING_EPISODES

__all__ = [
    "UPLOAD_LATER",
    "WANDB_CLI_ENV_VAR",
    "credentials_available",
    "find_run_dirs",
    "server_unreachable",
    "upload_experiment",
    "upload_later_command",
    "wandb_command",
]

WANDB_HOST = "api.wandb.ai"
MANIFEST = "manifest.json"
DONE = "upload.done"
SYNCED = "synced"
# Files of one run that its wandb run shows (attributes of RunFiles); a change to any of them,
# or to its videos, makes a new run.
RUN_INPUTS = ("config", "history_json", "updates_json", "eval")
WANDB_CLI_ENV_VAR = "SAFE_MARL_WANDB_CLI"
# Rerunning the rule, not a manual `wandb sync`, leaves the per-run markers that keep a run
# from being uploaded twice.
UPLOAD_LATER = "snakemake --cores 1 --forcerun wandb_upload"


def upload_later_command(
    configfiles: Sequence[str | Path], *, results_dir: str, experiment_tag: str
) -> str:
    """The command that reruns the upload of this experiment and no other: `UPLOAD_LATER`
    with the experiment's config files and its results folder (which `--config` overrides
    may have moved), quoted for a POSIX shell.

    >>> print(upload_later_command(["my exp.yaml"], results_dir="/tmp/r", experiment_tag="a"))
    ... # doctest: +NORMALIZE_WHITESPACE
    snakemake --cores 1 --configfile 'my exp.yaml' --config results_dir=/tmp/r
    experiment_tag=a --forcerun wandb_upload
    """
    if not configfiles:
        raise ValueError("need the config files the experiment was run with")
    words = ["snakemake", "--cores", "1", "--configfile", *map(str, configfiles), "--config"]
    words += [f"results_dir={results_dir}", f"experiment_tag={experiment_tag}"]
    return shlex.join([*words, "--forcerun", "wandb_upload"])


# Prefix of the certificate's fields in the run summary.
CERTIFICATE_PREFIX = "certificate/"
# The x axis (wandb step metric) of the episode rows and of the update rows: both env steps.
EPISODE_STEP = "t_end"
UPDATE_STEP = "global_step"


def find_run_dirs(results_dir: str | Path) -> list[Path]:
    """The run folders (`runs/{env}/{algo}/run{idx}` holding a config.json), sorted."""
    config = RunFiles.NAMES["config"]
    return sorted(path.parent for path in Path(results_dir).glob(f"runs/*/*/run*/{config}"))


def credentials_available() -> str | None:
    """None when wandb credentials exist, else the reason why not (one short phrase)."""
    if os.environ.get("WANDB_API_KEY"):
        return None
    host = os.environ.get("WANDB_BASE_URL", f"https://{WANDB_HOST}").split("://")[-1]
    host = host.split("/")[0].split(":")[0]
    netrc_path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        if netrc.netrc(str(netrc_path)).authenticators(host):
            return None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return f"no credentials (WANDB_API_KEY unset and no {host} entry in {netrc_path})"


def _videos(results: Path, run_dir: Path, limits: tuple[int, int]) -> list[Path]:
    """The run's videos, checked before any is read (`src.analysis.video_page.run_videos`:
    at most `limits[0]` of them, each of at most `limits[1]` bytes); none without a video
    folder."""
    folder = RunFiles(run_dir).videos
    if not os.path.lexists(folder):
        return []
    return run_videos(results, folder.absolute(), max_videos=limits[0], limit=limits[1])


def _fingerprint(results: Path, run_dir: Path, limits: tuple[int, int]) -> str:
    """SHA-256 of the run's inputs (`RUN_INPUTS` and videos, bounded by `limits` as in
    `_videos`), each a regular file inside `results` (a symlink or device is refused, never
    read); `updates.json` counts without its wall-clock metrics (`WALL_CLOCK_KEYS`), which a
    resumed run measures anew."""
    digest = hashlib.sha256()
    files = RunFiles(run_dir)
    paths = [getattr(files, name) for name in RUN_INPUTS]
    paths += _videos(results, run_dir, limits)
    for path in paths:
        digest.update(path.name.encode())
        try:
            handle = open_regular(results, path.absolute())
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path} is missing: run the workflow up to this run first"
            ) from None
        with handle:
            if path == files.updates_json:
                # The update metrics without their clocks: a resumed run logs the same run.
                rows = json.loads(handle.read())
                if isinstance(rows, list):
                    rows = [
                        {k: v for k, v in row.items() if k not in M.WALL_CLOCK_KEYS}
                        if isinstance(row, dict)
                        else row
                        for row in rows
                    ]
                digest.update(json.dumps(rows, sort_keys=True).encode())
                continue
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def _update_rows(updates: Any, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The history rows of a run's per-update metrics (`updates.json`), in update order.

    The records are checked as the export checks them (`src.analysis.export.updates_table`:
    known keys only, numbers); each row holds `update`, `global_step`, `wall_time` and every
    metric with a value (None and NaN are left out, never logged as NaN), plus its `"step"`
    (= `global_step`). Raises `ValueError` when the records are malformed or two updates
    share a `global_step`.
    """
    table = updates_table(updates, config)
    rows: list[dict[str, Any]] = []
    for index, record in enumerate(table.drop_columns(["env", "algo", "run"]).to_pylist()):
        row = {
            key: value
            for key, value in record.items()
            if value is not None and not (isinstance(value, float) and math.isnan(value))
        }
        if rows and row[UPDATE_STEP] <= rows[-1]["step"]:
            raise ValueError(
                f"updates entry {index} has {UPDATE_STEP}={row[UPDATE_STEP]} after "
                f"{rows[-1]['step']}: env steps of updates must increase"
            )
        rows.append({"step": row[UPDATE_STEP], **row})
    return rows


def _flat_lists(evaluation: pd.DataFrame) -> pd.DataFrame:
    """The evaluation table with its list column (`violating_episodes`) as JSON text, one
    list per cell as in the experiment's CSV tables, so that every wandb table cell is a
    scalar."""
    if VIOLATING_EPISODES not in evaluation.columns:
        return evaluation
    lists = [
        None if v is None else json.dumps([int(i) for i in v])
        for v in evaluation[VIOLATING_EPISODES]
    ]
    return evaluation.assign(**{VIOLATING_EPISODES: lists})


def _certificate_summary(evaluation: pd.DataFrame) -> dict[str, Any]:
    """The run summary's certificate fields from a run's evaluation table: `certificate/<key>`
    for every certificate key of `CERTIFICATE_COLUMNS` that has a value (the same on every row
    of the run); empty for runs without a certificate or tables from before the columns."""
    if "certified" not in evaluation.columns:
        return {}
    rows = evaluation[evaluation["certified"].notna()]
    if rows.empty:
        return {}
    first = rows.iloc[0]
    summary: dict[str, Any] = {}
    for column, (key, dtype) in CERTIFICATE_COLUMNS.items():
        value = first.get(column)
        if value is None or pd.isna(value):
            continue
        # Plain Python values: wandb stores them as JSON.
        if pa.types.is_boolean(dtype):
            value = bool(value)
        elif pa.types.is_integer(dtype):
            value = int(value)
        else:
            value = float(value)
        summary[f"{CERTIFICATE_PREFIX}{key}"] = value
    return summary


def _merge_by_env_step(
    episodes: list[dict[str, Any]], updates: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Episode rows and update rows (each with its `"step"`) in one list in env-step order.

    wandb keeps one row per step, so an episode row and an update row at the same env step
    (the episode ended on the rollout's last step) become one row holding both; their keys
    never overlap (else `ValueError`).
    """
    merged: dict[int, dict[str, Any]] = {row["step"]: dict(row) for row in episodes}
    for row in updates:
        same_step = merged.setdefault(row["step"], {})
        shared = (set(same_step) & set(row)) - {"step"}
        if shared:
            raise ValueError(
                f"env step {row['step']}: episode and update rows share keys {sorted(shared)}"
            )
        same_step.update(row)
    return [merged[step] for step in sorted(merged)]


def _define_axes(run: Any, episodes: list[dict[str, Any]], updates: list[dict[str, Any]]) -> None:
    """Name the x axis of every logged key: `t_end` for episode keys, `global_step` for update
    keys (each row carries its own, so wandb never fills one in from another row)."""
    for step_metric, rows in ((EPISODE_STEP, episodes), (UPDATE_STEP, updates)):
        run.define_metric(step_metric)
        for key in sorted({key for row in rows for key in row} - {"step", step_metric}):
            run.define_metric(key, step_metric=step_metric)


def _log_run(
    run_dir: Path, wandb_dir: Path, figures: list[Path], summary: Path, limits: tuple[int, int]
) -> Path | None:
    """Create the offline run of one training run; return its folder (None if disabled).
    `limits`: the most videos of the run and bytes of one video (`_videos`)."""
    import wandb  # here, not at the top: importing wandb takes a second

    results = wandb_dir.parent
    files = RunFiles(run_dir)
    config = load_from_file(files.root, files.config.name)
    # Read and checked before the run exists: a bad input leaves no half-logged run behind.
    episodes = episode_rows(load_history(files.root, files.history_json.name))
    videos = _videos(results, run_dir, limits)
    try:
        updates = _update_rows(load_from_file(files.root, files.updates_json.name), config)
    except ValueError as error:
        raise ValueError(f"{files.updates_json}: {error}") from None
    # Bounded by its footer before a column is decoded (src.core.io.check_parquet_size).
    evaluation = load_from_file(files.root, files.eval.name)
    certificate = _certificate_summary(evaluation)
    # Offline whatever the environment says (uploading is the separate `wandb sync` step),
    # unless the config disables wandb.
    mode = "disabled" if config.get("wandb_mode") == "disabled" else "offline"
    config = {**config, "wandb_dir": str(wandb_dir), "wandb_mode": mode}
    run = start_run(config["algo"], int(config["run_idx"]), config)
    try:
        if run.disabled:
            return None
        _define_axes(run, episodes, updates)
        log_history(run, _merge_by_env_step(episodes, updates))
        # Media and tables go to the summary, so the history holds only the training rows.
        run.summary["eval"] = wandb.Table(dataframe=_flat_lists(evaluation))
        for key, value in certificate.items():
            run.summary[key] = value
        if summary.is_file():
            run.summary["summary"] = wandb.Table(dataframe=pd.read_csv(summary))
        # wandb copies media into the run: only regular files inside the results folder.
        for figure in figures:
            image = wandb.Image(str(regular_file(results, figure.absolute())))
            run.summary[f"figures/{figure.stem}"] = image
        for video in videos:
            path = regular_file(results, video)
            try:
                run.summary[f"videos/{video.stem}"] = wandb.Video(str(path), format="mp4")
            except Exception as error:  # wandb raises several types for media it cannot read
                log(f"{video}: not logged to wandb ({error})", type="wandb")
        return Path(run.dir).parent
    finally:
        run.finish()


def server_unreachable(timeout: float = 5.0) -> str | None:
    """None when the wandb server (WANDB_BASE_URL, default api.wandb.ai) accepts a TCP
    connection within `timeout` seconds, else the reason (one short phrase)."""
    url = urllib.parse.urlsplit(os.environ.get("WANDB_BASE_URL", f"https://{WANDB_HOST}"))
    host = url.hostname or WANDB_HOST
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return f"server {host}:{port} unreachable ({error.strerror or error})"


def wandb_command() -> list[str]:
    """The command line of the wandb CLI that `sync` is appended to.

    `SAFE_MARL_WANDB_CLI` split like a shell does (`shlex.split`) when set and not blank; else
    the `wandb` script next to the Python interpreter, or `wandb` on the PATH. Raises
    `ValueError` naming the variable when its value cannot be split (an unclosed quote).
    """
    value = os.environ.get(WANDB_CLI_ENV_VAR, "")
    if value.strip():
        try:
            return shlex.split(value)
        except ValueError as error:
            raise ValueError(f"{WANDB_CLI_ENV_VAR}={value!r}: {error}") from None
    wandb_cli = Path(sys.executable).with_name("wandb")
    return [str(wandb_cli) if wandb_cli.exists() else "wandb"]


def _sync(run_folder: Path, timeout: float) -> str | None:
    """Run `wandb sync` on one offline run; None on success, else the reason (one line)."""
    command = [*wandb_command(), "sync", str(run_folder)]
    try:
        # A session of its own: on timeout the whole group goes (wandb sync starts a helper).
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            cwd=run_folder.parent,  # wandb's CLI writes its debug log under ./wandb of its cwd
        )
    except OSError as error:
        return f"`wandb sync` could not start: {error}"
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"`wandb sync` timed out after {timeout:g} s"
    output = " ".join(output.split())
    if process.returncode != 0 or "error" in output.lower():
        return f"`wandb sync` failed (exit {process.returncode}): {output[-300:]}"
    return None


def _write_marker(obj: Mapping[str, Any], path: Path) -> None:
    """Write a JSON marker atomically. Not save_to_file: it picks the format by suffix and
    `.done` (the workflow's marker suffix) is none of its formats."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _offline_folder(wandb_dir: Path, name: str, folder: Any) -> Path:
    """The offline run folder a manifest entry names, checked: `wandb/<name>` inside
    `wandb_dir`, no symlink on the way. Raises `ContainmentError` naming the manifest."""
    manifest = wandb_dir / MANIFEST
    parts = folder.split("/") if isinstance(folder, str) else []
    if len(parts) != 2 or parts[0] != "wandb" or not parts[1] or parts[1].startswith("."):
        raise ContainmentError(
            f"{manifest}: run {name!r} names the folder {folder!r}, not an offline run "
            f"folder wandb/<name> inside {wandb_dir}; nothing was deleted or uploaded",
            path=manifest,
        )
    try:
        return inside(wandb_dir, folder)
    except ContainmentError as error:
        raise ContainmentError(
            f"{manifest}: run {name!r} names the folder {folder!r}: {error}", path=manifest
        ) from None


def _load_manifest(wandb_dir: Path) -> dict[str, dict[str, Any]]:
    """The manifest, every entry checked (`_offline_folder`) before anything uses it."""
    manifest = load_from_file_if_exists(wandb_dir, MANIFEST, default={})
    if not isinstance(manifest, Mapping):
        raise ValueError(f"{wandb_dir / MANIFEST}: expected a JSON object, got {manifest!r}")
    for name, entry in manifest.items():
        if not isinstance(entry, Mapping):
            raise ValueError(
                f"{wandb_dir / MANIFEST}: the entry of run {name!r} is not a JSON object"
            )
        if entry.get("folder") is not None:
            _offline_folder(wandb_dir, name, entry["folder"])
    return dict(manifest)


# The name wandb gives an offline run's folder: offline-run-<date>_<time>-<id>.
_OFFLINE_RUN = re.compile(r"^offline-run-[0-9]{8}_[0-9]{6}-[A-Za-z0-9]+$")


def _remove_unlisted(wandb_dir: Path, manifest: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Delete the offline runs under `wandb_dir/wandb/` that the manifest does not list: runs
    that an upload killed before it recorded them had created (never uploaded by this step,
    which uploads listed runs only); their training runs are logged again. Says so in one
    line; returns their folder names."""
    listed = {Path(entry["folder"]).name for entry in manifest.values() if entry.get("folder")}
    tree = wandb_dir / "wandb"
    if not tree.is_dir() or tree.is_symlink():
        return []
    with os.scandir(tree) as entries:
        unlisted = sorted(
            entry.name
            for entry in entries
            if _OFFLINE_RUN.match(entry.name)
            and entry.is_dir(follow_symlinks=False)
            and entry.name not in listed
        )
    for name in unlisted:
        remove_tree(wandb_dir, f"wandb/{name}")
    if unlisted:
        shown = ", ".join(unlisted[:3]) + (
            f" and {len(unlisted) - 3} more" if len(unlisted) > 3 else ""
        )
        log(
            f"wandb: removed {len(unlisted)} offline runs in {tree} that the manifest does not "
            f"list ({shown}), left by an upload that was killed; their runs are logged again",
            type="wandb",
        )
    return unlisted


def _check_offline_run(folder: Path) -> None:
    """What `wandb sync` uploads from an offline run (its `files/` and `run-*.wandb`) must be
    regular files inside it; wandb's own log aliases under `logs/` are never read."""
    check_tree(folder, "files")
    for log_file in folder.glob("run-*.wandb"):
        regular_file(folder, log_file.name)


def _create_runs(
    results: Path,
    run_dirs: list[Path],
    wandb_dir: Path,
    manifest: dict[str, dict[str, Any]],
    workers: int,
    max_videos: int,
) -> tuple[int, int]:
    """Create an offline wandb run for every run folder whose inputs changed since the
    manifest recorded it, in up to `workers` processes; returns (created, kept). A run's
    videos are bounded by `max_videos` and, each, by `archive_limit()` of this process (the
    job's `mem_mb`), in the workers too."""
    limits = (max_videos, archive_limit()[0])
    figures = sorted((results / "figures").glob("*.png"))
    summary = results / "tables" / "summary.csv"
    kept = 0
    pending: dict[str, tuple[Path, str]] = {}
    for run_dir in run_dirs:
        name = "-".join(run_dir.relative_to(results / "runs").parts)
        fingerprint = _fingerprint(results, run_dir, limits)
        entry = manifest.get(name)
        folder = None
        if entry and entry.get("folder"):
            folder = _offline_folder(wandb_dir, name, entry["folder"])
        if (
            entry
            and entry.get("fingerprint") == fingerprint
            and (entry.get("folder") is None or (folder is not None and folder.is_dir()))
        ):
            kept += 1
            continue
        if folder is not None and not entry.get("synced"):
            # A stale offline run (its training changed since) that was never uploaded.
            with contextlib.suppress(OSError):
                remove_tree(wandb_dir, folder)
        pending[name] = (run_dir, fingerprint)

    def record(name: str, folder: Path | None) -> None:
        manifest[name] = {
            "fingerprint": pending[name][1],
            "folder": None if folder is None else str(folder.relative_to(wandb_dir)),
            "synced": False,
        }
        # Saved after each run: a killed upload step keeps what it finished.
        save_to_file(manifest, wandb_dir, MANIFEST)

    if workers == 1 or len(pending) <= 1:
        for name, (run_dir, _) in pending.items():
            record(name, _log_run(run_dir, wandb_dir, figures, summary, limits))
    else:
        # Separate processes (spawned: wandb keeps threads a fork would not carry over).
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(workers, len(pending)), mp_context=context) as pool:
            futures = {
                pool.submit(_log_run, run_dir, wandb_dir, figures, summary, limits): name
                for name, (run_dir, _) in pending.items()
            }
            for future in as_completed(futures):
                record(futures[future], future.result())
    return len(pending), kept


def _sync_runs(
    wandb_dir: Path, manifest: dict[str, dict[str, Any]], *, sync: bool, timeout: float
) -> tuple[str, str | None, int]:
    """Upload the offline runs not yet marked as synced (with `sync` and credentials);
    returns (status, reason it stopped or was skipped, runs synced now)."""
    offline = {name: e for name, e in manifest.items() if e.get("folder")}
    markers = wandb_dir / SYNCED
    synced_now = 0
    reason: str | None = None
    if not offline:
        status = "disabled"
    elif not sync:
        status = "offline"
    elif (reason := credentials_available() or server_unreachable()) is not None:
        status = "skipped"
    else:
        status = "synced"
        markers.mkdir(exist_ok=True)
        for name, entry in sorted(offline.items()):
            marker = markers / f"{Path(entry['folder']).name}.done"
            if not marker.exists():
                folder = _offline_folder(wandb_dir, name, entry["folder"])
                _check_offline_run(folder)
                reason = _sync(folder, timeout)
                if reason is not None:
                    # The first failure is usually the network: stop rather than wait on each run.
                    status = "stopped"
                    break
                _write_marker({"run": name, "folder": entry["folder"]}, marker)
                synced_now += 1
            if not entry.get("synced"):
                # The marker decides: this also repairs a kill between marker and manifest.
                entry["synced"] = True
                save_to_file(manifest, wandb_dir, MANIFEST)
    return status, reason, synced_now


def upload_experiment(
    results_dir: str | Path,
    *,
    sync: bool,
    timeout: float = 300.0,
    workers: int = 1,
    upload_later: str = UPLOAD_LATER,
    max_videos: int = MAX_VIDEOS,
) -> None:
    """Log every run of the experiment in `results_dir` (`results/{tag}`) to wandb.

    Creates (or keeps, when its inputs are unchanged) one offline run per run folder, in up
    to `workers` processes at once (one wandb run per process at a time), then
    with `sync` uploads each run not yet marked as synced, if credentials exist. Without
    credentials or network it logs one line saying so and keeps the offline runs; a later
    call uploads them. Writes `results_dir/wandb/upload.done` last, in every case (see the
    module docstring for its fields). Raises `FileNotFoundError` when `results_dir` holds no
    finished run or a run lacks one of its inputs, and `ValueError` when `SAFE_MARL_WANDB_CLI`
    cannot be split into a command line. `upload_later` is the command that the outcome
    names for uploading the rest (the workflow passes `upload_later_command` of its config
    files, so that the line pasted back reruns this experiment). `max_videos`: the most
    videos of one run (the workflow passes `render.episodes`); a run with more, or with a
    video above `archive_limit()`, is refused before any video is read or copied.
    """
    if not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool, got {sync!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if sync:
        wandb_command()  # a bad SAFE_MARL_WANDB_CLI fails before any work, not mid-upload
    results = Path(results_dir)
    # Before anything is read, deleted or copied: nothing in the folder leads outside it.
    check_results_folder(results)
    run_dirs = find_run_dirs(results)
    if not run_dirs:
        raise FileNotFoundError(f"{results} holds no run (runs/*/*/run*/config.json)")
    wandb_dir = results / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest(wandb_dir)
    _remove_unlisted(wandb_dir, manifest)

    created, kept = _create_runs(results, run_dirs, wandb_dir, manifest, workers, max_videos)
    status, reason, synced_now = _sync_runs(wandb_dir, manifest, sync=sync, timeout=timeout)
    offline = {name: e for name, e in manifest.items() if e.get("folder")}
    markers = wandb_dir / SYNCED
    synced_total = sum(
        (markers / f"{Path(entry['folder']).name}.done").is_file() for entry in offline.values()
    )
    not_synced = len(offline) - synced_total
    kept_in = f"{not_synced} offline runs kept in {wandb_dir}"
    outcome = {
        "disabled": "wandb disabled by the config (use_wandb false or mode disabled): no runs",
        "offline": (
            f"wandb: {len(offline)} offline runs in {wandb_dir}, {synced_total} synced (upload "
            f"off; to upload set wandb: {{upload: true}} and run {upload_later})"
        ),
        "skipped": (
            f"wandb upload skipped: {reason}; {kept_in} ({synced_total} synced before); "
            f"upload later with {upload_later}"
        ),
        "stopped": (
            f"wandb upload stopped: {reason}; synced {synced_now}, {kept_in}; "
            f"upload later with {upload_later}"
        ),
        "synced": (
            f"wandb: synced {synced_now} runs now; {synced_total} of {len(offline)} offline "
            f"runs in {wandb_dir} are synced"
        ),
    }[status]
    log(outcome, type="wandb")
    _write_marker(
        {
            "status": status,
            "outcome": outcome,
            "reason": reason,
            "created": created,
            "kept": kept,
            "offline_runs": len(offline),
            "synced_now": synced_now,
            "synced_total": synced_total,
            "not_synced": not_synced,
            "upload_later": upload_later if not_synced else None,
        },
        wandb_dir / DONE,
    )
