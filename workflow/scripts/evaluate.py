"""Script of the evaluate rule: evaluate one run's final policy into eval.parquet, its episodes
into eval_episodes.parquet and the shield's certificate into certificate.json."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.evaluation.evaluate import evaluate_run  # noqa: E402 (after the log redirect)

evaluate_run(
    Path(snakemake.input.config).parent,
    snakemake.output.eval,
    episodes_out=snakemake.output.episodes,
    certificate_out=snakemake.output.certificate,
)
