"""The code a job runs is one input of its rule, the fingerprint of its files
(src/code_inputs.py): dry runs list no source file, and the fingerprint changes exactly when
the job's code does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from src.code_inputs import (
    FINGERPRINTS,
    code_listing,
    fingerprint_path,
    job_code,
    parse_code_name,
    write_fingerprint,
)
from src.containment import ContainmentError
from tests.workflow.conftest import BIN, REPO, job_counts, snakemake

CODE_INPUT = re.compile(r"/\.code/([\w-]+)\.sha256")
LONG = ("--quiet", "host")
"""A dry run that lists every job (a plain one prints the counts per rule only); after the
targets, since --quiet takes every value that follows it."""


def _jobs(dry_run: str) -> list[tuple[str, str, str]]:
    """(rule, input line, wildcards line) of every job a dry run prints."""
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", dry_run):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule is None:
            continue
        inputs = re.search(r"^\s+input: (.*)$", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        jobs.append(
            (
                rule.group(1),
                inputs.group(1) if inputs else "",
                wildcards.group(1) if wildcards else "",
            )
        )
    return jobs


def test_a_dry_run_lists_one_code_input_per_job_and_no_source_file(results_dir: Path):
    done = snakemake(
        "-n", *LONG, "--configfile", "config/paper.yaml", "--config", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    jobs = _jobs(done.stdout)
    counts = job_counts(done.stdout)
    assert len(jobs) == counts["total"]
    for rule, inputs, wildcards in jobs:
        if rule in ("all", "code_fingerprint"):
            continue
        assert not re.search(r"\bsrc/\S+\.py", inputs), (rule, wildcards, inputs)
        assert len(CODE_INPUT.findall(inputs)) == 1, (rule, wildcards, inputs)
    # A job of one run whose script reaches the algorithms (training, evaluation, videos) runs
    # its own algorithm's code (the built-in algorithms' own modules are imported by import
    # path): one fingerprint per (script, env, algo); the jobs of every other script run the
    # same code, one fingerprint per script. Each is listed by the one job that writes it
    # (and only when it is to run).
    names = {name for _, inputs, _ in jobs for name in CODE_INPUT.findall(inputs)}
    for rule, inputs, wildcards in jobs:
        if rule in ("all", "code_fingerprint"):
            continue
        (name,) = CODE_INPUT.findall(inputs)
        scope = dict(part.split("=") for part in wildcards.split(", ")) if wildcards else {}
        if rule in ("train", "evaluate", "render"):
            assert name == f"{rule}-{scope['env']}-{scope['algo']}", (rule, wildcards, name)
        else:
            assert "-" not in name, (rule, wildcards, name)
    fingerprints = {
        wildcards: inputs for rule, inputs, wildcards in jobs if rule == "code_fingerprint"
    }
    assert set(fingerprints) == {f"name={name}" for name in names}
    script = REPO / "workflow" / "scripts" / "train.py"
    listed = {
        algo: fingerprints[f"name=train-hazard_grid-{algo}"].split(", ")
        for algo in ("ippo", "ippo_lag", "shield")
    }
    files = job_code(script, envs={}, algos={}, env="hazard_grid", algo="ippo")[1]
    assert listed["ippo"] == [str(f.relative_to(REPO)) for f in files]
    # ippo's training lists neither the shield's code nor the multiplier's; each of theirs
    # lists its own.
    assert not [f for f in listed["ippo"] if f.startswith("src/algos/shield/")]
    assert "src/algos/ippo_lag.py" not in listed["ippo"]
    assert "src/algos/ippo_lag.py" in listed["ippo_lag"]
    assert {"src/algos/shield/trainer.py", "src/algos/shield/assemble.py"} <= set(listed["shield"])
    assert not results_dir.exists()


def _in(root: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The venv's `snakemake` with `args` in the workflow copy `root`."""
    return subprocess.run(
        [str(BIN / "snakemake"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )


@pytest.fixture
def workflow_copy(tmp_path: Path, results_dir: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """A copy of the workflow and its code (so that its code changes here and nowhere else),
    a config (.test/config.yaml with an algorithm of the user's, a module of a folder of its
    own), the module, and the environment that puts that folder on the Python path."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Snakefile", "workflow", "src", "config", "profiles"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, root / name)
    folder = tmp_path / "mine"
    folder.mkdir()
    module = folder / "fp_penalty_algo.py"
    shutil.copyfile(REPO / "examples" / "penalty.py", module)
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())
    config.update(
        results_dir=str(results_dir),
        algos=["ippo", "shield", "penalty"],
        custom_algos={"penalty": "fp_penalty_algo:PenalisedIPPO"},
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    pythonpath = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return root, config_file, module, {"PYTHONPATH": pythonpath}


def _code_inputs(root: Path, config_file: Path, env: dict[str, str]) -> dict[tuple[str, str], str]:
    """(rule, wildcards) -> the fingerprint its job takes, from a dry run."""
    done = _in(root, "-n", *LONG, "--configfile", str(config_file), env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    inputs = {}
    for rule, line, wildcards in _jobs(done.stdout):
        paths = [path for path in line.split(", ") if CODE_INPUT.search(path)]
        if rule not in ("all", "code_fingerprint"):
            (inputs[rule, wildcards],) = paths
    return inputs


def _listing(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _to_write(root: Path, paths: list[str], config_file: Path, env: dict[str, str]) -> set[str]:
    """The fingerprints of `paths` a dry run would write again."""
    done = _in(root, "-n", *paths, *LONG, "--configfile", str(config_file), env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    return set(
        re.findall(
            r"^(?:local)?rule code_fingerprint:\n(?:\s+\w+: .*\n)*?\s+output: (\S+)$",
            done.stdout,
            re.M,
        )
    )


TRAIN_OWN = ("train", "env=hazard_grid, algo=penalty, idx=0")
TRAIN_IPPO = ("train", "env=hazard_grid, algo=ippo, idx=0")
TRAIN_SHIELD = ("train", "env=hazard_grid, algo=shield, idx=0")


@pytest.mark.slow
def test_the_fingerprint_changes_exactly_with_the_code_of_the_job(
    workflow_copy: tuple[Path, Path, Path, dict[str, str]],
):
    root, config_file, module, env = workflow_copy
    configfile = ("--configfile", str(config_file))
    inputs = _code_inputs(root, config_file, env)
    # The jobs of the user's algorithm that reach it have fingerprints of their own.
    assert inputs[TRAIN_OWN].endswith("/.code/train-hazard_grid-penalty.sha256")
    assert inputs[TRAIN_IPPO].endswith("/.code/train-hazard_grid-ippo.sha256")

    # Writing the fingerprints: each lists every file of the job's code with its SHA-256.
    paths = sorted(set(inputs.values()))
    built = _in(root, "--cores", "1", *paths, *configfile, env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    listing = _listing(inputs[TRAIN_OWN])
    assert f"  {module}\n" in listing and "  src/algos/ippo.py\n" in listing
    assert "  workflow/scripts/train.py\n" in listing
    assert f"  {module}\n" not in _listing(inputs[TRAIN_IPPO])
    assert _to_write(root, paths, config_file, env) == set()

    # Touching a file without changing it writes nothing again.
    maths = root / "src" / "algos" / "maths.py"
    shield = root / "src" / "algos" / "shield" / "trainer.py"
    os.utime(module)
    os.utime(maths)
    assert _to_write(root, paths, config_file, env) == set()

    # Changing a file writes again exactly the fingerprints of the jobs that run it (the
    # user's module, the shield's trainer, then a module of every algorithm), and then the
    # listing holds the new content.
    changes = (
        (module, str(module)),
        (shield, "src/algos/shield/trainer.py"),
        (maths, "src/algos/maths.py"),
    )
    for changed_file, shown in changes:
        old = {path: _listing(path) for path in paths}
        changed_file.write_text(changed_file.read_text() + "\n# changed\n")
        runs_it = {path for path in paths if f"  {shown}\n" in old[path]}
        assert _to_write(root, paths, config_file, env) == runs_it, shown
        assert (inputs[TRAIN_SHIELD] in runs_it) == (changed_file != module)
        # A change to the shield reruns neither ippo's training nor the user's algorithm's.
        assert (inputs[TRAIN_OWN] in runs_it) == (changed_file != shield)
        assert (inputs[TRAIN_IPPO] in runs_it) == (changed_file == maths)
        built = _in(root, "--cores", "1", *paths, *configfile, env=env)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert {path for path in paths if _listing(path) != old[path]} == runs_it
        assert _to_write(root, paths, config_file, env) == set()
    # Every job keeps its one code input, the same file.
    assert _code_inputs(root, config_file, env) == inputs


def test_job_code_names_the_code_of_a_job_and_parses_back(tmp_path: Path):
    script = REPO / "workflow" / "scripts" / "train.py"
    name, files = job_code(script, envs={}, algos={}, env="hazard_grid", algo="ippo")
    assert name == "train-hazard_grid-ippo" and script in files
    assert REPO / "src" / "algos" / "ippo.py" in files
    assert REPO / "src" / "algos" / "shield" / "trainer.py" not in files
    shield = job_code(script, envs={}, algos={}, env="hazard_grid", algo="shield_dec")
    assert shield[0] == "train-hazard_grid-shield_dec"
    assert REPO / "src" / "algos" / "shield" / "trainer.py" in shield[1]
    # A job of no one run (the summary of all) runs every algorithm's code.
    summary = job_code(REPO / "workflow" / "scripts" / "summary.py", envs={}, algos={})
    assert summary[0] == "summary"
    algos = {"toy": "tests.custom.toy_algorithm:Preferences"}
    name, files = job_code(script, envs={}, algos=algos, env="hazard_grid", algo="toy")
    assert name == "train-hazard_grid-toy"
    assert REPO / "tests" / "custom" / "toy_algorithm.py" in files
    assert parse_code_name(name) == ("train", "hazard_grid", "toy")
    assert job_code(script, envs={}, algos=algos, env="hazard_grid", algo="ippo")[0] == (
        "train-hazard_grid-ippo"
    )
    assert (
        REPO / "tests" / "custom" / "toy_algorithm.py"
        not in (job_code(script, envs={}, algos=algos, env="hazard_grid", algo="ippo")[1])
    )
    with pytest.raises(ValueError, match="not the name of a job's code"):
        parse_code_name("train--x")


def test_write_fingerprint_stays_inside_the_results_folder(tmp_path: Path):
    results = tmp_path / "results"
    listing = code_listing([REPO / "src" / "__init__.py"])
    assert listing.endswith("  src/__init__.py\n")
    target = results / fingerprint_path("figures")
    log = results / "logs" / "code_fingerprint-figures.log"
    assert write_fingerprint(results, target, listing, log=log) == target
    assert target.read_text() == listing
    assert log.read_text() == f"{target}: 1 files\n"

    # A planted symlink in the results folder is refused, and nothing is written through it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (results / FINGERPRINTS / "summary.sha256").symlink_to(elsewhere / "summary.sha256")
    with pytest.raises(ContainmentError, match="symbolic link"):
        write_fingerprint(results, results / fingerprint_path("summary"), listing)
    assert list(elsewhere.iterdir()) == []
    # Only a fingerprint's path is written.
    with pytest.raises(ContainmentError, match="not a code fingerprint"):
        write_fingerprint(results, results / "tables" / "summary.sha256", listing)
