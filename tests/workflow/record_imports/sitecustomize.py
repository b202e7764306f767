"""Records which `src` modules a workflow job imported, for the code-input test.

Loaded by every Python process started with this folder on PYTHONPATH. With
`SAFE_MARL_RECORD_IMPORTS=<folder>` set, a process running one of the workflow's scripts
(Snakemake copies it to `.snakemake/scripts/tmpXXXX.<script>.py`) writes, when it exits,
`<folder>/<pid>.json` = {"script": "<script>.py", "files": [every loaded src module file]}.
Without the variable this module does nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

_OUT = os.environ.get("SAFE_MARL_RECORD_IMPORTS")


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
    record = {"script": os.path.basename(script).split(".", 1)[1], "files": files}
    with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)


if _OUT:
    atexit.register(_record)
