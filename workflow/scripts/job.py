"""Start of every workflow script: send log lines, warnings and tracebacks to the rule's log."""

import sys
from pathlib import Path
from typing import Any

# Jobs import the project from the checkout (no `pip install -e .` needed): this file lives in
# <repo>/workflow/scripts/, and Snakemake puts this folder on the path of every script.
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from src.core.logging import configure_logging, log, log_to_file  # noqa: E402 (needs the path)
from src.custom import register_config  # noqa: E402 (needs the path above)
from src.lock import LockHeldError, check_job_lock  # noqa: E402 (needs the path above)


def start_job(snakemake: Any, *, console: bool = False) -> None:
    """Route this job's logging, stdout and stderr into `snakemake.log[0]` (appending), and
    register the config's tasks and algorithms given by import path.

    With `console`, log lines also reach the terminal (rules whose outcome the user must see).
    """
    path = Path(snakemake.log[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    # The console sink is bound to the real stderr: stderr itself goes to the file below, and a
    # line must appear there only once.
    configure_logging(console_enabled=console, console_sink=sys.__stderr__)
    log_to_file(path)
    stream = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (lives as long as the job)
    sys.stdout = stream
    sys.stderr = stream
    try:
        check_job_lock()
    except LockHeldError as error:
        log(str(error), type="lock", console=True)
        raise SystemExit(1) from None
    # The config's tasks and algorithms given by import path, known to this job's registries
    # as to the workflow's (imported only when the job's code uses them).
    register_config(snakemake.config)
