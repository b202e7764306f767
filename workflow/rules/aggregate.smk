rule aggregate:
    """All runs' evaluation, history and update tables concatenated (Parquet and CSV)."""
    input:
        configs=all_runs(RUN["config"]),
        evals=all_runs(RUN["eval"]),
        histories=all_runs(RUN["history"]),
        updates=all_runs(RUN["updates"]),
        code=script_code("aggregate"),
    output:
        eval_parquet=TABLES["eval_parquet"],
        eval_csv=report(
            TABLES["eval_csv"], caption="../report/eval.rst", category="Tables"
        ),
        history_parquet=TABLES["history_parquet"],
        history_csv=TABLES["history_csv"],
        updates_parquet=TABLES["updates_parquet"],
        updates_csv=TABLES["updates_csv"],
    log:
        experiment_log("aggregate"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        run_dirs=all_runs(RUN_DIR),
    script:
        "../scripts/aggregate.py"
