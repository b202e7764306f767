"""`tables/marl_eval.json`: a tiny experiment in marl-eval's format, read back by marl-eval's own
data processing (`data_process_pipeline`, `create_matrices_for_rliable`) and aggregated as
rliable aggregates (interquartile mean, mean)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import trim_mean

from src.algos.train import train_run
from src.analysis.export import export_run, history_table, updates_table
from src.analysis.marl_eval_json import (
    ABSOLUTE_METRICS,
    ENVIRONMENT,
    marl_eval_data,
    policy_name,
    write_marl_eval,
)
from src.analysis.style import policy_label
from src.config.run import RunConfig, make_run_config
from src.core.io import save_to_file
from src.evaluation.evaluate import evaluate_run
from src.runfiles import RunFiles
from src.schemas import (
    EVAL_EPISODES_SCHEMA,
    EVAL_SCHEMA,
    UPDATES_SCHEMA,
    read_parquet,
    table_with_config,
    write_parquet,
)
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

TASKS = ("hazard_grid", "intersection")
ALGOS = ("ippo", "shield")
RUNS = 2
POLICIES = ("ippo", "shield", "shield (shield off)")
HORIZONS = (1, 5, 10)
EPISODES = 4


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """Two tasks x (ippo, shield) x two runs at the tiny budget, trained, evaluated and
    exported as the workflow does; (run folders, marl_eval.json)."""
    root = tmp_path_factory.mktemp("marl_eval")
    run_dirs = []
    for task in TASKS:
        for algo in ALGOS:
            for run in range(RUNS):
                params = {"calibration_episodes": 4, "critic_steps": 2} if algo == "shield" else {}
                run_dir = root / "runs" / task / algo / f"run{run}"
                config = tiny_run_config(algo, env_name=task, run_idx=run, algo_params=params)
                train_run(config, run_dir, progress=False)
                files = RunFiles(run_dir)
                evaluate_run(
                    run_dir,
                    files.eval,
                    episodes_out=files.eval_episodes,
                    certificate_out=files.certificate,
                )
                export_run(run_dir, files.history, files.updates)
                run_dirs.append(run_dir)
    out = root / "tables" / "marl_eval.json"
    write_marl_eval(run_dirs, out)
    return run_dirs, out


def _strict_json(path: Path) -> dict[str, Any]:
    def refuse(value: str) -> None:
        raise AssertionError(f"{path} holds {value}, which is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _eval_rows(run_dir: Path) -> list[dict[str, Any]]:
    return read_parquet(RunFiles(run_dir).eval, EVAL_SCHEMA).to_pylist()


def test_the_file_has_marl_evals_structure(experiment: tuple[list[Path], Path]) -> None:
    run_dirs, path = experiment
    data = _strict_json(path)
    assert list(data) == [ENVIRONMENT]
    assert list(data[ENVIRONMENT]) == list(TASKS)
    for task in TASKS:
        assert list(data[ENVIRONMENT][task]) == list(POLICIES)
        for policy in POLICIES:
            assert list(data[ENVIRONMENT][task][policy]) == [f"run_{r}" for r in range(RUNS)]
    for run_dir in run_dirs:
        config = json.loads(RunFiles(run_dir).config.read_text())
        task, algo, run = config["env_name"], config["algo"], f"run_{config['run_idx']}"
        updates = read_parquet(RunFiles(run_dir).updates, UPDATES_SCHEMA).to_pylist()
        policies = ["ippo"] if algo == "ippo" else ["shield", "shield (shield off)"]
        entries = [data[ENVIRONMENT][task][policy][run] for policy in policies]
        # A shielded run's two policies share its training.
        steps = {key: value for key, value in entries[0].items() if key != ABSOLUTE_METRICS}
        for entry in entries[1:]:
            assert {k: v for k, v in entry.items() if k != ABSOLUTE_METRICS} == steps
        assert list(entries[0]) == [*(f"step_{u['update']}" for u in updates), ABSOLUTE_METRICS]
        for update in updates:
            step = steps[f"step_{update['update']}"]
            assert step["step_count"] == update["global_step"]
            assert all(
                isinstance(v, list) and len(v) == 1 for k, v in step.items() if k != "step_count"
            )
            assert set(step) == {
                "step_count",
                "return",
                "cost",
                *(f"violation_within_{h}" for h in HORIZONS),
                "shield_interventions",
                "violation_rate",
                "episodes",
            }
            if step["episodes"] == [0]:
                continue  # repeats an earlier update's means
            # The means of the update's finished training episodes, as the trainer logged them.
            assert step["return"][0] == pytest.approx(update["charts/episode_return"])
            assert step["cost"][0] == pytest.approx(update["safety/episode_cost"])
            assert step["violation_rate"][0] == pytest.approx(update["safety/violation_rate"])
            assert step["violation_within_10"] == step["violation_rate"]  # the cap: 10 steps
        rows = _eval_rows(run_dir)
        for policy, entry in zip(policies, entries, strict=True):
            shielded = policy == "shield"
            absolute = entry[ABSOLUTE_METRICS]
            assert set(absolute) == {
                "return",
                "cost",
                *(f"violation_within_{h}" for h in HORIZONS),
                "shield_interventions",
            }
            assert all(len(values) == EPISODES for values in absolute.values())
            mine = [row for row in rows if row["shielded"] == shielded]
            for row in mine:
                indicator = absolute[f"violation_within_{row['horizon']}"]
                assert set(indicator) <= {0, 1}
                assert [i for i, v in enumerate(indicator) if v] == row["violating_episodes"]
            last = max(mine, key=lambda row: row["horizon"])
            assert np.mean(absolute["return"]) == pytest.approx(last["mean_return"])
            assert np.mean(absolute["cost"]) == pytest.approx(last["mean_cost"])
            if not shielded:
                assert absolute["shield_interventions"] == [0] * EPISODES


def test_policy_names_are_the_summarys(experiment: tuple[list[Path], Path]) -> None:
    for algo in ALGOS:
        for shielded in (True, False):
            assert policy_name(algo, shielded) == policy_label(algo, shielded)


def test_marl_evals_own_processing_reads_the_file(experiment: tuple[list[Path], Path]) -> None:
    marl_eval_utils = pytest.importorskip(
        "marl_eval.utils.data_processing_utils",
        reason=(
            "marl-eval is not installed: `make setup` installs it without its dependencies "
            "(requirements-nodeps.txt), as its own pins (pandas==1.4.4) do not build with ours"
        ),
    )
    run_dirs, path = experiment
    raw = json.loads(path.read_text(encoding="utf-8"))
    processed = marl_eval_utils.data_process_pipeline(
        raw_data=copy.deepcopy(raw), metrics_to_normalize=["return"]
    )
    # On a format error it prints and returns its input unprocessed, without "extra".
    assert "extra" in processed, "marl-eval could not process the file"
    extra = processed["extra"]
    assert extra["environment_list"] == {ENVIRONMENT: list(TASKS)}
    assert extra["algorithm_list"] == list(POLICIES)
    assert extra["number_of_runs"] == RUNS
    matrices, curves = marl_eval_utils.create_matrices_for_rliable(
        data_dictionary=processed, environment_name=ENVIRONMENT, metrics_to_normalize=["return"]
    )
    expected_metrics = {
        "mean_norm_return",
        "mean_cost",
        "mean_shield_interventions",
        *(f"mean_violation_within_{h}" for h in HORIZONS),
    }
    assert set(matrices) == expected_metrics
    # Per policy a (runs x tasks) matrix: the runs' violation rates within 10 steps, as their
    # eval.parquet has them; aggregated as rliable does (IQM: a 25% trimmed mean).
    p_violation: dict[str, np.ndarray] = {
        policy: np.zeros((RUNS, len(TASKS))) for policy in POLICIES
    }
    for run_dir in run_dirs:
        config = json.loads(RunFiles(run_dir).config.read_text())
        for row in _eval_rows(run_dir):
            if row["horizon"] == 10:
                policy = policy_name(config["algo"], row["shielded"])
                task = TASKS.index(config["env_name"])
                p_violation[policy][config["run_idx"], task] = row["p_violation"]
    for policy in POLICIES:
        scores = matrices["mean_violation_within_10"][policy]
        assert scores.shape == (RUNS, len(TASKS))
        np.testing.assert_allclose(scores, p_violation[policy])
        iqm = trim_mean(scores, proportiontocut=0.25, axis=None)
        assert iqm == pytest.approx(trim_mean(p_violation[policy], 0.25, axis=None))
        assert np.mean(scores) == pytest.approx(np.mean(p_violation[policy]))
        normalised = matrices["mean_norm_return"][policy]
        assert np.all((normalised >= 0) & (normalised <= 1))
    # The sample-efficiency tensors: (runs x tasks x updates), the steps' means.
    updates = len(read_parquet(RunFiles(run_dirs[0]).updates, UPDATES_SCHEMA))
    cost = curves["mean_cost"]["ippo"]
    assert cost.shape == (RUNS, len(TASKS), updates)
    task_data = raw[ENVIRONMENT]["intersection"]["ippo"]["run_1"]
    np.testing.assert_allclose(
        cost[1, 1], [task_data[f"step_{u}"]["cost"][0] for u in range(updates)]
    )


# ------------------------------------------------------------------ synthetic run folders


def _episode(index: int, t_end: int, *, first: int = -1, replaced: int = 0) -> dict[str, Any]:
    return {
        "env": "hazard_grid",
        "algo": "ippo",
        "run": 0,
        "episode": index,
        "env_copy": 0,
        "t_start": t_end - 4,
        "t_end": t_end,
        "length": 5,
        "team_return": float(index),
        "agent_returns": [float(index)],
        "cost": float(first > 0),
        "violated": first > 0,
        "first_violation_step": first,
        "truncated_by_cap": True,
        "shield_interventions": replaced,
    }


def _synthetic_run(
    root: Path, *, history: list[dict[str, Any]], replaced: int | None = 0, horizons: list[int]
) -> Path:
    """A run folder of ippo on hazard_grid with 4 updates of 10 env steps and 2 evaluation
    episodes (`replaced`: their shield interventions, None: not reported)."""
    run_dir = root / "run0"
    run_dir.mkdir(parents=True)
    flat = make_run_config(final_policy_eval_episodes=2, final_policy_eval_horizons=tuple(horizons))
    config = RunConfig.from_dict(flat).to_dict()
    save_to_file(config, run_dir, "config.json")
    files = RunFiles(run_dir)
    write_parquet(history_table(history, config), files.history)
    updates = [{"update": u, "global_step": 10 * (u + 1), "wall_time": 0.0} for u in range(4)]
    write_parquet(updates_table(updates, config), files.updates)
    episodes = [
        {
            "env": "hazard_grid",
            "algo": "ippo",
            "run": 0,
            "shielded": False,
            "episode": i,
            "seed": 100 + i,
            "length": 7,
            "team_return": 1.0 + i,
            "cost": 0.0,
            "first_violation_step": 3 if i == 0 else -1,
            "shield_interventions": replaced,
        }
        for i in range(2)
    ]
    write_parquet(table_with_config(episodes, EVAL_EPISODES_SCHEMA, config), files.eval_episodes)
    return run_dir


def test_updates_without_finished_episodes_repeat_the_nearest_means(tmp_path: Path) -> None:
    # Updates cover env steps (0, 10], (10, 20], (20, 30], (30, 40]: episodes end in the
    # second (two of them) and the fourth.
    history = [_episode(0, 12, first=2), _episode(1, 20), _episode(2, 31, first=7)]
    run_dir = _synthetic_run(tmp_path, history=history, horizons=[1, 5])
    entry = marl_eval_data([run_dir])[ENVIRONMENT]["hazard_grid"]["ippo"]["run_0"]
    steps = [entry[f"step_{u}"] for u in range(4)]
    assert [s["step_count"] for s in steps] == [10, 20, 30, 40]
    assert [s["episodes"] for s in steps] == [[0], [2], [0], [1]]
    assert [s["return"] for s in steps] == [[0.5], [0.5], [0.5], [2.0]]
    assert [s["violation_within_1"] for s in steps] == [[0.0], [0.0], [0.0], [0.0]]
    assert [s["violation_within_5"] for s in steps] == [[0.5], [0.5], [0.5], [0.0]]
    assert [s["violation_rate"] for s in steps] == [[0.5], [0.5], [0.5], [1.0]]
    assert entry[ABSOLUTE_METRICS] == {
        "return": [1.0, 2.0],
        "cost": [0.0, 0.0],
        "violation_within_1": [0, 0],
        "violation_within_5": [1, 0],
        "shield_interventions": [0, 0],
    }


def test_a_run_without_finished_training_episodes_has_no_steps(tmp_path: Path) -> None:
    run_dir = _synthetic_run(tmp_path, history=[], horizons=[5])
    entry = marl_eval_data([run_dir])[ENVIRONMENT]["hazard_grid"]["ippo"]["run_0"]
    assert list(entry) == [ABSOLUTE_METRICS]


def test_a_metric_some_run_lacks_is_left_out_of_all(tmp_path: Path) -> None:
    """marl-eval reads the first entry's metrics in every other: they must be the same."""
    history = [_episode(0, 10), _episode(1, 20), _episode(2, 30), _episode(3, 40)]
    reported = _synthetic_run(tmp_path / "a", history=history, horizons=[1, 5])
    silent = _synthetic_run(tmp_path / "b", history=history, replaced=None, horizons=[5, 9])
    config = json.loads(RunFiles(silent).config.read_text())
    save_to_file({**config, "run_idx": 1, "seed": config["seed"] + 1}, silent, "config.json")
    data = marl_eval_data([reported, silent])[ENVIRONMENT]["hazard_grid"]["ippo"]
    for run in ("run_0", "run_1"):
        assert set(data[run][ABSOLUTE_METRICS]) == {"return", "cost", "violation_within_5"}
        assert set(data[run]["step_0"]) == {
            "step_count",
            "return",
            "cost",
            "violation_within_5",
            "violation_rate",
            "episodes",
        }


def test_a_run_given_twice_is_refused(tmp_path: Path) -> None:
    run_dir = _synthetic_run(tmp_path, history=[_episode(0, 10)], horizons=[5])
    with pytest.raises(ValueError, match="appears twice"):
        marl_eval_data([run_dir, run_dir])
    with pytest.raises(ValueError, match="non-empty list"):
        marl_eval_data([])
