"""A training callback that stops a training process for good at a named point.

`PauseAt("mid_update", 3, marker)` stops after the first learning epoch of update 3 (0-based);
`PauseAt("after_checkpoint", 3, marker)` right after the checkpoint that follows update 3. It
first writes the marker file, so a test knows the process is there and can SIGKILL it.
`sitecustomize.py` adds it to every `train_run` when `RELIABILITY_PAUSE_TRAINING` is set.
With `RELIABILITY_PAUSE_RELEASE=<path>` also set, training goes on once that file exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

PHASES = ("mid_update", "after_checkpoint")


class PauseAt:
    """Stop training at (`phase`, `update`) after writing `marker`."""

    def __init__(self, phase: str, update: int, marker: str | Path) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        self.phase, self.update, self.marker = phase, int(update), Path(marker)

    @classmethod
    def from_spec(cls, spec: str) -> PauseAt:
        """From `"<phase>:<update>:<marker path>"`."""
        phase, update, marker = spec.split(":", 2)
        return cls(phase, int(update), marker)

    def _stop(self) -> None:
        self.marker.write_text(f"{self.phase} {self.update}\n")
        release = os.environ.get("RELIABILITY_PAUSE_RELEASE")
        while not (release and os.path.exists(release)):
            time.sleep(0.1 if release else 1.0)

    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        if self.phase == "mid_update" and epoch == 0 and trainer.update == self.update:
            self._stop()

    def on_update_end(self, trainer: Any) -> None:
        if self.phase == "after_checkpoint" and trainer.update - 1 == self.update:
            self._stop()
