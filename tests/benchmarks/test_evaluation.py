"""benchmarks/evaluation.py: a tiny policy's evaluation timed against the bare loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks import evaluation
from benchmarks.common import markers


def test_a_tiny_run_times_the_three_loops_and_writes_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluation, "EPISODES", 30)
    path = tmp_path / "BENCHMARKS.md"
    threads = torch.get_num_threads()
    try:
        results = evaluation.main(repeats=1, path=path)
    finally:
        torch.set_num_threads(threads)
    # One batch of 30 copies for 200 steps: the bare loop steps them all; the evaluation stops
    # when every copy's episode has ended (hazard_grid's continue to the cap).
    assert results["steps"] == {"bare": 200, "collect": 200}
    assert all(seconds > 0 for seconds in results["best"].values())
    start, end = markers("evaluation")
    section = path.read_text().split(start)[1].split(end)[0]
    assert "## Evaluation" in path.read_text() and "30 episodes x 200 steps" in section
    assert section.count("| 200 |") == 3 and "- `evaluate_run` / bare loop: " in section
