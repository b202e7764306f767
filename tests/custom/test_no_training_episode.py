"""A run whose algorithm finishes no training episode is refused by its own training job, at
its end, in one line naming the run folder, before any of the run's files is written (not by
the summary, after every other job of the experiment)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from src.algos.train import train_run
from src.custom import register_algorithm
from src.records import NoTrainingEpisodeError
from src.runfiles import RunFiles
from tests.reliability.helpers import child_env
from tests.tiny_runs import tiny_run_config

REPO = Path(__file__).resolve().parents[2]
IDLE = "tests.custom.idle_algorithm:Idle"
SAYS = "the run finished no training episode"
# The workflow's train job of an idle run: workflow/scripts/train.py as Snakemake runs it.
TRAIN_JOB = """
import json, runpy, sys
from pathlib import Path
sys.path.insert(0, {scripts!r})
from tests.reliability.train_job import snakemake_object
snakemake = snakemake_object(Path({results!r}), Path({run!r}), json.loads({config!r}))
snakemake.config["custom_algos"] = {{"idle": {idle!r}}}
runpy.run_path({script!r}, init_globals={{"snakemake": snakemake}})
"""


def _written(run: Path) -> list[str]:
    """The run's output files that exist."""
    files = RunFiles(run)
    outputs = (files.config, files.policy, files.history_json, files.updates_json)
    return [path.name for path in outputs if path.exists()]


def test_train_run_refuses_a_run_without_an_episode_before_writing_it(tmp_path: Path):
    register_algorithm("idle", IDLE)
    run = tmp_path / "runs" / "hazard_grid" / "idle" / "run0"
    with pytest.raises(NoTrainingEpisodeError) as caught:
        train_run(tiny_run_config("idle", checkpoint_every=1), run, progress=False)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{run}: {SAYS}") and "summary" in message, message
    assert _written(run) == []
    assert not (run / ".train.lock").exists()


def test_the_train_job_fails_in_one_line_on_the_console_and_in_its_log(tmp_path: Path):
    register_algorithm("idle", IDLE)  # the run config records the algorithm's import path
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "idle" / "run0"
    script = TRAIN_JOB.format(
        scripts=str(REPO / "workflow" / "scripts"),
        results=str(results),
        run=str(run),
        config=json.dumps(tiny_run_config("idle")),
        idle=IDLE,
        script=str(REPO / "workflow" / "scripts" / "train.py"),
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert f"[failed] failed: {run}: {SAYS}" in line, done.stderr
    log = (run / "logs" / "train.log").read_text(encoding="utf-8")
    assert line in log.splitlines() and "Traceback" not in log, log
    assert _written(run) == []
