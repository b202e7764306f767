"""benchmarks.risk_floor: the witness floors' table and the exact floors of evaluation layouts."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchmarks.risk_floor import layout_floors, main, witness_markdown, witness_rows
from src.analysis.exact_floor import model_from_env, solve_min_risk
from src.envs import make_vector_env
from tests.analysis.test_exact_floor import ORIGINAL


def test_witness_floors_of_a_config_are_written_as_a_table(tmp_path):
    config = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / ".test" / "config.yaml").read_text()
    )
    config["envs"] = ["hazard_grid", "spread"]
    # its cap is evaluated
    config["env_params"]["spread"] = {"n_agents": 2, "max_steps": 50, "spawn": "separated"}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    rows = witness_rows(path)
    assert [row["env"] for row in rows] == ["hazard_grid", "spread"]
    floor = rows[0]["floor"]
    assert (floor.method, floor.horizon, floor.episodes, floor.violations) == (
        "witness",
        50,
        8,
        0,
    )
    assert rows[0]["feasible"] is (floor.p_upper <= 0.025)
    text = witness_markdown(rows, "python -m benchmarks.risk_floor --witness")
    assert "| tiny.yaml | hazard_grid | 2 | 50 | 8 | 0.000 [" in text


def test_layouts_with_the_same_hazards_and_goals_share_a_solve():
    env = make_vector_env(
        "intersection",
        num_envs=3,
        seed=None,
        size=6,
        n_agents=3,
        start_jitter=1,
        slip_prob=0.05,
        max_steps=15,
        **ORIGINAL,
    )
    env.reset(seed=[10, 11, 10])
    floors, kept = layout_floors(env, keep=[0], completion=True)
    assert floors[0].solve == floors[2].solve and floors[0].joint == floors[2].joint
    assert set(kept) == {0} and all(0.0 <= f.completion <= 1.0 for f in floors)
    for floor in floors:
        model = model_from_env(env, floor.layout)
        start = env.get_state()["cell"][floor.layout]
        assert floor.joint == pytest.approx(float(solve_min_risk(model, 15).risk(start)))
    # V_h grows with the horizon h.
    model = kept[0].model
    values = [solve_min_risk(model, h).value for h in (1, 5, 15)]
    assert np.all(values[0] <= values[1] + 1e-12) and np.all(values[1] <= values[2] + 1e-12)
    assert np.allclose(values[2], kept[0].value)


def test_command_line_prints_the_summary(capsys):
    argv = ["--env", "hazard_grid", "--episodes", "3", "--mc-layouts", "1"]
    argv += [f"--param={key}={str(value).lower()}" for key, value in ORIGINAL.items()]
    assert main([*argv, "--mc-rollouts", "2000", "--completion"]) == 0
    out = capsys.readouterr().out
    assert "joint floor" in out and "median" in out and "frac>0.1" in out and "MC layout 0" in out
    assert "P(finish)" in out and "agrees" in out


def test_spread_gets_a_witness_floor_with_its_spawn_named(tmp_path):
    config = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / ".test" / "config.yaml").read_text()
    )
    config["envs"] = ["spread"]
    config["env_params"]["spread"] = {"n_agents": 3, "max_steps": 50, "spawn": "separated"}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    (row,) = witness_rows(path)
    floor = row["floor"]
    assert (floor.method, floor.horizon, floor.episodes, floor.violations) == (
        "witness",
        50,
        8,
        0,
    )
    assert math.isnan(row["ippo_goals"])  # spread reports no arrivals: the careless reference
    assert floor.goals >= 0.5 * floor.greedy_goals > 0
    text = witness_markdown([row], "python -m benchmarks.risk_floor --witness")
    assert "| tiny.yaml | spread | 3 | 50 | 8 | 0.000 [" in text
    assert "Agents spawn with `spawn: separated` in tiny.yaml." in text
    # mpe2's spawning: the same team, the overlapping starts its only violations.
    config["env_params"]["spread"]["spawn"] = "mpe2"
    config["base"]["final_policy_eval_episodes"] = 100
    path.write_text(yaml.safe_dump(config))
    (row,) = witness_rows(path)
    env = make_vector_env("spread", num_envs=row["floor"].episodes, n_agents=3)
    env.reset(seed=[row["floor"].first_seed + i for i in range(row["floor"].episodes)])
    overlapping = int(env.step(np.zeros((env.num_envs, 3), dtype=np.int64)).cost.any(axis=1).sum())
    assert row["floor"].violations == overlapping > 0
