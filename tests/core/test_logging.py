"""Tests of src.core.logging: sinks, per-call switches, tags, tracebacks, one file per process."""

from __future__ import annotations

import inspect
import io
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

import pytest

import src.core.logging as core_logging
from src.core.logging import (
    DEFAULT_LOG_FORMAT,
    INFO,
    LOGGER_NAME,
    configure_logging,
    current_log_file,
    log,
    log_to_file,
    reset_logging,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Copied verbatim from the seed's published API (core_utilities_api.md, "Logging").
SEED_SIGNATURES = {
    "configure_logging": textwrap.dedent(
        """
        def configure_logging(
            *,
            min_level: str | int = INFO,
            logs_dir: str | Path | None = None,
            console_enabled: bool = True,
            file_enabled: bool = True,
            console_sink: TextIO | None = None,
            log_format: str = DEFAULT_LOG_FORMAT,
        ) -> None: ...
        """
    ),
    "log": textwrap.dedent(
        """
        def log(
            message: object,
            *,
            type: str | None = None,
            priority: str | int = INFO,
            console: bool | None = None,
            file: bool | None = None,
            exception: BaseException | bool | None = None,
        ) -> None: ...
        """
    ),
}

PLAIN = "%(levelname)s %(type_tag)s%(message)s"


def _only_log_file(folder: Path) -> Path:
    files = sorted(folder.glob("*.log"))
    assert len(files) == 1, files
    return files[0]


# ------------------------------------------------------------------ signatures


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_signature_matches_seed(name: str) -> None:
    namespace: dict[str, Any] = {
        "Path": Path,
        "TextIO": TextIO,
        "INFO": logging.INFO,
        "DEFAULT_LOG_FORMAT": DEFAULT_LOG_FORMAT,
    }
    exec(SEED_SIGNATURES[name], namespace)
    expected = inspect.signature(namespace[name], eval_str=True)
    actual = inspect.signature(getattr(core_logging, name), eval_str=True)
    assert list(actual.parameters) == list(expected.parameters)
    for param_name, want in expected.parameters.items():
        got = actual.parameters[param_name]
        assert got.kind == want.kind, param_name
        assert got.default == want.default, param_name
        assert got.annotation == want.annotation, param_name
    assert actual.return_annotation == expected.return_annotation


def test_defaults_and_constants() -> None:
    assert INFO == logging.INFO
    assert isinstance(DEFAULT_LOG_FORMAT, str) and "%(message)s" in DEFAULT_LOG_FORMAT
    with pytest.raises(TypeError):
        configure_logging(logging.DEBUG)  # type: ignore[misc]  # keyword-only
    with pytest.raises(TypeError):
        log("m", "train")  # type: ignore[misc]  # keyword-only


# ------------------------------------------------------------------ console


def test_log_before_configure_writes_to_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    log("hello", type="train")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "INFO" in captured.err and "[train] hello" in captured.err
    assert current_log_file() is None


def test_default_format_has_utc_timestamp_level_and_tag() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink)
    log("update done", type="train", priority="warning")
    log("untagged")
    first, second = sink.getvalue().splitlines()
    stamp, level, rest = first.split(" ", 2)
    assert stamp.endswith("Z") and "T" in stamp
    assert level == "WARNING" and rest.strip() == "[train] update done"
    assert second.split(" ", 2)[2].strip() == "untagged"


def test_type_and_type_tag_fields() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format="<%(type)s>%(type_tag)s%(message)s")
    log("a", type="shield")
    log("b")
    assert sink.getvalue().splitlines() == ["<shield>[shield] a", "<>b"]


def test_message_objects_and_percent_signs_are_written_verbatim() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format="%(message)s")
    log("100% done %s %(x)s")
    log({"a": 1})
    log(3.5)
    assert sink.getvalue().splitlines() == ["100% done %s %(x)s", "{'a': 1}", "3.5"]


def test_min_level_and_priorities() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, min_level="warning", log_format=PLAIN)
    log("dropped", priority="INFO")
    log("dropped too", priority=logging.DEBUG)
    log("kept", priority="Warning")
    log("kept int", priority=logging.ERROR)
    log("custom", priority=35)
    assert sink.getvalue().splitlines() == ["WARNING kept", "ERROR kept int", "Level 35 custom"]


@pytest.mark.parametrize("bad", ["LOUD", "", -1])
def test_bad_priority_value_raises_value_error(bad: Any) -> None:
    configure_logging(console_sink=io.StringIO())
    with pytest.raises(ValueError, match="priority"):
        log("m", priority=bad)
    with pytest.raises(ValueError, match="min_level"):
        configure_logging(min_level=bad)


