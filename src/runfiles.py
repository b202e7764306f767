"""The run folder contract: the name of every file of one run, written down once.

A run folder (`{results_dir}/{tag}/runs/{env}/{algo}/run{idx}/`) is the interface between the
workflow's stages: training writes it, evaluation, rendering, export and the wandb upload read
it. Every stage, the workflow's path templates (`workflow/rules/common.smk`) and the
benchmarks name its files through `RunFiles`.

>>> RunFiles("results/default/runs/hazard_grid/ippo/run0").policy.name
'policy.pt'
>>> RunFiles.templates("runs/{env}/{algo}/run{idx}")["eval"]
'runs/{env}/{algo}/run{idx}/eval.parquet'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

__all__ = ["RunFiles"]


@dataclass(frozen=True)
class RunFiles:
    """The files of the run folder `root`."""

    root: Path

    # Attribute -> name inside the run folder (files and folders).
    NAMES: ClassVar[dict[str, str]] = {
        "config": "config.json",
        "policy": "policy.pt",
        "history_json": "history.json",
        "updates_json": "updates.json",
        "history": "history.parquet",
        "updates": "updates.parquet",
        "eval": "eval.parquet",
        "eval_episodes": "eval_episodes.parquet",
        "certificate": "certificate.json",
        "videos": "videos",
        "checkpoint": "checkpoint",
        "logs": "logs",
    }

    def __init__(self, root: str | Path) -> None:
        """Name the files of the run folder `root`."""
        object.__setattr__(self, "root", Path(root))

    @property
    def config(self) -> Path:
        """Resolved run config, git commit and package versions (JSON)."""
        return self.root / self.NAMES["config"]

    @property
    def policy(self) -> Path:
        """Final policy (plus the shield's models for shielded algorithms), torch state."""
        return self.root / self.NAMES["policy"]

    @property
    def history_json(self) -> Path:
        """One EpisodeLog per training episode (JSON)."""
        return self.root / self.NAMES["history_json"]

    @property
    def updates_json(self) -> Path:
        """One dict of metrics per policy update (JSON)."""
        return self.root / self.NAMES["updates_json"]

    @property
    def history(self) -> Path:
        """The training history as a table (Parquet)."""
        return self.root / self.NAMES["history"]

    @property
    def updates(self) -> Path:
        """The per-update metrics as a table (Parquet)."""
        return self.root / self.NAMES["updates"]

    @property
    def eval(self) -> Path:
        """The final policy's evaluation, one row per (horizon, shielded) (Parquet)."""
        return self.root / self.NAMES["eval"]

    @property
    def eval_episodes(self) -> Path:
        """The evaluation's episodes, one row per (shielded, episode) (Parquet)."""
        return self.root / self.NAMES["eval_episodes"]

    @property
    def certificate(self) -> Path:
        """The shield's certificate as a small record, with the code commit (JSON)."""
        return self.root / self.NAMES["certificate"]

    @property
    def videos(self) -> Path:
        """Folder of the final policy's videos and poster."""
        return self.root / self.NAMES["videos"]

    @property
    def checkpoint(self) -> Path:
        """Folder of the resume state while training runs."""
        return self.root / self.NAMES["checkpoint"]

    @property
    def logs(self) -> Path:
        """Folder of the stage logs and benchmarks."""
        return self.root / self.NAMES["logs"]

    def log(self, stage: str) -> Path:
        """Log file of one stage of the run."""
        return self.root / self.NAMES["logs"] / f"{stage}.log"

    def benchmark(self, stage: str) -> Path:
        """Benchmark file (time, memory) of one stage of the run."""
        return self.root / self.NAMES["logs"] / f"{stage}.benchmark.tsv"

    @classmethod
    def templates(cls, run_dir: str) -> dict[str, str]:
        """Every file as a path template under the run-folder template `run_dir`."""
        return {key: f"{run_dir}/{name}" for key, name in cls.NAMES.items()}
