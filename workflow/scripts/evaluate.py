"""Script of the evaluate rule: evaluate one run's final policy into eval.parquet."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.evaluation.evaluate import evaluate_run  # noqa: E402 (after the log redirect)

evaluate_run(Path(snakemake.input.config).parent, snakemake.output[0])
