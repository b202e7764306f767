"""No file outside a results folder is written through a hard link.

The pipeline writes every result as a new file renamed into place, but Snakemake writes its
benchmark and log files in place: `evaluate.benchmark.tsv` hard-linked to a file of the user's
was rewritten, and a `cp -al` snapshot of a results folder changed with a rerun. The workflow's
start check refuses a file under the results folder with links outside it, in one line naming
it, before any job runs; links whose every name lies inside the folder (training's second name
of its running log) pass. The outside file sits in a folder sharing the root's prefix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from src.containment import ContainmentError, check_results_folder
from src.runfiles import RunFiles
from tests.reliability.test_handed_over import _line, _one_line, _snakemake, _test_config


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(results folder `work/results/test`, its evaluation benchmark, the user's file it is
    a hard link of, in `work/results-evil`)."""
    work = tmp_path / "work"
    run = RunFiles(work / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0")
    benchmark = run.benchmark("evaluate")
    benchmark.parent.mkdir(parents=True)
    users = work / "results-evil" / "notes.tsv"
    users.parent.mkdir(parents=True)
    users.write_text("the user's notes\n")
    os.link(users, benchmark)
    return work / "results" / "test", benchmark, users


def test_a_file_linked_outside_is_refused_naming_it(linked: tuple[Path, Path, Path]):
    results, benchmark, _ = linked
    with pytest.raises(ContainmentError) as refused:
        check_results_folder(results)
    _one_line(str(refused.value), benchmark, "2 hard links", "1 of them outside", results)


def test_links_whose_names_all_lie_inside_pass(linked: tuple[Path, Path, Path]):
    results, benchmark, users = linked
    benchmark.unlink()
    log = benchmark.parent / "train.log"
    log.write_text("training\n")
    os.link(log, benchmark.parent / ".train.running.log")
    check_results_folder(results)
    # A name in wandb's own tree counts as inside too.
    (results / "wandb" / "wandb").mkdir(parents=True)
    os.link(log, results / "wandb" / "wandb" / "debug.log")
    check_results_folder(results)
    os.link(users, results / "wandb" / "wandb" / "notes.tsv")  # not looked at in there
    check_results_folder(results)


def test_the_workflow_refuses_it_before_any_job(linked: tuple[Path, Path, Path]):
    results, benchmark, users = linked
    work = results.parent.parent
    before = users.read_bytes()
    done = _snakemake(work, _test_config(), "-n")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    _one_line(_line(done.stderr, "refused:"), benchmark, "hard links")
    assert users.read_bytes() == before
