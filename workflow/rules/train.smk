rule train:
    """Train one (env, algo, run): policy, episode history and per-update metrics."""
    input:
        code=script_code("train"),
    output:
        config=RUN["config"],
        policy=RUN["policy"],
        history=RUN["history_json"],
        updates=RUN["updates_json"],
    log:
        run_log("train"),
    benchmark:
        run_benchmark("train")
    conda:
        ENVIRONMENT
    threads: config["threads"]
    resources:
        mem_mb=config["resources"]["train"]["mem_mb"],
        runtime=config["resources"]["train"]["runtime"],
        # The CPUs a cluster job asks for: the config's threads, not threads capped at the
        # submitting machine's --cores (profiles/slurm/profile.yaml).
        cpus_per_task=config["threads"],
    params:
        run_config=run_config,
    script:
        "../scripts/train.py"
