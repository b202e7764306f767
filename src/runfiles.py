"""The run folder contract: the name of every file of one run, written down once, and the one
reader of the config.json the run recorded.

A run folder (`{results_dir}/{tag}/runs/{env}/{algo}/run{idx}/`) is the interface between the
workflow's stages: training writes it, evaluation, rendering, export and the wandb upload read
it. Every stage, the workflow's path templates (`workflow/rules/common.smk`) and the
benchmarks name its files through `RunFiles`.

A run folder may come from elsewhere (results handed over to re-evaluate), so what it records
is input like a config, and is read here only as a regular file inside the folder
(`src.containment`), bounded and checked before anything is built from it:

- `RunFiles.read_config()`: config.json as recorded, its size bounded before it is read
  (`RUN_CONFIG_BYTES`) and its values after (`RUN_CONFIG_BOUNDS`: depth, count, text), with
  the identity every reader needs (`env_name`, `algo`, `run_idx`);
- `src.config.recorded.read_run_config(files)`: also the typed `RunConfig` it records (in a
  module of its own, so that a reader of config.json alone, the export's, does not reach the
  run config's resolution and through it the algorithm registry).

A refusal is one line naming the file: a `CorruptFileError` (a `ValueError`), for a bad value a
`RunConfigError`, also the `ConfigError` naming the key and the value.

>>> RunFiles("results/default/runs/hazard_grid/ippo/run0").policy.name
'policy.pt'
>>> RunFiles.templates("runs/{env}/{algo}/run{idx}")["eval"]
'runs/{env}/{algo}/run{idx}/eval.parquet'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from src.checks import ConfigError, is_int, nested_excess, shown
from src.containment import regular_file
from src.core.io import CorruptFileError, load_from_file

__all__ = [
    "RUN_CONFIG_BOUNDS",
    "RUN_CONFIG_BYTES",
    "RunConfigError",
    "RunFiles",
    "bounded_config",
]

RUN_CONFIG_BYTES = 4 * 1024**2
"""The largest config.json read (a run's is a few kilobytes)."""
RUN_CONFIG_BOUNDS = {"max_depth": 32, "max_items": 100_000, "max_text": 65_536}
"""How deep, large and long the values of a recorded run config may be
(`src.checks.nested_excess`)."""


class RunConfigError(CorruptFileError, ConfigError):
    """A bad value in a run's recorded config (config.json, or the one a policy.pt records):
    a `CorruptFileError` naming the file and a `ConfigError` naming the key and the value."""


def _refused(path: Path, why: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {why}", path=path, format=path.suffix)


def bounded_config(recorded: Any, path: Path) -> dict[str, Any]:
    """`recorded`, a run config read from `path`, if it is a mapping within `RUN_CONFIG_BOUNDS`."""
    if not isinstance(recorded, dict):
        raise _refused(path, f"its run config is a {type(recorded).__name__}, not a mapping")
    excess = nested_excess(recorded, **RUN_CONFIG_BOUNDS)
    if excess is not None:
        raise _refused(path, f"its run config {excess}")
    return recorded


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

    def read_config(self) -> dict[str, Any]:
        """config.json as the run recorded it, bounded, with the identity every reader needs:
        `env_name` and `algo` strings, `run_idx` an integer >= 0.

        Raises `CorruptFileError` (a `ValueError`), one line naming the file and the value.
        """
        path = self.config
        try:
            size = regular_file(path.parent, path.name).stat().st_size
        except FileNotFoundError:
            size = 0  # load_from_file names the missing file
        if size > RUN_CONFIG_BYTES:
            raise _refused(
                path, f"holds {size} bytes, more than the {RUN_CONFIG_BYTES} a run config may hold"
            )
        recorded = bounded_config(load_from_file(path.parent, path.name), path)
        missing = [key for key in ("env_name", "algo", "run_idx") if key not in recorded]
        if missing:
            raise _refused(path, f"lacks required keys: {missing}")
        for key in ("env_name", "algo"):
            if not isinstance(recorded[key], str):
                raise _refused(path, f"{key}={shown(recorded[key])}: must be a string")
        if not is_int(recorded["run_idx"]) or recorded["run_idx"] < 0:
            raise _refused(
                path, f"run_idx={shown(recorded['run_idx'])}: must be a JSON integer >= 0"
            )
        return recorded