@pytest.mark.parametrize("bad", [2.5, None, True])
def test_bad_priority_type_raises_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="priority"):
        log("m", priority=bad)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"type": 3}, TypeError, "type"),
        ({"type": ""}, ValueError, "type"),
        ({"type": "a\nb"}, ValueError, "type"),
        ({"console": 1}, TypeError, "console"),
        ({"file": "yes"}, TypeError, "file"),
        ({"exception": "boom"}, TypeError, "exception"),
    ],
)
def test_bad_log_arguments(kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink)
    with pytest.raises(error, match=name):
        log("m", **kwargs)
    assert sink.getvalue() == ""


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"logs_dir": 3}, TypeError, "logs_dir"),
        ({"logs_dir": ""}, ValueError, "logs_dir"),
        ({"console_enabled": "no"}, TypeError, "console_enabled"),
        ({"file_enabled": None}, TypeError, "file_enabled"),
        ({"console_sink": "stderr"}, TypeError, "console_sink"),
        ({"log_format": 3}, TypeError, "log_format"),
        ({"log_format": "%(message)s %(nope)s"}, ValueError, "log_format"),
        ({"log_format": "no fields"}, ValueError, "log_format"),
    ],
)
def test_bad_configure_arguments(kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        configure_logging(**kwargs)


def test_logs_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError, match="logs_dir"):
        configure_logging(logs_dir=tmp_path / "f")


# ------------------------------------------------------------------ file sink and switches


def test_file_sink_one_file_named_by_host_and_pid(tmp_path: Path) -> None:
    sink = io.StringIO()
    logs = tmp_path / "logs" / "nested"
    configure_logging(logs_dir=str(logs), console_sink=sink, log_format=PLAIN)
    log("to both", type="eval")
    path = _only_log_file(logs)
    assert path == current_log_file()
    assert path.name.startswith(f"{socket.gethostname()}-{os.getpid()}-")
    assert path.read_text() == "INFO [eval] to both\n"
    assert sink.getvalue() == "INFO [eval] to both\n"


def test_per_call_switches(tmp_path: Path) -> None:
    sink = io.StringIO()
    configure_logging(logs_dir=tmp_path, console_sink=sink, log_format="%(message)s")
    log("file only", console=False)
    log("console only", file=False)
    log("nowhere", console=False, file=False)
    log("both", console=True, file=True)
    assert sink.getvalue().splitlines() == ["console only", "both"]
    assert _only_log_file(tmp_path).read_text().splitlines() == ["file only", "both"]


def test_disabled_sinks_can_be_forced_per_call(tmp_path: Path) -> None:
    sink = io.StringIO()
    configure_logging(
        logs_dir=tmp_path,
        console_sink=sink,
        console_enabled=False,
        file_enabled=False,
        log_format="%(message)s",
    )
    log("default: nowhere")
    assert list(tmp_path.glob("*.log")) == []  # an unused, disabled file sink creates nothing
    log("forced console", console=True)
    log("forced file", file=True)
    assert sink.getvalue().splitlines() == ["forced console"]
    assert _only_log_file(tmp_path).read_text().splitlines() == ["forced file"]


def test_file_true_without_file_sink_is_an_error() -> None:
    configure_logging(console_sink=io.StringIO())
    with pytest.raises(ValueError, match="no log file"):
        log("m", file=True)


def test_reconfiguring_never_duplicates_lines(tmp_path: Path) -> None:
    sink = io.StringIO()
    for _ in range(3):
        configure_logging(logs_dir=tmp_path, console_sink=sink, log_format="%(message)s")
    log("once")
    assert sink.getvalue() == "once\n"
    assert _only_log_file(tmp_path).read_text() == "once\n"
    assert len(logging.getLogger(LOGGER_NAME).handlers) == 2


def test_reconfiguring_switches_sinks_and_closes_old_file(tmp_path: Path) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(logs_dir=tmp_path / "a", console_sink=first, log_format="%(message)s")
    log("one")
    old_handlers = list(logging.getLogger(LOGGER_NAME).handlers)
    configure_logging(logs_dir=tmp_path / "b", console_sink=second, log_format="%(message)s")
    log("two")
    assert first.getvalue() == "one\n" and second.getvalue() == "two\n"
    assert _only_log_file(tmp_path / "a").read_text() == "one\n"
    assert _only_log_file(tmp_path / "b").read_text() == "two\n"
    file_handler = next(h for h in old_handlers if isinstance(h, logging.FileHandler))
    assert file_handler.stream is None  # closed


