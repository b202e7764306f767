"""A real run of `.test/config.yaml`: every output exists and has its schema, then the report."""

from __future__ import annotations

import json
import os
import re
import shlex
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from src.code_inputs import job_code
from src.schemas import (
    EVAL_EPISODES_SCHEMA,
    EVAL_SCHEMA,
    HISTORY_SCHEMA,
    UPDATES_SCHEMA,
    read_parquet,
)
from tests.wandb_file import read_history
from tests.workflow.conftest import REPO, WorkflowRun, job_counts, snakemake

pytestmark = pytest.mark.slow

CONFIG = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())


def check_experiment(experiment: Path, config: dict = CONFIG) -> None:
    """Assert that a finished run of `config` (`.test/config.yaml` by default) left every
    output, well formed.

    Shared with the SLURM test, which runs the same config through the cluster profile, and
    with the run of `.test/custom.yaml` (tasks and an algorithm given by import path).
    """
    runs = [
        experiment / "runs" / env / algo / f"run{idx}"
        for env in config["envs"]
        for algo in config["algos"]
        for idx in range(config["num_runs"])
    ]
    for run in runs:
        history = json.loads((run / "history.json").read_text())
        assert history, f"{run}: no training episode"
        run_config = json.loads((run / "config.json").read_text())
        assert run_config["algo"] == run.parent.name
        assert run_config["seed"] == int(run.name[3:])
        history_table = read_parquet(run / "history.parquet", HISTORY_SCHEMA)
        assert history_table.num_rows == len(history)
        assert read_parquet(run / "updates.parquet", UPDATES_SCHEMA).num_rows >= 1
        eval_table = read_parquet(run / "eval.parquet", EVAL_SCHEMA)
        horizons = config["base"]["final_policy_eval_horizons"]
        modes = 2 if run.parent.name == "shield" else 1
        assert eval_table.num_rows == len(horizons) * modes
        assert set(eval_table.column("n").to_pylist()) == {
            config["base"]["final_policy_eval_episodes"]
        }
        episodes = read_parquet(run / "eval_episodes.parquet", EVAL_EPISODES_SCHEMA)
        assert episodes.num_rows == config["base"]["final_policy_eval_episodes"] * modes
        certificate = json.loads((run / "certificate.json").read_text())
        assert certificate["has_certificate"] == (run.parent.name == "shield")
        videos = sorted((run / "videos").glob("*.mp4"))
        assert len(videos) == config["render"]["episodes"]
        assert all(video.stat().st_size > 0 for video in videos)
        assert (run / "videos" / "poster.png").stat().st_size > 0
        assert (run / "logs" / "train.log").stat().st_size > 0
        assert (run / "logs" / "train.benchmark.tsv").is_file()
        assert not (run / "checkpoint").exists()

    tables = experiment / "tables"
    for name in ("eval", "history", "updates"):
        assert pq.read_table(tables / f"{name}.parquet").num_rows >= len(runs)
        assert (tables / f"{name}.csv").stat().st_size > 0
    for ext in ("csv", "md", "tex"):
        assert (tables / f"summary.{ext}").stat().st_size > 0
    marl_eval = json.loads((tables / "marl_eval.json").read_text())
    assert sorted(marl_eval["safe_marl"]) == sorted(config["envs"])
    figures = sorted((experiment / "figures").glob("*.png"))
    assert figures and all(figure.stat().st_size > 0 for figure in figures)

    page = (experiment / "video_page" / "index.html").read_text()
    assert page.count("<video") == len(runs) * config["render"]["episodes"]

    manifest = json.loads((experiment / "wandb" / "manifest.json").read_text())
    assert len(manifest) == len(runs)
    for run in runs:
        name = "-".join(run.relative_to(experiment / "runs").parts)
        run_files = list((experiment / "wandb" / manifest[name]["folder"]).glob("run-*.wandb"))
        assert len(run_files) == 1
        rows = read_history(run_files[0])
        history = json.loads((run / "history.json").read_text())
        updates = json.loads((run / "updates.json").read_text())
        episode_steps = [row["_step"] for row in rows if "team_return" in row]
        assert episode_steps == sorted(e["t_end"] for e in history), (
            f"{name}: one wandb history row per training episode, at its t_end"
        )
        update_steps = [row["_step"] for row in rows if "global_step" in row]
        assert update_steps == [u["global_step"] for u in updates], (
            f"{name}: one wandb history row per policy update, at its global_step"
        )
        steps = [row["_step"] for row in rows]
        assert steps == sorted(set(steps)), f"{name}: wandb rows in env-step order"
    done = json.loads((experiment / "wandb" / "upload.done").read_text())
    assert "upload off" in done["outcome"]
    # The upload-later line reruns this experiment: its config file and results folder.
    later = shlex.split(done["upload_later"])
    assert Path(later[later.index("--configfile") + 1]).parent == REPO / ".test"
    assert f"results_dir={experiment.parent}" in later
    assert f"experiment_tag={experiment.name}" in later
    assert later[-2:] == ["--forcerun", "wandb_upload"] and done["upload_later"] in done["outcome"]


