"""Text results of the analysis: pages, tables and records, written atomically; JSON read.

Every write goes through `src.core.io` (atomic: hidden temp file in the same folder, fsync,
rename; a killed writer's temp is removed by the next write), so a killed job never leaves a
half file that Snakemake would take for a finished output. The Parquet tables have their own
module, `src.schemas`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.core.io import atomic_output, load_from_file

__all__ = ["read_json", "write_text"]


def write_text(text: str, path: str | Path) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_json(path: str | Path) -> Any:
    """Load a JSON file, naming the path in the error when it is missing or corrupt."""
    file = Path(path)
    return load_from_file(file.parent, file.name)
