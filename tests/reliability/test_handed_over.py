"""A results folder or config handed over cannot run code, reach a folder of yours or put
markup on the results page.

Four attacks: a config naming a module planted in the results folder (it used to be imported
at `snakemake -n`, before the results folder was checked) or a `results_dir` from which the
experiment folder is importable as a package; a results folder that is a symbolic link to a
folder of the user's (the workflow deleted and rewrote `figures/`, `tables/` there); the
results page reading `tables/summary.md` through a link to a file outside (and `summary.csv`
linked to `/dev/zero`); and HTML or Markdown in a run's `config.json` landing on the page.
Folders share the results root's prefix (`results` next to `results-evil`, `x` next to `x_ok`)
and links sit in different path components, so that a comparison of path prefixes fails.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from src.analysis.aggregate import aggregate
from src.analysis.figures import make_figures
from src.analysis.results_doc import md_escape, write_results_doc
from src.analysis.tables import make_summary
from src.config.workflow import WorkflowConfigError, validate_workflow_config
from src.containment import ContainmentError, archive_limit, check_results_links
from src.custom import installed_folders
from tests.analysis.synthetic import write_experiment
from tests.reliability.helpers import REPO, child_env, folder_state

SENTINEL_CODE = "import pathlib; pathlib.Path({path!r}).write_text('imported')\nclass Algo: ...\n"


def _one_line(message: str, *names: object) -> str:
    assert "\n" not in message.strip(), message
    for name in names:
        assert str(name) in message, f"the message does not name {name}: {message}"
    return message


def _test_config(**changes: Any) -> dict[str, Any]:
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config.update(changes)
    return config


def _snakemake(workdir: Path, config: dict[str, Any], *args: str, **env: str) -> Any:
    path = workdir.parent / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    snakemake = Path(sys.executable).with_name("snakemake")
    command = [str(snakemake), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    return subprocess.run(
        [*command, "--configfile", str(path), *args],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=300,
    )


def _line(stderr: str, prefix: str) -> str:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith(prefix)]
    return line


# ------------------------------------------------------------- 1. no import from a results folder


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(folder on the Python path, planted module, sentinel): `work/results/x/evil.py` writes
    the sentinel when imported; `work/results/x_ok/good.py` shares the results folder's prefix
    but lies outside it."""
    work = tmp_path / "work"
    sentinel = tmp_path / "imported.txt"
    for folder, name in (("x", "evil.py"), ("x/pkg", "__init__.py"), ("x_ok", "good.py")):
        (work / "results" / folder).mkdir(parents=True, exist_ok=True)
        (work / "results" / folder / name).write_text(SENTINEL_CODE.format(path=str(sentinel)))
    return work, work / "results" / "x" / "evil.py", sentinel


def test_snakemake_refuses_a_module_planted_in_the_results_folder_before_importing_it(
    planted: tuple[Path, Path, Path],
):
    work, module, sentinel = planted
    config = _test_config(
        results_dir=str(work / "results"),
        experiment_tag="x",
        custom_algos={"evil": "results.x.evil:Algo"},
    )
    done = _snakemake(work, config, "-n", PYTHONPATH=f"{work}{os.pathsep}{REPO}")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    line = _line(done.stderr, "invalid config:")
    _one_line(line, "'custom_algos.evil'", "results.x.evil:Algo", module, "results folder")
    assert not sentinel.exists(), "the planted module was imported"


@pytest.mark.parametrize(
    "entry, key",
    [
        ({"custom_algos": {"evil": "results.x.evil:Algo"}}, "custom_algos.evil"),
        ({"custom_envs": {"evil": "results.x.sub:make"}}, "custom_envs.evil"),
        ({"custom_envs": {"evil": "results.x.pkg.mod:make"}}, "custom_envs.evil"),
        (
            {"custom_envs": {"evil": {"factory": "examples.corridor:C", "cost": "results.x:c"}}},
            "custom_envs.evil.cost",
        ),
    ],
)
def test_every_import_path_is_resolved_without_importing(
    planted: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, entry: dict, key: str
):
    work, _, sentinel = planted
    (work / "results" / "x" / "sub.py").write_text(SENTINEL_CODE.format(path=str(sentinel)))
    monkeypatch.syspath_prepend(str(work))
    config = _test_config(results_dir=str(work / "results"), experiment_tag="x", **entry)
    with pytest.raises(WorkflowConfigError) as refused:
        validate_workflow_config(config, load_components=False)
    _one_line(str(refused.value), f"'{key}'", work / "results" / "x")
    assert not sentinel.exists()
    assert not [name for name in sys.modules if name.startswith("results.x")]


