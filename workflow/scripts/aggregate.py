"""Script of the aggregate rule: concatenate every run's tables."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.analysis.aggregate import aggregate  # noqa: E402 (after the log redirect)

aggregate(snakemake.params.run_dirs, Path(snakemake.output.eval_parquet).parent)
