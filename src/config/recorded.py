"""The typed run config a run recorded, read back as it was resolved when the run was made.

`RunConfig.from_recorded` builds it without looking anything up again (no algorithm registry,
custom entry or version name); a config.json of another code version is refused naming the
keys that differ. This module sits above `src.runfiles`, whose `RunFiles.read_config` reads
config.json alone, so that a reader of the identity only (the export) does not reach the run
config's resolution and, through it, the algorithm registry.

- `read_run_config(run_dir)`: (config.json as `RunFiles.read_config` reads it, its
  `RunConfig`);
- `recorded_run_config(recorded, path)`: the `RunConfig` of the config a policy.pt records,
  bounded and read the same way.

A refusal is one line naming the file: a `RunConfigError` naming the key and the value, or a
`CorruptFileError` for a config.json of another code version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.checks import ConfigError
from src.config.run import RunConfig
from src.core.io import CorruptFileError
from src.runfiles import RunConfigError, RunFiles, bounded_config

__all__ = ["read_run_config", "recorded_run_config"]

# A hint of the config checks for YAML files; recorded run configs are not YAML.
_YAML_HINT = ", e.g. 3.0e-4 in YAML"


def _typed(recorded: dict[str, Any], path: Path) -> RunConfig:
    """`RunConfig.from_recorded(recorded)`, a refusal made one line naming `path`."""
    try:
        return RunConfig.from_recorded(recorded)
    except (TypeError, ValueError, KeyError) as error:
        why = " ".join(str(error).split()).replace(_YAML_HINT, "")[:500]
        kind = RunConfigError if isinstance(error, ConfigError) else CorruptFileError
        raise kind(f"{path}: {why}", path=path, format=path.suffix) from None


def read_run_config(run_dir: str | Path | RunFiles) -> tuple[dict[str, Any], RunConfig]:
    """(config.json of the run folder `run_dir` as `RunFiles.read_config` reads it, the typed
    `RunConfig` it records)."""
    files = run_dir if isinstance(run_dir, RunFiles) else RunFiles(run_dir)
    recorded = files.read_config()
    return recorded, _typed(recorded, files.config)


def recorded_run_config(recorded: Any, path: str | Path) -> RunConfig:
    """The typed run config `recorded` in the file `path` (the `config` entry of a policy.pt,
    say), bounded and read as `read_run_config` reads config.json's."""
    return _typed(bounded_config(recorded, Path(path)), Path(path))
