"""Script of the video_page rule: one HTML page that plays every run's videos."""

from job import start_job

start_job(snakemake)

from src.analysis.video_page import write_video_page  # noqa: E402 (after the log redirect)

write_video_page(
    snakemake.input.videos,
    snakemake.params.labels,
    snakemake.output[0],
    title=snakemake.params.title,
    max_videos=snakemake.params.max_videos,
)
