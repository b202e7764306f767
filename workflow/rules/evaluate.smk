rule evaluate:
    """Violation probabilities of the final policy at every horizon, with intervals; the
    episodes themselves, and the shield's certificate as a record of its own."""
    input:
        config=RUN["config"],
        policy=RUN["policy"],
        code=script_code("evaluate"),
    output:
        eval=RUN["eval"],
        episodes=RUN["eval_episodes"],
        certificate=RUN["certificate"],
    log:
        run_log("evaluate"),
    benchmark:
        run_benchmark("evaluate")
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=config["resources"]["evaluate"]["mem_mb"],
        runtime=config["resources"]["evaluate"]["runtime"],
    script:
        "../scripts/evaluate.py"


rule floor:
    """The env's risk floor: a careful centralised team on every run's evaluation layouts."""
    input:
        code=script_code("floor"),
    output:
        FLOOR,
    log:
        experiment_log("floor-{env}"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=config["resources"]["evaluate"]["mem_mb"],
        runtime=config["resources"]["evaluate"]["runtime"],
    params:
        settings=floor_config,
    script:
        "../scripts/floor.py"
