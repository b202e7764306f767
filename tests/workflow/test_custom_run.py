"""A real run of `.test/custom.yaml`: two mpe2 tasks no one here wrote, named by a config alone,
with every built-in algorithm and a toy algorithm defined outside src/, through the whole
workflow (train, evaluate, render, export, tables, figures, video page, wandb, report)."""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from src.analysis import figures
from src.code_inputs import component_code, import_closure
from tests.workflow.conftest import REPO, WorkflowRun, job_counts, run_recorded, snakemake
from tests.workflow.test_real_run import check_experiment, fingerprint_files

pytestmark = pytest.mark.slow

CONFIG = yaml.safe_load((REPO / ".test" / "custom.yaml").read_text())
TOY = REPO / "tests" / "custom" / "toy_algorithm.py"


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory: pytest.TempPathFactory) -> WorkflowRun:
    """The run of `.test/custom.yaml`, every job recording the files it imported."""
    return run_recorded(tmp_path_factory.mktemp("custom_run"), ".test/custom.yaml")


def _legends(tables: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Figure name -> its legend labels, drawing the figures from the run's tables."""
    labels: dict[str, list[str]] = {}
    save = figures.save_figure

    def recording_save(fig, directory, name, *args, **kwargs):
        labels[name] = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
        return save(fig, directory, name, *args, **kwargs)

    monkeypatch.setattr(figures, "save_figure", recording_save)
    figures.make_figures(tables, out)
    return labels


def test_custom_tasks_and_algorithm_run_end_to_end(
    custom_run: WorkflowRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    done = custom_run.done
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    counts = job_counts(done.stdout + done.stderr)
    assert counts["train"] == counts["evaluate"] == counts["render"] == 8
    experiment = custom_run.results_dir / CONFIG["experiment_tag"]
    check_experiment(experiment, CONFIG)

    # The toy algorithm is a policy of the summary and a curve of the figures, per task.
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    policies = set(zip(summary["env"], summary["policy"], strict=True))
    for env in CONFIG["envs"]:
        assert {(env, "toy"), (env, "shield"), (env, "shield (shield off)")} <= policies
    # The figures job registered the toy algorithm as a job does (start_job), and so here.
    from src.custom import register_config

    register_config(CONFIG)
    legends = _legends(experiment / "tables", tmp_path, monkeypatch)
    for name in ("violation_vs_horizon", "learning_curves", "return_vs_risk"):
        assert "toy (1 run)" in legends[name], (name, legends[name])

    # Every file of the user's code a job imported is an input of the job's rule.
    records = [json.loads(path.read_text()) for path in custom_run.imports.glob("*.json")]
    toy_imports = 0
    for record in records:
        closure = import_closure(REPO / "workflow" / "scripts" / record["script"])
        wildcards = record["wildcards"]
        inputs = component_code(
            closure,
            envs={n: e for n, e in CONFIG["custom_envs"].items() if wildcards.get("env", n) == n},
            algos={
                n: e for n, e in CONFIG["custom_algos"].items() if wildcards.get("algo", n) == n
            },
        )
        missing = sorted(set(record["user_files"]) - {str(p) for p in inputs})
        assert not missing, f"{record['script']} {wildcards} imported {missing}, not inputs"
        # ... listed in the fingerprint that is the job's one code input.
        listed = fingerprint_files(experiment, record)
        assert set(record["user_files"]) | set(record["files"]) <= listed, record
        toy_imports += str(TOY) in record["user_files"]
    assert toy_imports >= 4  # train, evaluate and render of the toy runs, and the figures

    # The report holds the custom runs' videos and figures like the built-in ones'.
    report = experiment / "report.zip"
    made = snakemake(*custom_run.args, "--report", str(report))
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    with zipfile.ZipFile(report) as archive:
        names = archive.namelist()
    assert sum(name.endswith(".mp4") for name in names) == 8
    assert any(name.endswith("summary.csv") for name in names)


def test_changing_the_toy_algorithm_reruns_exactly_its_jobs(custom_run: WorkflowRun):
    assert custom_run.done.returncode == 0
    again = snakemake("-n", *custom_run.args)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    before, source = TOY.stat(), TOY.read_bytes()
    try:
        TOY.write_bytes(source + b"\n")
        dry = snakemake("-n", "--quiet", "host", *custom_run.args)  # every job listed
    finally:
        TOY.write_bytes(source)
        os.utime(TOY, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert dry.returncode == 0, dry.stderr
    marked = {rule: n for rule, n in job_counts(dry.stdout + dry.stderr).items()}
    marked.pop("all", None)
    marked.pop("total", None)
    # The fingerprints listing the toy algorithm, the jobs' one code input, are written again.
    assert marked.pop("code_fingerprint", 0) >= 1
    # The toy runs (one per task) and what follows them; the built-in algorithms' runs stay.
    assert marked == {
        "train": 2,
        "evaluate": 2,
        "render": 2,
        "export": 2,
        "aggregate": 1,
        "marl_eval": 1,
        "figures": 1,
        "summary": 1,
        "video_page": 1,
        "wandb_upload": 1,
    }
    trained = re.findall(
        r"rule train:\n(?:\s+\w+: .*\n)*?\s+output: (\S+)/config\.json", dry.stdout
    )
    assert sorted(trained) == sorted(
        f"{custom_run.results_dir}/custom/runs/{env}/toy/run0" for env in CONFIG["envs"]
    )
