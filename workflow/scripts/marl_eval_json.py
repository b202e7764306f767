"""Script of the marl_eval rule: the experiment in marl-eval's JSON format."""

from job import start_job

start_job(snakemake)

from src.analysis.marl_eval_json import write_marl_eval  # noqa: E402 (after the log redirect)

write_marl_eval(snakemake.params.run_dirs, snakemake.output[0])