def test_a_module_next_to_the_results_folder_sharing_its_prefix_passes(
    planted: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
):
    work, _, sentinel = planted
    monkeypatch.syspath_prepend(str(work))
    config = _test_config(
        results_dir=str(work / "results"),
        experiment_tag="x",
        custom_algos={"good": "results.x_ok.good:Algo"},
    )
    validate_workflow_config(config, load_components=False)
    assert not sentinel.exists()


def test_a_results_folder_importable_as_a_package_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    study = tmp_path / "study"
    (study / "mpe2").mkdir(parents=True)
    (study / "mpe2" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.syspath_prepend(str(study))
    for results_dir, tag, names in [
        (str(study), "mpe2", ["'results_dir'", study, "importable"]),
        (str(REPO), "mpe2", ["'results_dir'", REPO]),
        (str(REPO.parent), REPO.name, ["'results_dir'", REPO]),
        (str(installed_folders()[0] / "nowhere"), "x", ["'results_dir'", "installed packages"]),
    ]:
        config = _test_config(results_dir=results_dir, experiment_tag=tag)
        with pytest.raises(WorkflowConfigError) as refused:
            validate_workflow_config(config, load_components=False)
        _one_line(str(refused.value), *names)
    # A sub-folder of a folder on the path (results/ in the checkout) is fine.
    validate_workflow_config(
        _test_config(results_dir=str(study / "results"), experiment_tag="mpe2"),
        load_components=False,
    )


# ------------------------------------------------------------- 2. a results folder that is a link


@pytest.fixture
def users_folder(tmp_path: Path) -> Path:
    """A folder of the user's, shaped like an experiment folder, with files to lose."""
    folder = tmp_path / "results-evil"
    for name in ("figures", "tables", "video_page"):
        (folder / name).mkdir(parents=True)
        (folder / name / "precious.txt").write_text(f"{name} must survive")
    return folder


@pytest.mark.parametrize("where", ["results_dir", "experiment folder", "relative component"])
def test_a_results_folder_reached_through_a_link_is_refused(
    tmp_path: Path, users_folder: Path, where: str
):
    work = tmp_path / "work"
    work.mkdir()
    if where == "results_dir":  # results -> a folder holding the user's `test`
        (tmp_path / "holder").mkdir()
        users_folder.rename(tmp_path / "holder" / "test")
        users_folder = tmp_path / "holder" / "test"
        link, results_dir = work / "results", "results"
        link.symlink_to(tmp_path / "holder")
    elif where == "experiment folder":  # results/test -> the user's folder
        (work / "results").mkdir()
        link, results_dir = work / "results" / "test", "results"
        link.symlink_to(users_folder)
    else:  # scratch/results/test, where scratch -> a folder holding results/test
        (tmp_path / "holder" / "results").mkdir(parents=True)
        users_folder.rename(tmp_path / "holder" / "results" / "test")
        users_folder = tmp_path / "holder" / "results" / "test"
        link, results_dir = work / "scratch", "scratch/results"
        link.symlink_to(tmp_path / "holder")
    before = folder_state(users_folder)
    config = _test_config(results_dir=results_dir, experiment_tag="test")

    done = _snakemake(work, config, "-n")

    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    line = _line(done.stderr, "refused:")
    _one_line(line, link, os.path.realpath(link), "symbolic link", "results_symlink_ok")
    assert folder_state(users_folder) == before
    assert not (users_folder / ".lock").exists()


def test_a_link_the_config_allows_passes_and_links_outside_the_config_are_ignored(tmp_path: Path):
    scratch = tmp_path / "scratch-real"
    scratch.mkdir()
    (tmp_path / "results").symlink_to(scratch)
    with pytest.raises(ContainmentError):
        check_results_links(tmp_path / "results", "test")
    check_results_links(tmp_path / "results", "test", allowed=True)
    # An absolute results_dir below a linked folder (e.g. /scratch -> /mnt/scratch): only
    # the folders the config names are checked.
    (scratch / "mine").mkdir()
    check_results_links(tmp_path / "results" / "mine", "test")
    work = tmp_path / "work"
    work.mkdir()
    (work / "results").symlink_to(scratch)
    config = _test_config(results_dir="results", experiment_tag="test", results_symlink_ok=True)
    done = _snakemake(work, config, "-n")
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------- 3. and 4. the results page


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished experiment `results/demo` whose runs' configs carry markup."""
    root = tmp_path_factory.mktemp("page") / "results" / "demo"
    run_dirs = write_experiment(root, envs=("hazard_grid",), runs=2, eval_episodes=30)
    for run_dir in run_dirs:
        path = run_dir / "config.json"
        config = json.loads(path.read_text())
        config["git_commit"] = "<img src=x onerror=alert(1)> [click](http://evil) *`x`*|"
        path.write_text(json.dumps(config))
    aggregate(run_dirs, root / "tables")
    make_summary(root / "tables")
    make_figures(root / "tables", root / "figures")
    return root


@pytest.fixture
def experiment(finished: Path, tmp_path: Path) -> Path:
    """A copy of `finished` in `tmp_path/results/demo`, next to `tmp_path/results-evil`."""
    copy = tmp_path / "results" / "demo"
    shutil.copytree(finished, copy)
    return copy


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the results folder, in a folder sharing its prefix."""
    (tmp_path / "results-evil").mkdir()
    path = tmp_path / "results-evil" / "secret.md"
    path.write_text("SECRET-41 | the user's notes\n")
    return path


def test_the_page_refuses_a_summary_linked_outside(experiment: Path, secret: Path, tmp_path: Path):
    planted = experiment / "tables" / "summary.md"
    planted.unlink()
    planted.symlink_to(secret)
    before = secret.read_bytes()
    with pytest.raises(ContainmentError) as refused:
        write_results_doc(experiment, tmp_path / "docs")
    _one_line(str(refused.value), planted, "symbolic link")
    assert secret.read_bytes() == before
    page = tmp_path / "docs" / "results.md"
    assert not page.exists() or "SECRET-41" not in page.read_text()


def test_the_page_refuses_a_linked_tables_folder(experiment: Path, tmp_path: Path):
    tables = experiment / "tables"
    tables.rename(tmp_path / "results-evil")
    tables.symlink_to(tmp_path / "results-evil")
    with pytest.raises(ContainmentError) as refused:
        write_results_doc(experiment, tmp_path / "docs")
    _one_line(str(refused.value), tables, "symbolic link")


def test_the_page_refuses_a_file_above_the_size_limit(experiment: Path, tmp_path: Path):
    summary = experiment / "tables" / "summary.md"
    os.truncate(summary, archive_limit()[0] + 1)  # sparse: nothing is written to disk
    with pytest.raises(ContainmentError) as refused:
        write_results_doc(experiment, tmp_path / "docs")
    _one_line(str(refused.value), summary, "above the limit")


def _capped() -> None:  # a regression fails with MemoryError, not by eating the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_the_command_refuses_a_summary_csv_linked_to_dev_zero(experiment: Path, tmp_path: Path):
    planted = experiment / "tables" / "summary.csv"
    planted.unlink()
    planted.symlink_to("/dev/zero")
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"results_dir": str(experiment.parent), "experiment_tag": "demo"})
    )
    done = subprocess.run(
        [sys.executable, "-m", "src.analysis.results_doc", str(config), str(tmp_path / "docs")],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=120,
        preexec_fn=_capped,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    _one_line(_line(done.stderr, "refused:"), planted, "symbolic link")


def test_values_from_the_run_folders_are_escaped_on_the_page(experiment: Path, tmp_path: Path):
    text = write_results_doc(experiment, tmp_path / "docs").read_text()
    commit = "<img src=x onerror=alert(1)> [click](http://evil) *`x`*|"
    for unescaped in (r"(?<!\\)<img", r"(?<!\\)\[click", r"(?<!\\)`x(?<!\\)`"):
        assert re.search(unescaped, text) is None, unescaped
    assert f"- code: commit {md_escape(commit)}" in text
    # Numbers the page computes stay as they are.
    assert "[Clopper-Pearson interval]" in text and "P(violation within 100 steps)" in text
