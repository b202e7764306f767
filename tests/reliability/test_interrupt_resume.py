"""Ctrl-C and resume as a user sees them on Snakemake's console and in the run's logs.

A terminal's Ctrl-C sends SIGINT to Snakemake and its jobs (one process group). The train job
must end with one line (where training stopped, what a rerun does) instead of a traceback,
exit as an interrupted process does, and leave a valid checkpoint; the same command then
resumes, says so on the console and in `logs/train.log`, and keeps the interrupted attempt's
log as `logs/train.1.log`. Any other job ends with one line too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from src.algos.checkpoint import latest_checkpoint
from tests.reliability.helpers import REPO, child_env
from tests.tiny_runs import four_update_config

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
FAULTS = REPO / "tests" / "reliability" / "fault_injection"
RUN = "results/test/runs/hazard_grid/ippo/run0"
TIMEOUT = 300.0

# The workflow's train rule and script on one tiny run (4 updates, a checkpoint after each).
SNAKEFILE = """
import json

config.update({{"results_dir": "results", "experiment_tag": "test"}})

rule train:
    output:
        config="{run}/config.json",
        policy="{run}/policy.pt",
        history="{run}/history.json",
        updates="{run}/updates.json",
    log:
        "{run}/logs/train.log",
    threads: 1
    params:
        run_config=json.loads({config!r}),
    script:
        "{script}"
"""


def _workflow(folder: Path) -> list[str]:
    config = four_update_config()
    script = REPO / "workflow" / "scripts" / "train.py"
    text = SNAKEFILE.format(run=RUN, config=json.dumps(config), script=script)
    (folder / "Snakefile").write_text(text, encoding="utf-8")
    return [str(SNAKEMAKE), "--cores", "1"]


def _terminal_signals() -> None:
    """In the child, before it starts: Ctrl-C handled as in a terminal's foreground job. A
    shell starts background commands with SIGINT ignored, and Python keeps an ignored SIGINT,
    so a test run in the background would otherwise wait for an interrupt that never lands."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines(text: str, part: str) -> list[str]:
    return [line for line in text.splitlines() if part in line]


def test_ctrl_c_ends_training_in_one_line_and_the_same_command_resumes(tmp_path: Path):
    command = _workflow(tmp_path)
    marker = tmp_path / "paused"
    env = child_env(PYTHONPATH=os.pathsep.join((str(REPO), str(FAULTS))))
    first = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**env, "RELIABILITY_PAUSE_TRAINING": f"after_checkpoint:1:{marker}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_terminal_signals,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training never paused"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
        out, err = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    console = f"{out}\n{err}"
    line = (
        f"[interrupted] interrupted training {RUN} during update 3 of 4; rerun the same "
        "command to resume from its last checkpoint (after update 2)"
    )
    # Snakemake's own lines may run into it (two processes write to one terminal).
    (shown,) = _lines(console, "interrupted training")
    assert shown.endswith(line), console[-3000:]
    assert "Traceback" not in console and "KeyboardInterrupt" not in console, console[-3000:]
    assert "died with <Signals.SIGINT: 2>" in console, console[-3000:]  # an interrupt's exit
    log = (tmp_path / RUN / "logs" / "train.log").read_text(encoding="utf-8")
    (logged,) = _lines(log, "interrupted")
    assert logged.endswith(line) and logged in shown and "Traceback" not in log
    assert latest_checkpoint(tmp_path / RUN).name == "update-000002"

    second = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    console = f"{second.stdout}\n{second.stderr}"
    assert second.returncode == 0, console[-3000:]
    resumed = (
        f"[train] resumed {RUN} from its checkpoint after update 2 of 4 "
        "(checkpoint/update-000002); attempt 2; the log of attempt 1 is logs/train.1.log"
    )
    (shown,) = _lines(console, "resumed")
    assert shown.endswith(resumed), console[-3000:]
    logs = tmp_path / RUN / "logs"
    log = (logs / "train.log").read_text(encoding="utf-8")
    (logged,) = _lines(log, "resumed")
    assert logged.endswith(resumed) and logged in shown and "[train] finished" in log
    assert "interrupted" not in log
    earlier = (logs / "train.1.log").read_text(encoding="utf-8")
    assert "[train] training ippo on hazard_grid" in earlier and line in earlier
    assert "resumed" not in earlier
    names = sorted(path.name for path in (tmp_path / RUN).rglob("*"))
    assert "checkpoint" not in names and ".train.lock" not in names, names
    assert ".train.attempt.log" not in names, names


INTERRUPTED_JOB = """
import sys, time
from pathlib import Path
sys.path.insert(0, {scripts!r})
from job import start_job
from tests.reliability.train_job import snakemake_object
start_job(snakemake_object(Path({results!r}), Path({run!r}), {{}}))
print("ready", file=sys.__stdout__, flush=True)
time.sleep(120)
"""


def test_ctrl_c_ends_any_job_in_one_line(tmp_path: Path):
    results = tmp_path / "results" / "test"
    run = results / "runs" / "hazard_grid" / "ippo" / "run0"
    script = INTERRUPTED_JOB.format(
        scripts=str(REPO / "workflow" / "scripts"), results=str(results), run=str(run)
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_terminal_signals,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGINT  # status 130 in a shell
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    assert line.endswith(
        "[interrupted] interrupted; rerun the same command to run this job again"
    ), err
    log = (run / "logs" / "train.log").read_text(encoding="utf-8")
    assert log.splitlines() == [line]
