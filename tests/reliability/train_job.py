"""The workflow's train job without Snakemake: `python train_job.py <results> <run dir> <config>`.

Runs `workflow/scripts/train.py` as Snakemake runs a rule's script: with a `snakemake` object
(results folder, outputs, log, threads, run config), the script's folder on the path, and the
job's log deleted first (Snakemake deletes a job's log before it starts the job). `<config>`
is a run config as JSON. The process's stderr is what Snakemake shows of the job on its
console.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "workflow" / "scripts"


class _Named(list):
    """A list of paths whose items also have names, as Snakemake's `output` and `log`."""

    def __init__(self, **named: str) -> None:
        super().__init__(named.values())
        for name, value in named.items():
            setattr(self, name, value)


def snakemake_object(results: Path, run_dir: Path, config: dict[str, Any]) -> SimpleNamespace:
    """The parts of Snakemake's `snakemake` object that the train script and `start_job` read."""
    return SimpleNamespace(
        config={"results_dir": str(results.parent), "experiment_tag": results.name},
        input=[],
        output=_Named(
            config=str(run_dir / "config.json"),
            policy=str(run_dir / "policy.pt"),
            history=str(run_dir / "history.json"),
            updates=str(run_dir / "updates.json"),
        ),
        log=_Named(log=str(run_dir / "logs" / "train.log")),
        params=SimpleNamespace(run_config=config),
        resources=SimpleNamespace(mem_mb=2000),
        threads=1,
    )


def main(results: str, run_dir: str, config: str) -> None:
    snakemake = snakemake_object(Path(results), Path(run_dir), json.loads(config))
    Path(snakemake.log[0]).unlink(missing_ok=True)
    sys.path.insert(0, str(SCRIPTS))
    runpy.run_path(str(SCRIPTS / "train.py"), init_globals={"snakemake": snakemake})


if __name__ == "__main__":
    main(*sys.argv[1:])
