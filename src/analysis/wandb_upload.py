"""Log a finished experiment to Weights & Biases: offline runs first, `wandb sync` when allowed.

Training jobs never touch the network. This step (the workflow's last, a local rule) creates
one offline run per (env, algo, run) under `results/{tag}/wandb/`, with the training history
(one row per episode, `log_history`), and in the run summary the evaluation table, the
experiment's figures and the run's videos. When upload is enabled and credentials exist it
then runs `wandb sync` on each run and leaves a marker per synced run; a rerun creates no run
whose inputs did not change and uploads nothing twice. Without credentials or network it says
so in one line and keeps every offline run, so `wandb sync` can finish the job later.

Files under `results/{tag}/wandb/`:

- `wandb/offline-run-*/`: the offline runs (wandb's own layout);
- `manifest.json`: run name -> offline run folder and fingerprint of the inputs it logged;
- `synced/<offline run folder>.done`: one marker per uploaded run;
- `upload.done`: what the last call did (the workflow's output).
"""

from __future__ import annotations

import hashlib
import json
import netrc
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from src.core.io import load_from_file, load_from_file_if_exists, save_to_file
from src.core.logging import log
from src.core.wandb import load_history, log_history, start_run

__all__ = [
    "credentials_available",
    "find_run_dirs",
    "server_unreachable",
    "upload_experiment",
]

WANDB_HOST = "api.wandb.ai"
MANIFEST = "manifest.json"
DONE = "upload.done"
SYNCED = "synced"
# Inputs of one run that its wandb run shows; a change to any of them makes a new run.
RUN_INPUTS = ("config.json", "history.json", "eval.parquet")


def find_run_dirs(results_dir: str | Path) -> list[Path]:
    """The run folders (`runs/{env}/{algo}/run{idx}` holding a config.json), sorted."""
    return sorted(path.parent for path in Path(results_dir).glob("runs/*/*/run*/config.json"))


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


def _fingerprint(run_dir: Path) -> str:
    digest = hashlib.sha256()
    paths = [run_dir / name for name in RUN_INPUTS]
    paths += sorted((run_dir / "videos").glob("*.mp4"))
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run the workflow up to this run first")
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _log_run(run_dir: Path, wandb_dir: Path, figures: list[Path], summary: Path) -> Path | None:
    """Create the offline run of one training run; return its folder (None if disabled)."""
    import wandb  # here, not at the top: importing wandb takes a second

    config = load_from_file(run_dir, "config.json")
    # Offline whatever the environment says (uploading is the separate `wandb sync` step),
    # unless the config disables wandb.
    mode = "disabled" if config.get("wandb_mode") == "disabled" else "offline"
    config = {**config, "wandb_dir": str(wandb_dir), "wandb_mode": mode}
    run = start_run(config["algo"], int(config["run_idx"]), config)
    try:
        if run.disabled:
            return None
        log_history(run, load_history(run_dir, "history.json"))
        # Media and tables go to the summary, so the history keeps one row per episode.
        run.summary["eval"] = wandb.Table(dataframe=pd.read_parquet(run_dir / "eval.parquet"))
        if summary.is_file():
            run.summary["summary"] = wandb.Table(dataframe=pd.read_csv(summary))
        for figure in figures:
            run.summary[f"figures/{figure.stem}"] = wandb.Image(str(figure))
        for video in sorted((run_dir / "videos").glob("*.mp4")):
            try:
                run.summary[f"videos/{video.stem}"] = wandb.Video(str(video), format="mp4")
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


