"""Script of the wandb_upload rule: offline wandb runs, synced when enabled.

The upload spawns worker processes, and a spawned process re-runs this file (without the
`snakemake` object) as `__mp_main__`: everything but the imports sits under the main guard.
"""

import os
from pathlib import Path

from job import start_job

if __name__ == "__main__":
    # The outcome (offline only, synced, or why not) is one line the user must see.
    start_job(snakemake, console=True)

    from src.analysis.wandb_upload import upload_experiment, upload_later_command

    upload_experiment(
        Path(snakemake.output[0]).parents[1],  # results/{tag}/wandb/upload.done -> results/{tag}
        sync=snakemake.params.sync,
        timeout=snakemake.params.timeout,
        max_videos=snakemake.params.max_videos,
        # One offline run per process at a time, never more processes than CPUs.
        workers=max(1, min(snakemake.threads, os.cpu_count() or 1)),
        upload_later=upload_later_command(
            snakemake.params.configfiles,
            results_dir=snakemake.config["results_dir"],
            experiment_tag=snakemake.config["experiment_tag"],
        ),
    )
