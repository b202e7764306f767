"""The paper-grid cost estimate: its arithmetic on known inputs, and the quick run end to end."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import BENCHMARKS_MD, workflow_config
from benchmarks.paper_grid import (
    QUICK_BUDGET,
    QUICK_OVERRIDES,
    Job,
    grid_jobs,
    list_schedule,
    main,
    measure_pair,
    measured_config,
    phase_costs,
    project_pair,
    project_train_seconds,
    scale_linearly,
    totals,
)
from src.config.workflow import resolve_run_config


def test_phase_costs_leave_out_the_first_update_and_keep_the_rest_as_fixed():
    # Intervals 5 (first, with set-up), 2, 2 unarmed; 5, 5 armed; 3 s after the last update.
    costs = phase_costs(0.0, [5.0, 7.0, 9.0, 14.0, 19.0], [False, False, False, True, True], 22.0)
    assert costs["intervals"] == pytest.approx([5.0, 2.0, 2.0, 5.0, 5.0])
    assert costs["unarmed"] == pytest.approx(2.0)
    assert costs["armed"] == pytest.approx(5.0)
    assert costs["fixed"] == pytest.approx(22.0 - 3 * 2.0 - 2 * 5.0)
    assert (costs["unarmed_updates"], costs["armed_updates"]) == (3, 2)


def test_phase_costs_of_a_single_phase_and_a_single_update():
    one_phase = phase_costs(10.0, [13.0, 14.0, 15.0], [False] * 3, 15.5)
    assert one_phase["unarmed"] == pytest.approx(1.0)
    assert one_phase["armed"] is None
    assert one_phase["fixed"] == pytest.approx(5.5 - 3 * 1.0)
    # A phase whose only update is the first keeps it.
    single = phase_costs(0.0, [4.0, 6.0], [False, True], 6.0)
    assert (single["unarmed"], single["armed"], single["fixed"]) == pytest.approx((4.0, 2.0, 0.0))
    with pytest.raises(ValueError, match="one phase per reading"):
        phase_costs(0.0, [1.0], [False, True], 1.0)


def test_train_projection_splits_the_run_at_the_patience():
    # 976 updates, the first 64 unarmed at 2 s, the other 912 armed at 5 s, plus 10 s fixed.
    assert project_train_seconds(
        fixed=10.0, unarmed=2.0, armed=5.0, updates=976, patience=64
    ) == pytest.approx(10.0 + 64 * 2.0 + 912 * 5.0)
    # Without a shield every update is in the one phase.
    assert project_train_seconds(
        fixed=1.0, unarmed=0.5, armed=None, updates=976, patience=None
    ) == pytest.approx(1.0 + 976 * 0.5)
    # A patience beyond the run: never armed; patience 0: always armed.
    assert project_train_seconds(
        fixed=0.0, unarmed=2.0, armed=None, updates=10, patience=64
    ) == pytest.approx(20.0)
    assert project_train_seconds(
        fixed=0.0, unarmed=None, armed=3.0, updates=10, patience=0
    ) == pytest.approx(30.0)
    with pytest.raises(ValueError, match="armed updates but no armed cost"):
        project_train_seconds(fixed=0.0, unarmed=1.0, armed=None, updates=10, patience=2)


def test_linear_scaling_and_pair_projection():
    assert scale_linearly(3.0, 20, 1000) == pytest.approx(150.0)
    with pytest.raises(ValueError):
        scale_linearly(1.0, 0, 10)
    pair = {
        "updates": 100,
        "patience": 10,
        "eval_episodes": 1000,
        "render_episodes": 3,
        "measured": {
            "fixed": 4.0,
            "unarmed": 1.0,
            "armed": 2.0,
            "eval_seconds": 5.0,
            "eval_episodes": 50,
            "render_seconds": 1.5,
            "render_episodes": 1,
        },
    }
    p = project_pair(pair, startup=3.0, num_runs=5)
    assert p["train_seconds"] == pytest.approx(3.0 + 4.0 + 10 * 1.0 + 90 * 2.0)
    assert p["eval_seconds"] == pytest.approx(3.0 + 5.0 * 1000 / 50)
    assert p["render_seconds"] == pytest.approx(3.0 + 1.5 * 3)
    run = p["train_seconds"] + p["eval_seconds"] + p["render_seconds"]
    assert p["run_seconds"] == pytest.approx(run)
    assert p["run_cpu_hours"] == pytest.approx(run / 3600)
    assert p["seeds_cpu_hours"] == pytest.approx(5 * run / 3600)


def test_list_schedule_is_lpt_without_dependencies():
    # The classic case where LPT is not optimal: 7 on two cores (the optimum is 6).
    assert list_schedule([Job(s) for s in (2, 3, 2, 3, 2)], cores=2) == pytest.approx(7.0)
    assert list_schedule([Job(s) for s in (2, 3, 2, 3, 2)], cores=1) == pytest.approx(12.0)
    assert list_schedule([Job(s) for s in (4, 1, 1, 1, 1)], cores=8) == pytest.approx(4.0)


def test_list_schedule_with_wide_jobs_and_dependencies():
    # Two 4-core jobs fill 8 cores; the eight 1-core jobs run after them.
    jobs = [Job(10.0, cores=4), Job(10.0, cores=4)] + [Job(1.0) for _ in range(8)]
    assert list_schedule(jobs, cores=8) == pytest.approx(11.0)
    # A 1-core job starts while a wide job waits for free cores.
    assert list_schedule([Job(5.0, cores=2), Job(5.0, cores=2), Job(1.0)], 3) == pytest.approx(10.0)
    # Each evaluation follows its training: 10 then 5 on one core, 2 then 1 on the other.
    chained = [Job(10.0), Job(5.0, after=0), Job(2.0), Job(1.0, after=2)]
    assert list_schedule(chained, cores=2) == pytest.approx(15.0)
    assert list_schedule(chained, cores=1) == pytest.approx(18.0)
    with pytest.raises(ValueError, match="cycle"):
        list_schedule([Job(1.0, after=1), Job(1.0, after=0)], cores=2)
    with pytest.raises(ValueError, match="needs 4 cores"):
        list_schedule([Job(1.0, cores=4)], cores=2)


def test_grid_totals():
    pairs = [
        {"projected": {"train_seconds": 3600.0, "eval_seconds": 360.0, "render_seconds": 36.0}},
        {"projected": {"train_seconds": 7200.0, "eval_seconds": 720.0, "render_seconds": 72.0}},
    ]
    for pair in pairs:
        p = pair["projected"]
        run = p["train_seconds"] + p["eval_seconds"] + p["render_seconds"]
        p["seeds_cpu_hours"] = 2 * run / 3600
    jobs = grid_jobs(pairs, num_runs=2, train_cores=4)
    assert len(jobs) == 12
    assert [job.cores for job in jobs[:3]] == [4, 1, 1]
    assert jobs[1].after == 0 and jobs[2].after == 0
    t = totals(pairs, num_runs=2, threads=4, cores=8)
    assert t["cpu_hours"] == pytest.approx(2 * (1.11 + 2.22))
    assert t["within_target"] is True
    assert t["train_cores"] == 4
    # Threads 4 on 8 cores: the two 2 h trainings, then the two 1 h ones (longest ready job
    # first, ahead of the evaluations), then every evaluation and render job: 3.2 h. One core
    # per training: all four at once, each followed by its evaluation: 2.2 h.
    assert t["wall_hours"] == pytest.approx(3.2)
    assert t["wall_hours_one_core_per_train_job"] == pytest.approx(2.2)
    assert totals(pairs, num_runs=2, threads=16, cores=8)["train_cores"] == 8


def test_the_measured_config_is_the_workflow_run_config_with_a_shorter_run():
    workflow = workflow_config()
    # The schema's defaults are filled as the workflow fills them.
    assert workflow["base"]["shield_version"] == "v0"
    assert workflow["base"]["lag_version"] == "pid"
    target = resolve_run_config(workflow, "intersection", "shield", 0)
    assert target.ppo.num_updates == 2_000_000 // (16 * 128)
    measured = measured_config(target, updates=5, eval_episodes=20, patience=3)
    changed = {k for k, v in target.to_dict().items() if measured[k] != v}
    assert changed == {"timesteps", "final_policy_eval_episodes", "shield_patience"}
    assert measured["timesteps"] == 5 * 16 * 128


def test_the_measured_shield_arms_where_the_grids_runs_arm(tmp_path):
    """`measure_patience` None: the measured run arms after the run's own `shield_patience`
    updates (here 3, a quick config's), then trains `armed_updates` armed ones."""
    base = {**QUICK_OVERRIDES["base"], "shield_patience": 3}
    workflow = workflow_config(overrides={**QUICK_OVERRIDES, "base": base})
    budget = {**QUICK_BUDGET, "measure_patience": None, "armed_updates": 2}
    pair = measure_pair(workflow, "hazard_grid", "shield", budget, tmp_path)
    m = pair["measured"]
    assert pair["patience"] == m["shield_patience"] == 3
    assert (m["updates"], m["unarmed_updates"], m["armed_updates"]) == (5, 3, 2)
    assert m["armed"] > 0 and m["unarmed"] > 0


def test_quick_run_writes_consistent_json(tmp_path, capsys):
    before = BENCHMARKS_MD.read_text()
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    assert BENCHMARKS_MD.read_text() == before  # a quick run leaves BENCHMARKS.md alone
    assert "| hazard_grid | shield |" in capsys.readouterr().out
    r = json.loads((tmp_path / "paper_grid_quick.json").read_text())
    assert r["quick"] is True and r["budget"] == QUICK_BUDGET
    assert r["quick_overrides"] == json.loads(json.dumps(QUICK_OVERRIDES))
    assert r["startup_seconds"] > 0
    assert {"platform", "cpus", "torch", "torch_threads"} <= set(r["machine"])
    assert [(p["env"], p["algo"]) for p in r["pairs"]] == [
        ("hazard_grid", algo) for algo in ("ippo", "ippo_lag", "shield", "shield_dec")
    ]
    for pair in r["pairs"]:
        m = pair["measured"]
        assert pair["run_config"]["num_envs"] == 16 and pair["run_config"]["rollouts"] == 16
        assert pair["updates"] == 2_000_000 // (16 * 16)
        assert m["unarmed"] > 0 and m["train_seconds"] > 0
        assert m["eval_seconds"] > 0 and m["render_seconds"] > 0
        assert len(m["intervals"]) == m["updates"]
        assert all(interval > 0 for interval in m["intervals"])
        # The projection is the arithmetic of project_pair on the measured numbers.
        assert pair["projected"] == pytest.approx(
            project_pair(pair, startup=r["startup_seconds"], num_runs=5)
        )
    shield = r["pairs"][2]
    assert shield["patience"] == 64 and shield["measured"]["shield_patience"] == 2
    assert (shield["measured"]["unarmed_updates"], shield["measured"]["armed_updates"]) == (2, 1)
    assert shield["measured"]["armed"] > 0
    assert shield["versions"] == {"wm_version": "v0", "om_version": "v0", "shield_version": "v0"}
    t = r["totals"]
    assert t["cpu_hours"] == pytest.approx(
        sum(p["projected"]["seeds_cpu_hours"] for p in r["pairs"])
    )
    assert t["within_target"] == (t["cpu_hours"] <= 10.0)
    assert t["jobs"] == 4 * 5 * 3
    assert 0 < t["wall_hours_one_core_per_train_job"] <= t["cpu_hours"]
    assert 0 < t["wall_hours"] <= t["cpu_hours"]
