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

import contextlib
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
        """os.replace that stops for good before publishing a file matching the suffix (a
        name relative to a folder's descriptor, as jobs rename results, is matched with the
        folder's path)."""
        target = os.fspath(dst)
        if dst_dir_fd is not None:
            with contextlib.suppress(OSError):
                target = os.path.join(os.readlink(f"/proc/self/fd/{dst_dir_fd}"), target)
        if target.endswith(_SUFFIX):
            with open(_MARKER, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {os.fspath(src)} {target}\n")
            while True:
                time.sleep(1.0)
        _real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    os.replace = _pausing_replace


# With `RELIABILITY_PAUSE_TRAINING="<phase>:<update>:<marker path>"` set, every `train_run` of
# the process gets a `pause_training.PauseAt` callback: training stops for good at that point
# (after writing the marker), so the test can SIGKILL it there. The callback is added when
# `src.algos.train` is first imported; nothing is imported before.
_TRAIN_SPEC = os.environ.get("RELIABILITY_PAUSE_TRAINING")

if _TRAIN_SPEC:
    import importlib.abc
    import importlib.util
    import sys
    from typing import Any

    class _AddPause(importlib.abc.MetaPathFinder):
        """Wraps `train_run` of `src.algos.train` as the module is loaded."""

        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            if name != "src.algos.train":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                execute(module)
                from pause_training import PauseAt

                real = module.train_run

                def train_run(*args: Any, callbacks: Any = (), **kwargs: Any) -> None:
                    pause = PauseAt.from_spec(_TRAIN_SPEC)
                    real(*args, callbacks=[*callbacks, pause], **kwargs)

                module.train_run = train_run

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _AddPause())
