"""The env benchmark writes its section between markers and the runner checks its names."""

from __future__ import annotations

import pytest

from benchmarks import envs as env_benchmark
from benchmarks import run_all
from benchmarks.common import write_section


def test_write_section_creates_then_replaces_only_its_block(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    write_section("envs", "first", heading=env_benchmark.SECTION_HEADING, path=path)
    text = path.read_text()
    assert "## Environments" in text and "first" in text
    path.write_text(text + "\n## Training\n\nother section\n")
    write_section("envs", "second", heading=env_benchmark.SECTION_HEADING, path=path)
    text = path.read_text()
    assert "second" in text and "first" not in text
    assert text.count(env_benchmark.START_MARKER) == 1
    assert text.endswith("## Training\n\nother section\n")


def test_tiny_run_fills_the_table(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    results = env_benchmark.main(
        min_seconds=0.0, repeats=1, batch=4, identity_episodes=6, path=path
    )
    text = path.read_text()
    for name in ("hazard_grid", "intersection", "spread", "bare mpe2 list loop", "Load average"):
        assert name in text
    assert "6 episodes (5 discrete, 1 continuous" in text
    assert {row.env for row in results["rows"]} == {"hazard_grid", "intersection", "spread"}
    assert all(row.steps_per_second > 0 for row in results["rows"])
    assert set(results["spread_ratios"]) == {0, 1, 4}
    identity = results["identity"]
    assert identity["ok"] and identity["episodes"] == 6
    assert identity["agent_steps"] == (5 + 1) * 25 * 3


def test_runner_rejects_unknown_names():
    assert "envs" in run_all.BENCHMARKS
    with pytest.raises(SystemExit, match="known benchmarks: envs"):
        run_all.main(["nope"])
