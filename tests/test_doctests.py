"""Every docstring example in `src` runs and shows what it says (doctest)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import src

MODULES = sorted(
    info.name for info in pkgutil.walk_packages(src.__path__, prefix="src.") if not info.ispkg
)


def test_the_examples_are_found() -> None:
    finder = doctest.DocTestFinder()
    with_examples = [
        name
        for name in MODULES
        if any(test.examples for test in finder.find(importlib.import_module(name)))
    ]
    # Calibration, episodes, constraint, registry, envs... carry examples; none may be lost.
    assert len(with_examples) >= 20, with_examples


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files (videos/...) write them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