def fingerprint_files(experiment: Path, record: dict) -> set[str]:
    """The files (absolute) listed in the code fingerprint, the one code input, of the job
    that wrote the import `record` (tests/workflow/record_imports)."""
    stem = record["script"].removesuffix(".py")
    wildcards = record["wildcards"]
    scoped = "-".join([stem, *(wildcards[key] for key in ("env", "algo") if key in wildcards)])
    fingerprint = next(
        path
        for path in (
            experiment / ".code" / f"{scoped}.sha256",
            experiment / ".code" / f"{stem}.sha256",
        )
        if path.is_file()
    )
    return {
        str((REPO / line.split("  ", 1)[1]).resolve())
        for line in fingerprint.read_text().splitlines()
    }


def _rule_scripts() -> dict[str, str]:
    """Rule name -> its script, and a check that its `code` input is that script's closure."""
    scripts = {}
    for path in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule )", path.read_text(encoding="utf-8")):
            rule = re.match(r"rule (\w+):", block)
            script = re.search(r'script:\s*"\.\./scripts/(\w+)\.py"', block)
            if rule and script:
                assert f'code=script_code("{script.group(1)}")' in block, (
                    f"rule {rule.group(1)} in {path.name} does not list its script's code"
                )
                scripts[rule.group(1)] = script.group(1)
    return scripts


def test_test_config_runs_end_to_end(test_config_run: WorkflowRun, test_config_report: Path):
    done, args, imports = test_config_run.done, test_config_run.args, test_config_run.imports
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    counts = job_counts(done.stdout + done.stderr)
    runs = len(CONFIG["envs"]) * len(CONFIG["algos"]) * CONFIG["num_runs"]
    assert counts["train"] == runs and counts["wandb_upload"] == 1

    experiment = test_config_run.experiment
    check_experiment(experiment)

    # Every src module a job imported is code of the job (its script's import closure, and
    # the modules of its own algorithm that its run imports by import path), and every rule
    # that runs a script lists that code.
    scripts = _rule_scripts()
    records = [json.loads(p.read_text()) for p in imports.glob("*.json")]
    assert {r["script"] for r in records} == {f"{s}.py" for s in scripts.values()}
    for record in records:
        wildcards = record["wildcards"]
        _, files = job_code(
            REPO / "workflow" / "scripts" / record["script"],
            envs=CONFIG.get("custom_envs") or {},
            algos=CONFIG.get("custom_algos") or {},
            env=wildcards.get("env"),
            algo=wildcards.get("algo"),
        )
        code = {str(p.resolve()) for p in files}
        missing = sorted(set(record["files"]) - code)
        assert not missing, f"{record['script']} imported {missing}, not inputs of its rule"
        # The job's one code input, its fingerprint, lists them (and nothing else is listed).
        listed = fingerprint_files(experiment, record)
        assert set(record["files"]) <= listed and listed == code

    # Nothing is left to do: a second call runs no job.
    again = snakemake("-n", *args)
    assert again.returncode == 0, again.stderr
    assert "Nothing to be done" in again.stdout + again.stderr

    # Changing a module reruns exactly the jobs whose code imports it, and what follows them.
    # The floor's witness team reads the env, never the training code.
    every_job = {
        rule: n
        for rule, n in counts.items()
        if rule not in ("all", "total", "floor", "code_fingerprint")
    }
    for module, expected in (
        ("src/algos/maths.py", every_job),
        ("src/envs/witness.py", {"floor": 1, "summary": 1, "wandb_upload": 1}),
        ("src/analysis/figures.py", {"figures": 1, "wandb_upload": 1}),
        ("src/analysis/video_page.py", {"video_page": 1, "wandb_upload": 1}),
    ):
        path = REPO / module
        before, source = path.stat(), path.read_bytes()
        try:
            # A change of content: Snakemake ignores a newer mtime when the checksum it
            # recorded for the input is unchanged.
            path.write_bytes(source + b"\n")
            dry = snakemake("-n", *args)
        finally:
            path.write_bytes(source)
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert dry.returncode == 0, dry.stderr
        marked = {
            rule: n for rule, n in job_counts(dry.stdout + dry.stderr).items() if rule != "total"
        }
        marked.pop("all", None)
        # The fingerprints listing the module, the jobs' one code input, are written again.
        assert marked.pop("code_fingerprint", 0) >= 1, f"touching {module}: no fingerprint"
        assert marked == expected, f"touching {module} marks {marked}"

    with zipfile.ZipFile(test_config_report) as archive:
        names = archive.namelist()
    assert any(name.endswith("report.html") for name in names)
    assert any(name.endswith("index.html") and "/data/raw/" in name for name in names)
    assert sum(name.endswith(".mp4") for name in names) == runs * CONFIG["render"]["episodes"]
    assert any(name.endswith("summary.csv") for name in names)
    assert any(name.endswith("eval.csv") for name in names)
    assert any(name.endswith(".png") and "poster" not in name for name in names)
