"""What Snakemake prints: a dry run reads in a screen or two (the jobs per rule and why), the
long form lists every job on request, and a real run that fails still names the failed job's
rule and log, with the job's own one line."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.custom.conftest import tiny_config
from tests.workflow.conftest import job_counts, snakemake

MAX_LINES = 400
HINT = "snakemake -n --quiet host"


def _paper_dry_run(results_dir: Path, *args: str) -> str:
    done = snakemake(
        "-n", *args, "--configfile", "config/paper.yaml", "--config", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout + done.stderr


def test_a_dry_run_of_the_paper_config_prints_the_jobs_per_rule_not_each_job(results_dir: Path):
    output = _paper_dry_run(results_dir)
    lines = output.splitlines()
    assert len(lines) < MAX_LINES, f"{len(lines)} lines:\n{output}"
    counts = job_counts(output)
    assert counts["train"] == 60 and counts["total"] > 240
    assert not re.search(r"^(local)?rule \w+:$", output, re.M)  # no job block
    assert "Reasons:" in output and HINT in output
    assert not results_dir.exists()


def test_the_long_form_lists_every_job(results_dir: Path):
    output = _paper_dry_run(results_dir, "--quiet", "host")
    blocks = re.findall(r"^(?:local)?rule (\w+):$", output, re.M)
    assert len(blocks) == job_counts(output)["total"]
    assert blocks.count("train") == 60 and HINT not in output


def test_a_failed_job_of_a_real_run_names_its_rule_and_log(tmp_path: Path):
    # An algorithm that never steps its env: its training job fails at its end.
    config = tiny_config(
        ["hazard_grid"],
        ["idle"],
        custom_algos={"idle": "tests.custom.idle_algorithm:Idle"},
        results_dir=str(tmp_path / "results"),
    )
    config_file = tmp_path / "idle.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    run = tmp_path / "results" / "custom" / "runs" / "hazard_grid" / "idle" / "run0"
    done = snakemake(str(run / "policy.pt"), "--cores", "1", "--configfile", str(config_file))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Error in rule train:" in output, output
    assert f"{run}/logs/train.log" in output, output
    # The job's own line, on the console and again from its log (show-failed-logs).
    lines = [ln for ln in output.splitlines() if "[failed] failed:" in ln]
    assert lines and len(set(lines)) == 1, output
    assert lines[0].endswith(
        f"failed: {run}: the run finished no training episode in its 2 updates, and the "
        "summary and the learning curves need at least one: idle's train() must step the env "
        "until episodes end and add their EpisodeLogs to its history (src.algos.api)"
    ), lines[0]
    assert "Traceback" not in output
    assert not (run / "policy.pt").exists() and not (run / "history.json").exists()
