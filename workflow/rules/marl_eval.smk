rule marl_eval:
    """The experiment in marl-eval's JSON format (src/analysis/marl_eval_json.py): per run and
    policy the training by update and the final evaluation's episodes, for marl-eval's tools
    and whatever reads what BenchMARL and Mava write."""
    input:
        configs=all_runs(RUN["config"]),
        histories=all_runs(RUN["history"]),
        updates=all_runs(RUN["updates"]),
        episodes=all_runs(RUN["eval_episodes"]),
        code=script_code("marl_eval_json"),
    output:
        MARL_EVAL,
    log:
        experiment_log("marl_eval"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        run_dirs=all_runs(RUN_DIR),
    script:
        "../scripts/marl_eval_json.py"