def _sync(run_folder: Path, timeout: float) -> str | None:
    """Run `wandb sync` on one offline run; None on success, else the reason (one line)."""
    wandb_cli = Path(sys.executable).with_name("wandb")
    command = [str(wandb_cli) if wandb_cli.exists() else "wandb", "sync", str(run_folder)]
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
    """Write a JSON marker atomically (save_to_file picks formats by suffix; `.done` is ours)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _load_manifest(wandb_dir: Path) -> dict[str, dict[str, Any]]:
    manifest = load_from_file_if_exists(wandb_dir, MANIFEST, default={})
    if not isinstance(manifest, Mapping):
        raise ValueError(f"{wandb_dir / MANIFEST}: expected a JSON object, got {manifest!r}")
    return dict(manifest)


def upload_experiment(results_dir: str | Path, *, sync: bool, timeout: float = 300.0) -> None:
    """Log every run of the experiment in `results_dir` (`results/{tag}`) to wandb.

    Creates (or keeps, when its inputs are unchanged) one offline run per run folder, then
    with `sync` uploads each run not yet marked as synced, if credentials exist. Without
    credentials or network it logs one line saying so and keeps the offline runs. Writes
    `results_dir/wandb/upload.done` last. Raises `FileNotFoundError` when `results_dir`
    holds no finished run or a run lacks one of its inputs.
    """
    if not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool, got {sync!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    results = Path(results_dir)
    run_dirs = find_run_dirs(results)
    if not run_dirs:
        raise FileNotFoundError(f"{results} holds no run (runs/*/*/run*/config.json)")
    wandb_dir = results / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    figures = sorted((results / "figures").glob("*.png"))
    summary = results / "tables" / "summary.csv"
    manifest = _load_manifest(wandb_dir)

    created = kept = 0
    for run_dir in run_dirs:
        name = "-".join(run_dir.relative_to(results / "runs").parts)
        fingerprint = _fingerprint(run_dir)
        entry = manifest.get(name)
        if (
            entry
            and entry.get("fingerprint") == fingerprint
            and (entry.get("folder") is None or (wandb_dir / entry["folder"]).is_dir())
        ):
            kept += 1
            continue
        if entry and entry.get("folder") and not entry.get("synced"):
            # A stale offline run (its training changed since) that was never uploaded.
            shutil.rmtree(wandb_dir / entry["folder"], ignore_errors=True)
        folder = _log_run(run_dir, wandb_dir, figures, summary)
        manifest[name] = {
            "fingerprint": fingerprint,
            "folder": None if folder is None else str(folder.relative_to(wandb_dir)),
            "synced": False,
        }
        # Saved after each run: a killed upload step keeps what it finished.
        save_to_file(manifest, wandb_dir, MANIFEST)
        created += 1

    offline = {name: e for name, e in manifest.items() if e.get("folder")}
    synced_now = 0
    if not offline:
        outcome = "wandb disabled by the config (use_wandb false or mode disabled): no runs"
    elif not sync:
        outcome = (
            f"wandb: {len(offline)} offline runs in {wandb_dir} (upload off; to upload: "
            f"wandb sync {wandb_dir}/wandb/offline-run-*)"
        )
    elif (reason := credentials_available() or server_unreachable()) is not None:
        outcome = f"wandb upload skipped: {reason}; {len(offline)} offline runs kept in {wandb_dir}"
    else:
        outcome = ""
        markers = wandb_dir / SYNCED
        markers.mkdir(exist_ok=True)
        for name, entry in sorted(offline.items()):
            folder = Path(entry["folder"])
            marker = markers / f"{folder.name}.done"
            if marker.exists():
                continue
            failure = _sync(wandb_dir / folder, timeout)
            if failure is not None:
                # The first failure is usually the network: stop rather than wait on each run.
                outcome = (
                    f"wandb upload stopped: {failure}; {len(offline)} offline runs kept in "
                    f"{wandb_dir}, rerun to upload the rest"
                )
                break
            _write_marker({"run": name, "folder": str(folder)}, marker)
            manifest[name]["synced"] = True
            save_to_file(manifest, wandb_dir, MANIFEST)
            synced_now += 1
        if not outcome:
            outcome = f"wandb: uploaded {synced_now} runs ({len(offline)} in total are synced)"
    log(outcome, type="wandb")
    _write_marker(
        {"created": created, "kept": kept, "synced_now": synced_now, "outcome": outcome},
        wandb_dir / DONE,
    )
