"""The user's modules as code inputs: which files, and for which rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.code_inputs import ROOT, component_code, import_closure, module_closure

SCRIPTS = ROOT / "workflow" / "scripts"


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `lab` and a top-level module `solo` of a user's, on the Python path."""
    package = tmp_path / "lab"
    (package / "envs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "envs" / "__init__.py").write_text("from .shared import SIZE\n")
    (package / "envs" / "shared.py").write_text("SIZE = 3\n")
    (package / "envs" / "task.py").write_text(
        "import numpy\nfrom . import shared\nfrom ..util import helper\n"
        "from src.envs.costs import mpe2_collisions\n"
    )
    (package / "util.py").write_text("def helper():\n    return 1\n")
    (package / "unused.py").write_text("")
    (tmp_path / "solo.py").write_text("import neighbour\n")
    (tmp_path / "neighbour.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_module_brings_its_package_its_relative_imports_and_its_src_files(user_code: Path):
    files = set(module_closure("lab.envs.task"))
    lab = user_code / "lab"
    expected = {
        lab / "__init__.py",
        lab / "envs" / "__init__.py",
        lab / "envs" / "shared.py",
        lab / "envs" / "task.py",
        lab / "util.py",
    }
    assert {f for f in files if f.is_relative_to(user_code)} == expected
    assert ROOT / "src" / "envs" / "costs.py" in files  # the src module it imports
    assert not any(".venv" in f.parts for f in files)  # numpy is the software environment
    assert set(module_closure("solo")) == {user_code / "solo.py", user_code / "neighbour.py"}


def test_installed_and_missing_modules_bring_nothing():
    assert module_closure("mpe2.simple_tag_v3") == []
    assert module_closure("no_such_module_anywhere") == []


def test_a_rule_gets_the_modules_its_code_reaches(user_code: Path):
    envs = {"mine": {"factory": "lab.envs.task:make", "cost": "solo:cost"}}
    algos = {"toy": "tests.custom.toy_algorithm:Preferences"}
    train = component_code(import_closure(SCRIPTS / "train.py"), envs=envs, algos=algos)
    assert {user_code / "lab" / "envs" / "task.py", user_code / "solo.py"} <= set(train)
    assert ROOT / "tests" / "custom" / "toy_algorithm.py" in train
    # The figures reach the algorithm registry only, exports neither registry.
    figures = component_code(import_closure(SCRIPTS / "figures.py"), envs=envs, algos=algos)
    assert ROOT / "tests" / "custom" / "toy_algorithm.py" in figures
    assert not any(f.is_relative_to(user_code) for f in figures)
    assert component_code(import_closure(SCRIPTS / "export.py"), envs=envs, algos=algos) == []
    # A named cost function lives in src; an installed factory brings nothing.
    installed = {"tag": {"factory": "mpe2.simple_tag_v3:parallel_env", "cost": "mpe2_collisions"}}
    assert component_code(import_closure(SCRIPTS / "train.py"), envs=installed, algos={}) == []


def test_a_module_changed_since_another_walk_read_it_is_read_again(user_code: Path):
    # Walks share each file's imports while the file is unchanged; an edit is read again.
    lab = user_code / "lab"
    (lab / "extra.py").write_text("")
    assert lab / "extra.py" not in set(module_closure("lab.envs.task"))
    (lab / "util.py").write_text("from lab import extra\n\n\ndef helper():\n    return 1\n")
    (lab / "caller.py").write_text("from lab.util import helper\n")
    assert lab / "extra.py" in set(module_closure("lab.caller"))
