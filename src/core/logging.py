"""One shared logger per interpreter, with a console sink and a per-process log file.

``configure_logging`` sets up the ``safe_marl`` logger (``propagate=False``, so nothing leaks
into the root logger or is printed twice) with two sinks:

- console: ``console_sink`` if given, else whatever ``sys.stderr`` is at the time of writing;
- file: ``{logs_dir}/{hostname}-{pid}-{start time}.log``, one file per process, so parallel
  Snakemake jobs (or forked workers) sharing a ``logs_dir`` never write into the same file.
  ``log_to_file(path)`` instead writes to exactly ``path`` (a Snakemake rule's ``log:`` file).

``log(message, type=..., ...)`` writes one record. ``type`` is a short tag (``train``,
``shield``) shown as ``[train]`` in the line; ``console``/``file`` switch a sink on or off for
this call only (``None`` keeps the configured default); ``exception=True`` attaches the
traceback of the exception being handled, an exception instance attaches its own traceback.
Reconfiguring replaces the sinks, so no line is ever written twice. ``log`` before any
``configure_logging`` call sets up the console-only default.

>>> import io
>>> sink = io.StringIO()
>>> configure_logging(console_sink=sink, log_format="%(levelname)s %(type_tag)s%(message)s")
>>> log("update 3 done", type="train")
>>> sink.getvalue()
'INFO [train] update 3 done\\n'
>>> reset_logging()

Format fields added to every record: ``%(type)s`` (the tag, or an empty string) and
``%(type_tag)s`` (``"[tag] "``, or an empty string when there is no tag). Times are UTC.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from logging import CRITICAL, DEBUG, ERROR, INFO, WARNING
from pathlib import Path
from types import TracebackType
from typing import TextIO

__all__ = [
    "CRITICAL",
    "DEBUG",
    "DEFAULT_LOG_FORMAT",
    "ERROR",
    "INFO",
    "LOGGER_NAME",
    "WARNING",
    "configure_logging",
    "current_log_file",
    "log",
    "log_to_file",
    "reset_logging",
]

LOGGER_NAME = "safe_marl"
"""Name of the shared ``logging.Logger``."""

DEFAULT_LOG_FORMAT = "%(asctime)s %(levelname)-8s %(type_tag)s%(message)s"
"""Timestamp (UTC, ISO 8601), level, ``[type] `` tag if any, message."""

_CONSOLE_FLAG = "safe_marl_console"
_FILE_FLAG = "safe_marl_file"


# ------------------------------------------------------------------ argument checks


def _parse_level(value: object, name: str) -> int:
    """Turn a level name (any case) or a non-negative int into a logging level."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"{name} must be a level name or an int, got {type(value).__name__}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        return value
    levels = logging.getLevelNamesMapping()
    level = levels.get(value.strip().upper())
    if level is None:
        raise ValueError(f"{name} {value!r} is not a level; use one of {', '.join(levels)}")
    return level


def _check_optional_bool(value: object, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None, got {type(value).__name__}")


def _check_bool(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")


def _check_path(value: object, name: str) -> Path:
    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a str or pathlib.Path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name} must be a non-empty text path, got {value!r}")
    return Path(text)


# ------------------------------------------------------------------ sinks


class _UTCFormatter(logging.Formatter):
    """ISO 8601 UTC timestamps, so lines from cluster nodes in other zones sort together."""

    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


class _SinkFilter(logging.Filter):
    """Add the ``type`` fields and apply the per-call sink switch set by ``log``."""

    def __init__(self, flag: str, enabled_by_default: bool) -> None:
        super().__init__()
        self.flag = flag
        self.enabled_by_default = enabled_by_default

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "type"):
            # Records logged straight through logging.getLogger(LOGGER_NAME) have no tag.
            record.type = ""
            record.type_tag = ""
        wanted = getattr(record, self.flag, None)
        return self.enabled_by_default if wanted is None else bool(wanted)


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr``, which test runners and Snakemake may swap."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        # StreamHandler.__init__ assigns the stream; the property always reads sys.stderr.
        pass


