rule video_page:
    """An HTML page playing every run's videos, registered as a report directory."""
    input:
        videos=all_runs(RUN["videos"]),
        code=script_code("video_page"),
    output:
        report(
            directory(VIDEO_PAGE_DIR),
            htmlindex="index.html",
            caption="../report/videos.rst",
            category="Videos",
        ),
    log:
        experiment_log("video_page"),
    conda:
        ENVIRONMENT
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        labels=all_runs("{env} {algo} run{idx}"),
        title=f"Final policies of {config['experiment_tag']}",
        # One video per rendered episode: a folder holding more is refused.
        max_videos=config["render"]["episodes"],
    script:
        "../scripts/video_page.py"
