"""What every benchmark shares: its saved results and its section of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import markers, positive_int, save_results


def test_a_smoke_run_saves_its_results_apart_and_leaves_the_markdown(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    results = {"ratio": np.float64(2.5), "rows": [1, 2]}
    save_results("demo", results, "## Demo\n\nquick", quick=True, out=tmp_path, path=path)
    assert json.loads((tmp_path / "demo_quick.json").read_text()) == {"ratio": 2.5, "rows": [1, 2]}
    assert not (tmp_path / "demo.json").exists() and not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["demo_quick.json"]  # no temporary left


def test_a_full_run_saves_its_results_and_replaces_its_section(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    save_results("demo", {"n": 1}, "## Demo\n\nfirst", quick=False, out=tmp_path, path=path)
    save_results("demo", {"n": 2}, "## Demo\n\nsecond", quick=False, out=tmp_path, path=path)
    assert json.loads((tmp_path / "demo.json").read_text()) == {"n": 2}
    text = path.read_text()
    start, end = markers("demo")
    assert text.count(start) == 1 and text.count(end) == 1
    assert "second" in text and "first" not in text


def test_counts_on_the_command_line_must_be_positive() -> None:
    from benchmarks import shield, shield_levers

    assert positive_int("3") == 3
    for bad in ("0", "-2", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got {bad!r}|got {bad}"):
            positive_int(bad)
    for main in (shield.main, shield_levers.main):
        with pytest.raises(SystemExit) as exit_info:
            main(["--armed-updates", "0"])
        assert exit_info.value.code == 2
