rule wandb_upload:
    """One offline wandb run per training run (episode and per-update history, evaluation,
    figures, videos); synced to the server only when the config enables upload and
    credentials exist. The output records what happened and the command that uploads the
    rest later (`--forcerun wandb_upload` with this experiment's config files)."""
    input:
        configs=all_runs(RUN["config"]),
        histories=all_runs(RUN["history_json"]),
        updates=all_runs(RUN["updates_json"]),
        evals=all_runs(RUN["eval"]),
        videos=all_runs(RUN["videos"]),
        figures=FIGURES_DIR,
        summary=SUMMARY["csv"],
        video_page=VIDEO_PAGE_DIR,
        code=script_code("wandb_upload"),
    output:
        WANDB_DONE,
    log:
        experiment_log("wandb_upload"),
    localrule: True
    conda:
        ENVIRONMENT
    threads: workflow.cores
    resources:
        mem_mb=lambda wildcards, threads: 1000 + 600 * threads,
        runtime=30,
    params:
        sync=config["wandb"]["upload"],
        timeout=config["wandb"]["sync_timeout"],
        # One video per rendered episode: a folder holding more is refused.
        max_videos=config["render"]["episodes"],
        # The upload-later line names this experiment's config files (the default's when
        # none was given), so that pasted back it does not schedule another experiment.
        configfiles=[str(path) for path in workflow.overwrite_configfiles]
        or ["config/config.yaml"],
    script:
        "../scripts/wandb_upload.py"