@dataclass(frozen=True)
class _Settings:
    """What `configure_logging` sets; the defaults are the configuration before any call."""

    min_level: int = INFO
    logs_dir: Path | None = None
    file_path: Path | None = None  # set by log_to_file: exactly this file, not one in logs_dir
    console_enabled: bool = True
    file_enabled: bool = True
    console_sink: TextIO | None = None
    log_format: str = DEFAULT_LOG_FORMAT


@dataclass
class _State:
    settings: _Settings
    pid: int
    handlers: list[logging.Handler]
    log_file: Path | None


_lock = threading.RLock()
_state: _State | None = None
_process_stamps: dict[int, str] = {}


def _renew_lock_in_child() -> None:
    # A thread of the parent may have held the lock at fork time; the child would wait forever.
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_renew_lock_in_child)


def _process_log_name() -> str:
    """``{hostname}-{pid}-{UTC start}.log``; the time keeps names unique when pids are reused."""
    pid = os.getpid()
    stamp = _process_stamps.setdefault(pid, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
    return f"{host}-{pid}-{stamp}.log"


def _check_format(log_format: str) -> logging.Formatter:
    try:
        formatter = _UTCFormatter(log_format, validate=True)
        probe = logging.LogRecord(LOGGER_NAME, INFO, __file__, 0, "probe", None, None)
        probe.type = "probe"
        probe.type_tag = "[probe] "
        formatter.format(probe)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"log_format {log_format!r} is not a valid format: {exc}") from exc
    return formatter


def _close_handlers(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def _apply(settings: _Settings) -> None:
    """Replace the shared logger's sinks by the ones ``settings`` describes."""
    global _state
    formatter = _check_format(settings.log_format)
    log_file = settings.file_path
    if log_file is None and settings.logs_dir is not None:
        log_file = settings.logs_dir / _process_log_name()
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)

    handlers: list[logging.Handler] = []
    console: logging.Handler = (
        _StderrHandler()
        if settings.console_sink is None
        else logging.StreamHandler(settings.console_sink)
    )
    console.addFilter(_SinkFilter(_CONSOLE_FLAG, settings.console_enabled))
    handlers.append(console)
    if log_file is not None:
        # delay: a file sink that is off by default is only created if a call asks for it.
        file_handler = logging.FileHandler(
            log_file, mode="a", encoding="utf-8", delay=not settings.file_enabled
        )
        file_handler.addFilter(_SinkFilter(_FILE_FLAG, settings.file_enabled))
        handlers.append(file_handler)
    for handler in handlers:
        handler.setFormatter(formatter)

    logger = logging.getLogger(LOGGER_NAME)
    logger.propagate = False
    logger.setLevel(settings.min_level)
    _close_handlers(logger)
    for handler in handlers:
        logger.addHandler(handler)
    _state = _State(settings=settings, pid=os.getpid(), handlers=handlers, log_file=log_file)


def _ensure_configured() -> _State:
    with _lock:
        if _state is None:
            _apply(_Settings())
        elif _state.pid != os.getpid():
            # A forked child inherited the parent's sinks: give it a log file of its own.
            _apply(_state.settings)
        assert _state is not None
        return _state


# ------------------------------------------------------------------ public API


def configure_logging(
    *,
    min_level: str | int = INFO,
    logs_dir: str | Path | None = None,
    console_enabled: bool = True,
    file_enabled: bool = True,
    console_sink: TextIO | None = None,
    log_format: str = DEFAULT_LOG_FORMAT,
) -> None:
    """Configure shared logging sinks for the current interpreter.

    Args:
        min_level: records below this level (name such as ``"debug"`` or an int) are dropped.
        logs_dir: folder of the log file ``{hostname}-{pid}-{start}.log`` (created); ``None``
            means no file sink.
        console_enabled: whether ``log`` writes to the console unless a call says otherwise.
        file_enabled: whether ``log`` writes to the file unless a call says otherwise.
        console_sink: text stream for the console sink; ``None`` means ``sys.stderr``.
        log_format: a ``%``-style ``logging`` format; ``%(type)s`` and ``%(type_tag)s`` are
            available besides the standard fields.

    Calling it again replaces every sink (no duplicated lines) and closes the old file.
    """
    level = _parse_level(min_level, "min_level")
    directory = None if logs_dir is None else _check_path(logs_dir, "logs_dir")
    _check_bool(console_enabled, "console_enabled")
    _check_bool(file_enabled, "file_enabled")
    if console_sink is not None and not callable(getattr(console_sink, "write", None)):
        raise TypeError(
            f"console_sink must be a text stream with write(), got {type(console_sink).__name__}"
        )
    if not isinstance(log_format, str):
        raise TypeError(f"log_format must be a str, got {type(log_format).__name__}")
    if directory is not None and directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"logs_dir {str(directory)!r} exists and is not a directory")
    settings = _Settings(
        min_level=level,
        logs_dir=directory,
        console_enabled=console_enabled,
        file_enabled=file_enabled,
        console_sink=console_sink,
        log_format=log_format,
    )
    with _lock:
        _apply(settings)


