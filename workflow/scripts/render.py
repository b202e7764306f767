"""Script of the render rule: videos and a poster of one run's final policy."""

from pathlib import Path

from job import start_job

start_job(snakemake)

from src.evaluation.render import render_run  # noqa: E402 (after the log redirect)

render_run(
    Path(snakemake.input.config).parent, snakemake.output[0], episodes=snakemake.params.episodes
)
