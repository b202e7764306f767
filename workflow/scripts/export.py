"""Script of the export rule: one run's history and updates as Parquet."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.analysis.export import export_run  # noqa: E402 (after the log redirect)

export_run(Path(snakemake.input.config).parent, snakemake.output.history, snakemake.output.updates)
