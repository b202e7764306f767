"""Script of the train rule: train one run into its folder."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.algos.train import train_run  # noqa: E402 (after the log redirect: import warnings land in the log)

train_run(
    snakemake.params.run_config,
    Path(snakemake.output.config).parent,
    threads=snakemake.threads,
)
