"""Script of the figures rule: every figure of the experiment (png and pdf)."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.analysis.figures import make_figures  # noqa: E402 (after the log redirect)

make_figures(Path(snakemake.input.tables[0]).parent, snakemake.output[0])
