rule render:
    """Videos of the final policy (mp4, one per episode) and a poster frame."""
    input:
        config=RUN["config"],
        policy=RUN["policy"],
        code=script_code("render"),
    output:
        directory(RUN["videos"]),
    log:
        run_log("render"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        episodes=config["render"]["episodes"],
    script:
        "../scripts/render.py"
