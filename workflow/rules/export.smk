rule export:
    """Training history and per-update metrics as Parquet with explicit schemas."""
    input:
        config=RUN["config"],
        history=RUN["history_json"],
        updates=RUN["updates_json"],
        code=script_code("export"),
    output:
        history=RUN["history"],
        updates=RUN["updates"],
    log:
        run_log("export"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/export.py"
