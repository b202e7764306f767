"""The risk floor of a task: witness rollouts, the feasibility verdict, the record, the table."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from src.analysis.floor import (
    Floor,
    feasible,
    floor_settings,
    load_floor,
    task_floor,
    write_floor,
)
from src.analysis.tables import NO_FLOOR, floor_frame, floor_markdown


def _floor(**changes: object) -> Floor:
    base = Floor(
        env="hazard_grid",
        method="witness",
        horizon=100,
        first_seed=1_000_000,
        episodes=600,
        confidence=0.95,
        violations=0,
        p_violation=0.0,
        p_upper=0.005,
        goals=30.0,
        greedy_p_violation=1.0,
        greedy_goals=40.0,
    )
    return dataclasses.replace(base, **changes)


def test_the_witness_never_violates_where_the_greedy_team_does():
    floor = task_floor(
        "hazard_grid",
        {"n_agents": 3, "size": 6, "n_hazards": 6, "slip_prob": 0.2, "max_steps": 30},
        first_seed=50,
        episodes=30,
        horizon=40,  # longer than the training cap: the cap is lifted to the horizon
        confidence=0.95,
    )
    assert (floor.method, floor.horizon, floor.episodes, floor.violations) == ("witness", 40, 30, 0)
    # One-sided Clopper-Pearson with k = 0: 1 - 0.05 ** (1 / n).
    assert floor.p_upper == pytest.approx(1 - 0.05 ** (1 / 30))
    assert floor.greedy_p_violation > 0.5 and floor.goals >= 0.5 * floor.greedy_goals > 0


def test_tasks_without_a_witness_say_so():
    floor = task_floor(
        "intersection",
        {"n_agents": 2, "continuing": False},  # terminating: the exact DP's, not the witness's
        first_seed=0,
        episodes=4,
        horizon=10,
        confidence=0.95,
    )
    assert floor.method == "none" and math.isnan(floor.p_violation)
    assert feasible(floor, max_risk=0.1, ippo_goals=10.0) is None


@pytest.mark.parametrize(
    ("changes", "ippo_goals", "verdict"),
    [
        ({}, 50.0, True),  # 0.005 <= 0.025 and 30 >= 25
        ({}, 70.0, False),  # keeps less than half of ippo's goals
        ({"p_upper": 0.03}, 50.0, False),  # upper bound above max_risk / 4
        ({}, math.nan, True),  # no ippo: the greedy team's 40 goals are the reference
        ({"greedy_goals": 70.0}, None, False),
    ],
)
def test_feasible_needs_a_low_bound_and_half_the_goals(changes, ippo_goals, verdict):
    assert feasible(_floor(**changes), max_risk=0.1, ippo_goals=ippo_goals) is verdict


def test_the_record_round_trips_and_a_malformed_one_is_named(tmp_path):
    path = tmp_path / "floors" / "hazard_grid.json"
    floor = _floor(method="none", p_violation=math.nan)
    write_floor(floor, path)
    loaded = load_floor(path)
    assert loaded.method == "none" and math.isnan(loaded.p_violation)
    assert dataclasses.replace(loaded, p_violation=0.0) == dataclasses.replace(
        floor, p_violation=0.0
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"env": "x"}))
    with pytest.raises(ValueError, match=r"bad\.json: not a floor record"):
        load_floor(bad)


def test_the_floor_table_stands_next_to_max_risk():
    summary = pd.DataFrame(
        {
            "env": ["hazard_grid", "hazard_grid"],
            "algo": ["ippo", "ippo_lag"],
            "shielded": [False, False],
            "max_risk": [0.1, 0.1],
            "eval_goals": [50.0, 40.0],
        }
    )
    rows = floor_frame([_floor(), _floor(env="spread", method="none")], summary)
    assert rows["env"].tolist() == ["hazard_grid", "spread"]
    assert rows.loc[0, "ippo_goals"] == 50.0 and rows.loc[0, "feasible"]
    assert math.isnan(rows.loc[1, "max_risk"]) and rows.loc[1, "feasible"] is None
    text = floor_markdown(rows)
    assert "| hazard_grid | 0.1 | 0 [0.005] | 100 | 30.0 / 50.0 = 0.60 | yes |" in text
    # A task without a careful team says why its floor is missing, not a bare dash.
    assert f"| spread | – | {NO_FLOOR} | – | – | – |" in text
    assert NO_FLOOR.startswith("not computed: the task has no careful team")


@pytest.mark.parametrize(("given", "horizon"), [({}, 100), ({"constraint_horizon": 50}, 50)])
def test_the_floor_is_taken_at_the_constraint_horizon(given: dict, horizon: int) -> None:
    """The default experiment's hazard_grid caps episodes at 100 steps: the floor covers the
    episode, or the config's own constraint_horizon."""
    config = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())
    config["base"].update(given)
    assert floor_settings(config, "hazard_grid")["horizon"] == horizon
