"""Script of the summary rule: the summary table as CSV, Markdown and LaTeX."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.analysis.tables import make_summary  # noqa: E402 (after the log redirect)

make_summary(Path(snakemake.input.tables[0]).parent, floors=list(snakemake.input.floors))
