"""No network: the wandb upload step says so in one line and keeps every offline run.

`src.analysis.wandb_upload.upload_experiment` runs with upload enabled and credentials set on
a real trained run, while the server (WANDB_BASE_URL) is

- a closed port (nothing listens): the step finishes, one line says the server is
  unreachable, the offline run holds the whole history (episodes and updates), nothing is
  marked as synced;
- a black hole (accepts connections, never answers): the real `wandb sync` is started and
  stopped at the timeout, with the same outcome and no process left behind.

When the network is back, a later run syncs every offline run once and marks it; further
reruns create no new offline run and sync nothing twice.
"""

from __future__ import annotations

import io
import json
import shlex
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from src.analysis import wandb_upload
from src.analysis.wandb_upload import upload_experiment
from src.core.io import load_from_file, save_to_file
from src.core.logging import configure_logging
from tests.wandb_file import find_run_files, read_history

FAKE_KEY = "0123456789abcdef" * 3 + "01234567"  # 40 characters, like a real key


@pytest.fixture
def results(trained_run: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`results/{tag}` holding one finished run with wandb enabled in its config."""
    config = load_from_file(trained_run, "config.json")
    save_to_file({**config, "use_wandb": True}, trained_run, "config.json")
    (trained_run / "videos").mkdir()
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("NETRC", str(tmp_path / "no.netrc"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return trained_run.parents[3]


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """The shared logger's console output of the test (file sink off)."""
    sink = io.StringIO()
    configure_logging(console_enabled=True, file_enabled=False, console_sink=sink)
    yield sink


@pytest.fixture
def black_hole() -> Iterator[str]:
    """http://127.0.0.1:<port> of a socket that accepts connections and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # the kernel completes handshakes; nobody ever reads or writes
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def _wandb_lines(sink: io.StringIO) -> list[str]:
    return [line for line in sink.getvalue().splitlines() if "[wandb]" in line]


def _offline_runs(results: Path) -> list[Path]:
    return sorted((results / "wandb" / "wandb").glob("offline-run-*"))


def _assert_offline_run_intact(results: Path, trained_run: Path) -> None:
    history = load_from_file(trained_run, "history.json")
    updates = load_from_file(trained_run, "updates.json")
    (run_file,) = find_run_files(results / "wandb")
    rows = read_history(run_file)
    steps = [row["_step"] for row in rows]
    assert steps == sorted(set(steps))  # env-step order, one row per env step
    assert [row["_step"] for row in rows if "team_return" in row] == sorted(
        episode["t_end"] for episode in history
    )
    assert [row["_step"] for row in rows if "global_step" in row] == [
        update["global_step"] for update in updates
    ]


def _nothing_synced(results: Path) -> None:
    assert not list((results / "wandb").glob("synced/*.done"))
    manifest = json.loads((results / "wandb" / "manifest.json").read_text())
    assert manifest and not any(entry["synced"] for entry in manifest.values())


def test_closed_port_gives_one_line_and_keeps_the_offline_run(
    results: Path, trained_run: Path, console: io.StringIO, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: nothing listens

    upload_experiment(results, sync=True, timeout=20)

    (line,) = _wandb_lines(console)
    assert "upload skipped" in line and "127.0.0.1:9 unreachable" in line
    assert "offline runs kept" in line and str(results / "wandb") in line
    _assert_offline_run_intact(results, trained_run)
    _nothing_synced(results)
    done = json.loads((results / "wandb" / "upload.done").read_text())
    assert done["outcome"] in line and done["synced_now"] == 0


def test_black_hole_server_stops_wandb_sync_at_the_timeout(
    results: Path,
    trained_run: Path,
    console: io.StringIO,
    black_hole: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
):
    monkeypatch.setenv("WANDB_BASE_URL", black_hole)
    # `wandb sync` writes its own debug files into the working folder.
    monkeypatch.chdir(tmp_path)

    upload_experiment(results, sync=True, timeout=8)

    (line,) = _wandb_lines(console)
    assert "upload stopped" in line and "timed out" in line, line
    assert "offline runs kept" in line
    _assert_offline_run_intact(results, trained_run)
    _nothing_synced(results)
    # `wandb sync` and its helper process were stopped with it.
    survivors = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(results / "wandb") in cmdline and "sync" in cmdline:
                survivors.append(cmdline)
    assert survivors == []


def _fake_wandb_cli(folder: Path, calls: Path) -> Path:
    """A `wandb` command that records each `wandb sync <run>` and succeeds (network back)."""
    folder.mkdir()
    cli = folder / "wandb"
    cli.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\necho "Syncing: done"\n')
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    return cli


def test_later_sync_marks_every_run_once_and_reruns_duplicate_nothing(
    results: Path,
    trained_run: Path,
    console: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
):
    # Offline first: no server.
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    upload_experiment(results, sync=True, timeout=20)
    offline = _offline_runs(results)
    assert len(offline) == 1
    _nothing_synced(results)

    # The network is back. `upload_experiment` runs the CLI named by SAFE_MARL_WANDB_CLI.
    calls = tmp_path / "sync_calls.txt"
    cli = _fake_wandb_cli(tmp_path / "bin dir", calls)  # a space: the value is split by shlex
    monkeypatch.setenv(wandb_upload.WANDB_CLI_ENV_VAR, shlex.quote(str(cli)))
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda timeout=5.0: None)
    upload_experiment(results, sync=True, timeout=20)

    assert calls.read_text().split("\n")[:-1] == [f"sync {offline[0]}"]
    assert [p.name for p in (results / "wandb" / "synced").iterdir()] == [f"{offline[0].name}.done"]
    manifest = json.loads((results / "wandb" / "manifest.json").read_text())
    assert all(entry["synced"] for entry in manifest.values())
    assert json.loads((results / "wandb" / "upload.done").read_text())["synced_now"] == 1

    # Reruns, with and without network: no new offline run, nothing synced twice.
    upload_experiment(results, sync=True, timeout=20)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(wandb_upload, "server_unreachable", lambda timeout=5.0: "down")
    upload_experiment(results, sync=True, timeout=20)
    assert calls.read_text().count("sync ") == 1
    assert _offline_runs(results) == offline
    done = json.loads((results / "wandb" / "upload.done").read_text())
    assert done["created"] == 0 and done["synced_now"] == 0
    _assert_offline_run_intact(results, trained_run)
