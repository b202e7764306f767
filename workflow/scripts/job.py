"""Start of every workflow script: send log lines, warnings and tracebacks to the rule's log.

It also holds the job to its results folder (`src.containment`): every input, output and log
path of the job under `{results_dir}/{experiment_tag}` must stay inside it (no symlink on the
way, only folders and regular files there), deletes and renames under it walk down from it
without following a link (`set_results_root`), the job's `mem_mb` bounds what archives it may
inflate, and a refusal ends the job with one line naming the file instead of a traceback (and
so does a training that finished no episode, naming the run folder).

An interrupt (Ctrl-C: SIGINT reaches Snakemake and its jobs) ends a job with one line too, on
the terminal and in the log: the message of the `KeyboardInterrupt` (training says where it
stopped and what a rerun does) or `INTERRUPTED`. The job then ends at once as an interrupted
process does (killed by SIGINT, status 130 in a shell), without a traceback.
"""

import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

# Jobs import the project from the checkout (no `pip install -e .` needed): this file lives in
# <repo>/workflow/scripts/, and Snakemake puts this folder on the path of every script.
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from src.containment import (  # noqa: E402
    ContainmentError,
    check_paths,
    set_memory_budget,
    set_results_root,
)
from src.core.io import PersistenceError  # noqa: E402
from src.core.logging import configure_logging, log, log_to_file  # noqa: E402 (needs the path)
from src.custom import register_config  # noqa: E402 (needs the path above)
from src.lock import LockHeldError, check_job_lock  # noqa: E402 (needs the path above)
from src.records import NoTrainingEpisodeError  # noqa: E402 (needs the path above)

# Errors whose message is the whole diagnosis (one line naming the file): the job ends with
# that line on the terminal and in its log, without a traceback.
REFUSALS = (ContainmentError, PersistenceError, LockHeldError)
# Failures whose message is the whole diagnosis: the job fails with that line, likewise.
FAILURES = (NoTrainingEpisodeError,)
INTERRUPTED = "interrupted; rerun the same command to run this job again"
"""The line of an interrupt whose `KeyboardInterrupt` carries no message of its own."""


def results_folder(snakemake: Any) -> Path | None:
    """`{results_dir}/{experiment_tag}` of the job's config; None outside the workflow."""
    config = getattr(snakemake, "config", None) or {}
    if "results_dir" not in config or "experiment_tag" not in config:
        return None
    return Path(str(config["results_dir"])) / str(config["experiment_tag"])


def _exit_interrupted() -> None:
    """End the process at once as an interrupted one: killed by SIGINT (status 130 in a shell).

    Python would do so after its exit handlers, but a handler that runs code (torch's, which
    imports a module) makes it forget the interrupt and exit with status 1.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    os._exit(130)  # not reached: the signal ends the process


def _refusal_hook(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    """`sys.excepthook` of a job: a refusal, a failure of `FAILURES` or an interrupt is logged
    as its one line, the rest as usual."""
    if isinstance(error, KeyboardInterrupt):
        # A second Ctrl-C must not cut the line short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        log(str(error) or INTERRUPTED, type="interrupted", priority="warning", console=True)
        _exit_interrupted()
    elif isinstance(error, REFUSALS):
        log(f"refused: {error}", type="refused", console=True)
    elif isinstance(error, FAILURES):
        log(f"failed: {error}", type="failed", priority="error", console=True)
    else:
        sys.__excepthook__(kind, error, trace)


def start_job(snakemake: Any, *, console: bool = False) -> None:
    """Route this job's logging, stdout and stderr into `snakemake.log[0]` (appending), check
    the job's paths against its results folder, bound archives by the job's `mem_mb`, and
    register the config's tasks and algorithms given by import path.

    With `console`, log lines also reach the terminal (rules whose outcome the user must see).
    """
    path = Path(snakemake.log[0])
    results = results_folder(snakemake)
    if results is not None:
        # Before the log is opened for appending: a planted link there would receive it.
        try:
            check_paths(results, [path])
        except ContainmentError as error:
            print(f"refused: {error}", file=sys.__stderr__)
            raise SystemExit(1) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    # The console sink is bound to the real stderr: stderr itself goes to the file below, and a
    # line must appear there only once.
    configure_logging(console_enabled=console, console_sink=sys.__stderr__)
    log_to_file(path)
    stream = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (lives as long as the job)
    sys.stdout = stream
    sys.stderr = stream
    sys.excepthook = _refusal_hook
    try:
        check_job_lock()
    except LockHeldError as error:
        log(str(error), type="lock", console=True)
        raise SystemExit(1) from None
    mem_mb = getattr(snakemake.resources, "mem_mb", None)
    granted = isinstance(mem_mb, int | float) and not isinstance(mem_mb, bool) and mem_mb > 0
    set_memory_budget(mem_mb if granted else None)
    if results is not None:
        try:
            check_paths(results, [*snakemake.input, *snakemake.output, *snakemake.log])
        except ContainmentError as error:
            log(f"refused: {error}", type="refused", console=True)
            raise SystemExit(1) from None
        # Deletes and renames below it walk down from it: a run or checkpoint folder swapped
        # for a link while the job runs is refused.
        set_results_root(results)
    # The config's tasks and algorithms given by import path, known to this job's registries
    # as to the workflow's (imported only when the job's code uses them).
    register_config(snakemake.config)
