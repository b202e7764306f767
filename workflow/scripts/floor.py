"""Script of the floor rule: the env's risk floor (witness team) as JSON."""

from job import start_job

start_job(snakemake)

from src.analysis.floor import task_floor, write_floor  # noqa: E402 (after the log redirect)

write_floor(task_floor(**snakemake.params.settings), snakemake.output[0])
