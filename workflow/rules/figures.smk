rule figures:
    """Violation probability against horizon, learning curves and the other figures: those
    the tables have data for (src.analysis.figures.figure_plan; the log names the others).
    """
    input:
        tables=list(TABLES.values()),
        code=script_code("figures"),
    output:
        report(
            directory(FIGURES_DIR),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        experiment_log("figures"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/figures.py"


rule summary:
    """The summary table of the final policies (CSV, Markdown, LaTeX)."""
    input:
        tables=list(TABLES.values()),
        floors=all_envs(FLOOR),
        code=script_code("summary"),
    output:
        csv=report(SUMMARY["csv"], caption="../report/summary.rst", category="Tables"),
        md=SUMMARY["md"],
        tex=SUMMARY["tex"],
    log:
        experiment_log("summary"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/summary.py"
