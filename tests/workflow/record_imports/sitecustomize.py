"""Records which `src` modules a workflow job imported, for the code-input test.

Loaded by every Python process started with this folder on PYTHONPATH. With
`SAFE_MARL_RECORD_IMPORTS=<folder>` set, a process running one of the workflow's scripts
(Snakemake copies it to `.snakemake/scripts/tmpXXXX.<script>.py`) writes, when it exits,
`<folder>/<pid>.json` = {"script": "<script>.py", "files": [every loaded src module file],
"user_files": [every other loaded module file of the repository outside src/, workflow/,
.venv/ and .snakemake/: tasks and algorithms given by import path], "wildcards": {the job's
wildcards}}. Without the variable this module does nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

_OUT = os.environ.get("SAFE_MARL_RECORD_IMPORTS")
_REPO = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
)
_NOT_USER = tuple(
    os.path.join(_REPO, name) + os.sep for name in ("src", "workflow", ".venv", ".snakemake")
)


def _record() -> None:
    script = next((arg for arg in sys.argv if "/.snakemake/scripts/" in arg), None)
    if script is None or _OUT is None:
        return
    files = sorted(
        {
            os.path.realpath(module.__file__)
            for name, module in list(sys.modules.items())
            if (name == "src" or name.startswith("src.")) and getattr(module, "__file__", None)
        }
    )
    user_files = sorted(
        {
            path
            for module in list(sys.modules.values())
            # Some extension modules name their file relatively: not a file of the repository.
            if os.path.isabs(getattr(module, "__file__", None) or "")
            and (path := os.path.realpath(module.__file__)).startswith(_REPO + os.sep)
            and not path.startswith(_NOT_USER)
            and path != os.path.realpath(__file__)
        }
    )
    # The script runs as __main__, with the `snakemake` object among its globals.
    job = getattr(sys.modules.get("__main__"), "snakemake", None)
    wildcards = dict(job.wildcards.items()) if job is not None else {}
    record = {
        "script": os.path.basename(script).split(".", 1)[1],
        "files": files,
        "user_files": user_files,
        "wildcards": wildcards,
    }
    with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)


if _OUT:
    atexit.register(_record)
