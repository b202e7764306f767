"""benchmarks/tuning.py: variants on the spent tuning seeds, and the workflow refusing them."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from benchmarks import tuning
from benchmarks.common import experiment
from src.config.workflow import (
    SCHEMA_PATH,
    WorkflowConfigError,
    check_workflow_config,
    resolve_run_config,
    validate_workflow_config,
)
from src.containment import ContainmentError
from src.seeds import TUNING


@pytest.fixture()
def config() -> dict:
    return experiment()


def test_a_variant_plays_the_tuning_seeds(config: dict) -> None:
    variant = tuning.variant_config(config, "intersection", "shield_dec", {"critic_steps": 2})
    assert variant["envs"] == ["intersection"] and variant["algos"] == ["shield_dec"]
    assert variant["base"]["seed_offset"] == tuning.TRAINING_OFFSET
    assert variant["base"]["final_policy_eval_seed_offset"] == TUNING.first
    params = variant["algo_params"]["shield_dec"]
    assert params["critic_steps"] == 2
    assert params["calibration_seed_offset"] == TUNING.first + tuning.CALIBRATION_SHIFT
    assert TUNING.contains(params["calibration_seed_offset"] + 3 * 200 - 1)
    # The config's own settings stay under the variant's.
    assert params["model_epochs"] == config["algo_params"]["shield_dec"]["model_epochs"]
    lag = tuning.variant_config(config, "intersection", "ippo_lag", {"pid_ki": 0.5})
    assert lag["algo_params"]["ippo_lag"] == {**config["algo_params"]["ippo_lag"], "pid_ki": 0.5}


def test_the_workflow_refuses_a_claim_on_the_spent_tuning_seeds(config: dict) -> None:
    variant = tuning.variant_config(config, "intersection", "ippo", {})
    with pytest.raises(WorkflowConfigError, match="hyperparameter tuning"):
        check_workflow_config(copy.deepcopy(variant))


def test_a_variant_is_trained_evaluated_and_reported(
    config: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = copy.deepcopy(config)
    tiny["num_runs"] = 2
    tiny["base"].update(num_envs=2, timesteps=2 * 16 * 2, rollouts=16, final_policy_eval_episodes=4)
    tiny["env_params"]["hazard_grid"]["max_steps"] = 10
    tiny["base"]["final_policy_eval_horizons"] = [1, 10]
    row = tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.5}, tmp_path)
    assert [run["episodes"] for run in row["runs"]] == [4, 4]
    assert all(run["horizon"] == 10 for run in row["runs"])
    rates = [run["violations"] / 4 for run in row["runs"]]
    mean, low, high = row["p_violation"]
    assert mean == pytest.approx(sum(rates) / 2) and low <= mean <= high
    # What the multiplier did, from each run's per-update metrics.
    for idx, run in enumerate(row["runs"]):
        updates = json.loads((tmp_path / f"run{idx}" / "updates.json").read_text())
        lambdas = [u["safety/lambda"] for u in updates]
        assert run["multiplier"] == {
            "lambda_end": lambdas[-1],
            "reward_share": pytest.approx(sum(1 / (1 + x) for x in lambdas) / len(lambdas)),
            "entropy_end": updates[-1]["losses/entropy"],
        }
    plain = tuning.measure_variant(tiny, "hazard_grid", "ippo", {}, tmp_path / "ippo")
    assert all(run["multiplier"] is None for run in plain["runs"])
    # Whether a variant runs the algorithm as the config does.
    assert plain["configured"] and not row["configured"]

    # Measured again (a killed benchmark rerun): the runs are read back, not trained again;
    # another setting is measured anew.
    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(tuning, "train_run", no_training)
    assert tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.5}, tmp_path) == row
    with pytest.raises(AssertionError, match="trained again"):
        tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.25}, tmp_path)
    # The same settings spelled otherwise (a setting named at the value the config gives it)
    # are the same runs.
    kp = resolve_run_config(
        tuning.variant_workflow(tiny, "hazard_grid", "ippo_lag", {}), "hazard_grid", "ippo_lag", 0
    ).lagrange.pid_kp
    spelled = {"pid_ki": 0.5, "pid_kp": kp}
    again = tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", spelled, tmp_path)
    assert again["runs"] == row["runs"] and again["params"] == spelled
    # A record made by other code (another `src`) is measured anew, not read back.
    this_src = tuning.code_fingerprint
    monkeypatch.setattr(tuning, "code_fingerprint", lambda: "another src")
    with pytest.raises(AssertionError, match="trained again"):
        tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.5}, tmp_path)
    monkeypatch.setattr(tuning, "code_fingerprint", this_src)
    config_json = (tmp_path / "run1" / "config.json").read_text()
    assert f'"final_policy_eval_seed_offset": {TUNING.first}' in config_json
    results = {
        "machine": {"date": "d", "platform": "p", "cpus": 2, "torch": "t"},
        "minutes": 1.0,
        "training_offset": tuning.TRAINING_OFFSET,
        "evaluation_first_seed": TUNING.first,
        "calibration_first_seed": TUNING.first + tuning.CALIBRATION_SHIFT,
        "rows": [{**row, "algo": "ippo", "params": {}}, row],
    }
    table = tuning.render_markdown(results)
    assert "| hazard_grid | ippo_lag | `pid_ki` 0.5 |" in table and "1.00x" in table
    ends = ", ".join(f"{run['multiplier']['lambda_end']:.2f}" for run in row["runs"])
    assert f"- hazard_grid `ippo_lag` `pid_ki` 0.5, per run: lambda at the end {ends};" in table
    results["rows"] = [plain, row]
    assert tuning.render_markdown(results).count("lambda at the end") == 1
    # The ratio is to ippo trained on as many steps.
    longer = {"timesteps": 4 * 16 * 2}
    results["rows"] = [
        {**row, "algo": "ippo", "params": longer, "return": 4 * row["return"]},
        {**row, "algo": "ippo", "params": {}, "return": 2 * row["return"]},
        {**row, "params": longer},
    ]
    table = tuning.render_markdown(results)
    assert "| hazard_grid | ippo_lag | `timesteps` 128 |" in table and "| 0.25x |" in table
    assert "| 0.50x |" not in table
    # A return that is a negative distance has no ratio to it.
    negative = {**row, "return": -abs(row["return"]) - 1.0}
    results["rows"] = [{**negative, "algo": "ippo", "params": {}}, negative]
    assert "x |" not in tuning.render_markdown(results)

    # A record that is not one, or a link in its place, is named; nothing is measured.
    record = tmp_path / "run0" / tuning.MEASURED
    record.write_text("{half")
    with pytest.raises(ValueError, match=f"{record}: not a record of a measured run"):
        tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.5}, tmp_path)
    outside = tmp_path.parent / "outside.json"
    outside.write_text("{}")
    record.unlink()
    record.symlink_to(outside)
    with pytest.raises(ContainmentError):
        tuning.measure_variant(tiny, "hazard_grid", "ippo_lag", {"pid_ki": 0.5}, tmp_path)


def test_an_option_of_the_base_config_is_set_there(config: dict) -> None:
    """`shield_opponent_mode`, `timesteps` and `final_policy_eval_episodes` are base keys: the
    variant sets them in `base`, not algo_params."""
    variant = tuning.variant_config(
        config, "intersection", "shield_dec", {"shield_opponent_mode": "uniform", "horizon": 5}
    )
    assert variant["base"]["shield_opponent_mode"] == "uniform"
    assert "shield_opponent_mode" not in variant["algo_params"]["shield_dec"]
    assert variant["algo_params"]["shield_dec"]["horizon"] == 5
    assert config["base"]["shield_opponent_mode"] == "monotone_floor"  # the config unchanged
    budget = tuning.variant_config(config, "hazard_grid", "ippo", {"timesteps": 4096})
    assert budget["base"]["timesteps"] == 4096 and "timesteps" not in budget["algo_params"]["ippo"]
    episodes = tuning.variant_config(
        config, "hazard_grid", "ippo", {"final_policy_eval_episodes": 8}
    )
    assert episodes["base"]["final_policy_eval_episodes"] == 8
    assert "final_policy_eval_episodes" not in episodes["algo_params"]["ippo"]


def test_every_variant_is_a_config_the_workflow_runs() -> None:
    """Known envs and algorithms of the group's config, and settings the run config accepts
    (no deleted option)."""
    for name, group in tuning.GROUPS.items():
        config = experiment(tuning.GROUP_CONFIGS.get(name, tuning.CONFIG))
        for env, variants in group.items():
            assert env in config["envs"]
            assert {algo for algo, _ in variants} <= set(config["algos"])
            for algo, params in variants:
                variant = tuning.variant_config(config, env, algo, params)
                validate_workflow_config(variant, SCHEMA_PATH, load_components=True)
                resolve_run_config(variant, env, algo, 0)


def test_a_variant_trains_the_run_the_workflow_would() -> None:
    """A variant's run is the workflow's run of the group's config (defaults as the workflow
    fills them) but for what the variant sets: its seeds and its settings. `config/mamujoco.yaml`
    leaves `lag_version` to the schema (pid), which the run config's own default (v0) must not
    replace."""
    moved = {"seed_offset", "seed", "final_policy_eval_seed_offset", "calibration_seed_offset"}
    for name, group in tuning.GROUPS.items():
        config = experiment(tuning.GROUP_CONFIGS.get(name, tuning.CONFIG))
        workflow = check_workflow_config(copy.deepcopy(config), check_components=False)
        for env, variants in group.items():
            for algo, params in variants:
                expected = resolve_run_config(workflow, env, algo, 0).to_dict()
                trained = tuning.variant_workflow(config, env, algo, params)
                got = resolve_run_config(trained, env, algo, 0).to_dict()
                kept = moved | set(params)
                for run in (expected, got):
                    run["algo_params"] = {
                        k: v for k, v in run["algo_params"].items() if k not in kept
                    }
                    run["sections"] = {
                        section: {k: v for k, v in values.items() if k not in kept}
                        for section, values in run["sections"].items()
                    }
                differ = {k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k)}
                assert differ <= kept, (name, env, algo, params, differ)
    mamujoco = experiment(tuning.GROUP_CONFIGS["mamujoco_lag"])
    assert "lag_version" not in mamujoco["base"]
    trained = tuning.variant_workflow(mamujoco, "mamujoco", "ippo_lag", {})
    assert resolve_run_config(trained, "mamujoco", "ippo_lag", 0).lagrange.lag_version == "pid"


def test_no_group_writes_another_benchmarks_section() -> None:
    """A group's section of BENCHMARKS.md is named after the group: no other benchmark
    module writes a section of that name (a group `mamujoco` overwrote the env's speed)."""
    written = set()
    for module in Path(tuning.__file__).parent.glob("*.py"):
        if module.name != "tuning.py":
            source = module.read_text(encoding="utf-8")
            written |= set(re.findall(r'(?:save_results|write_section)\(\s*"(\w+)"', source))
    assert "mamujoco" in written and "numerics" in written  # the scan sees the others' names
    assert not set(tuning.GROUPS) & written


def test_runs_measured_in_parallel_are_those_measured_in_turn(config: dict, tmp_path: Path) -> None:
    """`jobs` processes measure the same runs, bit for bit, as one process does in turn; each
    variant's runs in their order."""
    tiny = copy.deepcopy(config)
    tiny["num_runs"] = 2
    tiny["base"].update(num_envs=2, timesteps=2 * 16 * 2, rollouts=16, final_policy_eval_episodes=4)
    tiny["env_params"]["hazard_grid"]["max_steps"] = 10
    tiny["base"]["final_policy_eval_horizons"] = [1, 10]
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny))
    variants = {"hazard_grid": [("ippo", {}), ("ippo_lag", {"pid_ki": 0.5})]}

    def rows(jobs: int, runs: int | None = None) -> list[dict]:
        work = tmp_path / str(jobs)
        out = tuning.benchmark(["hazard_grid"], work, variants, path, jobs, runs)
        for row in out["rows"]:
            row.pop("train_cpu_seconds")
            for run in row["runs"]:
                run.pop("train_cpu_seconds")
        return out["rows"]

    alone, together = rows(1), rows(2)
    assert together == alone
    assert [(row["algo"], len(row["runs"])) for row in together] == [("ippo", 2), ("ippo_lag", 2)]
    # The first run of each variant alone: the same run, read back.
    first = rows(1, runs=1)
    assert [row["runs"] for row in first] == [row["runs"][:1] for row in alone]
    # More runs than the config's num_runs: its runs read back, and a third on the next seeds.
    more = rows(1, runs=3)
    assert [row["runs"][:2] for row in more] == [row["runs"] for row in alone]
    assert [len(row["runs"]) for row in more] == [3, 3]
    assert more[0]["runs"][2] != more[0]["runs"][1]