def test_shared_logger_does_not_propagate(caplog: pytest.LogCaptureFixture) -> None:
    configure_logging(console_sink=io.StringIO())
    with caplog.at_level(logging.DEBUG):
        log("private")
    assert logging.getLogger(LOGGER_NAME).propagate is False
    assert "private" not in caplog.text


def test_records_from_the_stdlib_logger_get_the_sinks_and_no_tag() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format=PLAIN)
    logging.getLogger(LOGGER_NAME).warning("direct %d", 3)
    assert sink.getvalue() == "WARNING direct 3\n"


def test_reset_logging_returns_to_default(capsys: pytest.CaptureFixture[str]) -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink)
    reset_logging()
    log("after reset")
    assert sink.getvalue() == ""
    assert "after reset" in capsys.readouterr().err


# ------------------------------------------------------------------ tracebacks


def _raise_value_error() -> None:
    raise ValueError("bad thing")


def test_exception_true_attaches_current_traceback() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format=PLAIN)
    try:
        _raise_value_error()
    except ValueError:
        log("step failed", type="train", priority="error", exception=True)
    text = sink.getvalue()
    assert text.startswith("ERROR [train] step failed\nTraceback (most recent call last):")
    assert "_raise_value_error" in text and "ValueError: bad thing" in text


def test_exception_instance_attaches_its_own_traceback() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format=PLAIN)
    try:
        _raise_value_error()
    except ValueError as exc:
        caught = exc
    log("later", exception=caught)  # outside the except block
    text = sink.getvalue()
    assert "Traceback" in text and "_raise_value_error" in text and "bad thing" in text


def test_exception_true_without_active_exception_logs_plain_message() -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, log_format=PLAIN)
    log("nothing to attach", exception=True)
    log("no traceback", exception=False)
    assert sink.getvalue() == "INFO nothing to attach\nINFO no traceback\n"


def test_traceback_reaches_the_file_too(tmp_path: Path) -> None:
    configure_logging(logs_dir=tmp_path, console_sink=io.StringIO())
    try:
        _raise_value_error()
    except ValueError:
        log("failed", exception=True, console=False)
    assert "ValueError: bad thing" in _only_log_file(tmp_path).read_text()


# ------------------------------------------------------------------ log_to_file


def test_log_to_file_writes_exactly_there_and_keeps_settings(tmp_path: Path) -> None:
    sink = io.StringIO()
    configure_logging(console_sink=sink, min_level="warning", log_format=PLAIN)
    target = tmp_path / "logs" / "train" / "spread-ippo-0.log"
    log_to_file(target)
    assert target.exists()  # created at once, as a workflow's log file should be
    assert current_log_file() == target
    log("dropped")
    log("kept", priority="error", type="train")
    assert target.read_text() == "ERROR [train] kept\n"
    assert sink.getvalue() == "ERROR [train] kept\n"
    log_to_file(str(target))  # reconfiguring appends, never duplicates
    log("again", priority="error")
    assert target.read_text() == "ERROR [train] kept\nERROR again\n"


def test_log_to_file_rejects_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="path"):
        log_to_file(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path"):
        log_to_file("")
    with pytest.raises(IsADirectoryError, match="directory"):
        log_to_file(tmp_path)


# ------------------------------------------------------------------ processes


_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from src.core.logging import configure_logging, log
configure_logging(logs_dir=sys.argv[2], console_enabled=False)
log("from job " + sys.argv[3], type="job")
"""


def test_parallel_processes_get_separate_files(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHILD, str(REPO_ROOT), str(tmp_path), str(i)])
        for i in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    files = sorted(tmp_path.glob("*.log"))
    assert len(files) == 2
    lines = [f.read_text().splitlines() for f in files]
    assert all(len(file_lines) == 1 for file_lines in lines)
    messages = sorted(file_lines[0].split("[job] ", 1)[1] for file_lines in lines)
    assert messages == ["from job 0", "from job 1"]


def _forked_child(message: str) -> None:
    log(message, console=False)


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_forked_child_gets_its_own_file(tmp_path: Path) -> None:
    configure_logging(logs_dir=tmp_path, console_enabled=False, log_format="%(message)s")
    log("parent")
    parent_file = current_log_file()
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=("child",))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    files = sorted(tmp_path.glob("*.log"))
    assert len(files) == 2
    assert parent_file is not None and parent_file.read_text() == "parent\n"
    (child_file,) = (f for f in files if f != parent_file)
    assert child_file.read_text() == "child\n"


def test_docstring_examples_run() -> None:
    import doctest

    result = doctest.testmod(core_logging)
    assert result.attempted > 0 and result.failed == 0
