"""What every benchmark shares: its saved results and its section of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import (
    CpuSplit,
    best_rates,
    best_times,
    cycling,
    dict_loop,
    markers,
    positive_int,
    save_results,
    table,
)


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


def test_a_table_has_its_head_alignment_and_rows() -> None:
    lines = table("name | count | note", "lrl", [["a", 1, ""], "b | 2 | x"])
    assert lines == [
        "| name | count | note |",
        "|---|---:|---|",
        "| a | 1 | |",
        "| b | 2 | x |",
    ]


def test_the_clocks_time_calls_in_turn_and_methods_by_name() -> None:
    calls: list[str] = []
    best = best_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2)
    assert calls == ["a", "b", "a", "b"] and set(best) == {"a", "b"}
    assert all(0 <= seconds < 1 for seconds in best.values())
    rates = best_rates({"x": lambda i: None}, min_seconds=0.0, repeats=1)
    assert min(rates["x"]) > 0

    class Worker:
        def work(self, n: int) -> int:
            return sum(range(n))

    worker, split = Worker(), CpuSplit()
    split.wrap(worker, "work")
    assert worker.work(10_000) == sum(range(10_000)) and split.snapshot()["work"] > 0
    split.restore()
    assert "work" not in vars(worker)  # the class's method again


def test_the_user_loop_steps_every_env_with_dict_actions_and_resets_the_finished() -> None:
    class Env:
        possible_agents = ("a", "b")

        def __init__(self) -> None:
            self.seeds: list[int | None] = []
            self.steps: list[dict] = []
            self.agents = list(self.possible_agents)

        def reset(self, seed: int | None = None) -> None:
            self.seeds.append(seed)
            self.agents = list(self.possible_agents)

        def step(self, actions: dict) -> None:
            self.steps.append(actions)
            self.agents = [] if len(self.steps) % 2 == 0 else self.agents

    envs = [Env(), Env()]
    step = cycling(dict_loop(envs), [[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
    for i in range(3):
        step(i)
    assert envs[1].steps == [{"a": 2, "b": 3}, {"a": 6, "b": 7}, {"a": 2, "b": 3}]
    assert envs[0].seeds == [0, None] and envs[1].seeds == [1, None]  # reset after step 2