def test_a_variant_is_compared_with_its_algorithms_first_by_a_paired_test() -> None:
    """Paired over the runs they share; none where the runs differ in number or the algorithm
    has no earlier variant."""
    from scipy.stats import ttest_rel

    def variant(algo: str, params: dict, rates: list[float], returns: list[float]) -> dict:
        runs = [
            {"violations": round(r * 200), "episodes": 200, "return": x}
            for r, x in zip(rates, returns, strict=True)
        ]
        return {"env": "spread", "algo": algo, "params": params, "runs": runs}

    base = variant("shield", {}, [0.2, 0.3, 0.1], [-700.0, -900.0, -550.0])
    other = variant("shield", {"critic_steps": 16}, [0.05, 0.1, 0.04], [-460.0, -400.0, -390.0])
    short = variant("shield", {"critic_steps": 8}, [0.05, 0.1], [-460.0, -400.0])
    lines = tuning.paired_tests([variant("ippo", {}, [1.0] * 3, [0.0] * 3), base, other, short])
    assert len(lines) == 1
    p_rate = ttest_rel([0.05, 0.1, 0.04], [0.2, 0.3, 0.1]).pvalue
    assert (
        f"rate p = {p_rate:.3g}" in lines[0]
        and "`critic_steps` 16 against as configured" in lines[0]
    )
    # Pairs that differ by the same amount in every run have no t-test: it is said, not "nan".
    same = variant("shield", {"critic_steps": 2}, [0.2, 0.3, 0.1], [-600.0, -800.0, -450.0])
    (line,) = tuning.paired_tests([base, same])
    assert "rate equal in every run" in line
    assert "return the same difference 100 in every run" in line and "nan" not in line


def test_a_variant_is_compared_with_its_algorithms_configured_variant() -> None:
    """Where a row runs the algorithm as its config does (`configured`, however its settings are
    spelled), the others are paired with it, and it is named as configured."""

    def variant(params: dict, configured: bool, rates: list[float]) -> dict:
        runs = [{"violations": round(r * 200), "episodes": 200, "return": r} for r in rates]
        return {
            "env": "mamujoco",
            "algo": "ippo_lag",
            "params": params,
            "runs": runs,
            "configured": configured,
        }

    old = variant({"ent_coef": 0.01}, False, [0.2, 0.01, 0.19])
    now = variant({"ent_coef": 0.0}, True, [0.01, 0.0, 0.035])
    faster = variant({"ent_coef": 0.0, "pid_ki": 1.0}, False, [0.14, 0.05, 0.33])
    lines = tuning.paired_tests([old, now, faster])
    assert [line.split(" against ")[1].split(", paired")[0] for line in lines] == [
        "`ent_coef` 0.0 (as configured)",
        "`ent_coef` 0.0 (as configured)",
    ]
    assert lines[0].startswith("- mamujoco `ippo_lag` `ent_coef` 0.01 against")