def log_to_file(path: str | Path) -> None:
    """Send the file sink to exactly ``path`` (appending; parent folders created).

    Meant for workflow scripts: ``log_to_file(snakemake.log[0])``. The file is created at once
    and the file sink is switched on; level, console and format settings are kept.
    """
    target = _check_path(path, "path")
    if target.is_dir():
        raise IsADirectoryError(f"path {str(target)!r} is a directory, not a log file")
    with _lock:
        current = _state.settings if _state is not None else _Settings()
        _apply(replace(current, logs_dir=None, file_path=target, file_enabled=True))


def current_log_file() -> Path | None:
    """Path of this process's log file, or ``None`` when no file sink is configured."""
    with _lock:
        if _state is None:
            return None
    return _ensure_configured().log_file


def reset_logging() -> None:
    """Close every sink and forget the configuration (the next ``log`` uses the default)."""
    global _state
    with _lock:
        _close_handlers(logging.getLogger(LOGGER_NAME))
        _state = None


def log(
    message: object,
    *,
    type: str | None = None,
    priority: str | int = INFO,
    console: bool | None = None,
    file: bool | None = None,
    exception: BaseException | bool | None = None,
) -> None:
    """Write a message to the shared console/file logger.

    Args:
        message: anything; written as ``str(message)`` (``%`` signs are not interpreted).
        type: short tag shown as ``[type]`` in the line (e.g. ``"train"``, ``"shield"``).
        priority: level name (any case) or int; dropped if below the configured ``min_level``.
        console: ``False`` skips the console for this call, ``True`` forces it even if it is
            disabled by default, ``None`` keeps the configured default.
        file: the same for the log file; ``True`` needs a configured file sink.
        exception: ``True`` attaches the traceback of the exception being handled (nothing if
            none is); an exception instance attaches that exception's traceback.
    """
    if type is not None:
        if not isinstance(type, str):
            raise TypeError(f"type must be a str or None, got {type.__class__.__name__}")
        if not type.strip() or any(ch in type for ch in "\r\n"):
            raise ValueError(f"type must be a non-empty single-line tag, got {type!r}")
    level = _parse_level(priority, "priority")
    _check_optional_bool(console, "console")
    _check_optional_bool(file, "file")
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None] | None = None
    if isinstance(exception, BaseException):
        exc_info = (exception.__class__, exception, exception.__traceback__)
    elif exception is True:
        current = sys.exc_info()
        if current[1] is not None:
            exc_info = (current[0], current[1], current[2])  # type: ignore[assignment]
    elif exception is not None and exception is not False:
        raise TypeError(
            f"exception must be an exception, True, False or None, got "
            f"{exception.__class__.__name__}"
        )

    state = _ensure_configured()
    if file and state.log_file is None:
        raise ValueError(
            "file=True but no log file is configured; call configure_logging(logs_dir=...) "
            "or log_to_file(path) first"
        )
    logging.getLogger(LOGGER_NAME).log(
        level,
        str(message),
        exc_info=exc_info,
        stacklevel=2,
        extra={
            "type": type or "",
            "type_tag": f"[{type}] " if type else "",
            _CONSOLE_FLAG: console,
            _FILE_FLAG: file,
        },
    )
