"""Fault injection for the kill test, loaded by every Python process started with this folder
on PYTHONPATH (Python imports `sitecustomize` at start-up).

With `RELIABILITY_PAUSE_BEFORE_REPLACE="<suffix>|<marker path>"` set, a process that is about
to publish a file whose path ends with `<suffix>` through `os.replace` (the last step of every
atomic write in the pipeline) first appends a line to the marker file and then sleeps forever,
so the test can SIGKILL it at exactly that moment: the new content is complete in its hidden
temporary file, the final name still holds the old content or nothing. Without the variable
this module does nothing.
"""

from __future__ import annotations

import os
import time

_SPEC = os.environ.get("RELIABILITY_PAUSE_BEFORE_REPLACE")

if _SPEC:
    _SUFFIX, _MARKER = _SPEC.split("|", 1)
    _real_replace = os.replace

    def _pausing_replace(
        src: str | os.PathLike,
        dst: str | os.PathLike,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        """os.replace that stops for good before publishing a file matching the suffix."""
        if os.fspath(dst).endswith(_SUFFIX):
            with open(_MARKER, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {os.fspath(src)} {os.fspath(dst)}\n")
            while True:
                time.sleep(1.0)
        _real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    os.replace = _pausing_replace
