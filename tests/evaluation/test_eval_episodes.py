"""The evaluation keeps its episodes (`eval_episodes.parquet`) and the shield's certificate as a
record of its own (`certificate.json`), beside an eval.parquet whose numbers do not change."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from src.algos.shield.calibration import Certificate, load_certificate
from src.algos.train import train_run
from src.evaluation.evaluate import collect_episodes, evaluate_run
from src.runfiles import RunFiles
from src.schemas import (
    CERTIFICATE_RECORD_KEYS,
    EVAL_EPISODES_SCHEMA,
    EVAL_SCHEMA,
    certificate_record,
    config_from_metadata,
    read_parquet,
)
from tests.tiny_runs import tiny_run_config

pytestmark = pytest.mark.slow

SHIELD_PARAMS = {"calibration_episodes": 4, "critic_steps": 2}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny trained ippo and shield run on hazard_grid, evaluated with every output."""
    root = tmp_path_factory.mktemp("episodes")
    run_dirs = {}
    for algo in ("ippo", "shield"):
        params = SHIELD_PARAMS if algo == "shield" else {}
        run_dir = root / algo / "run0"
        train_run(tiny_run_config(algo, algo_params=params), run_dir, progress=False)
        files = RunFiles(run_dir)
        evaluate_run(
            run_dir,
            files.eval,
            episodes_out=files.eval_episodes,
            certificate_out=files.certificate,
        )
        run_dirs[algo] = run_dir
    return run_dirs


def _first_violation_within(first: list[int], horizon: int) -> list[int]:
    return [i for i, step in enumerate(first) if 1 <= step <= horizon]


@pytest.mark.parametrize("algo", ["ippo", "shield"])
def test_the_episodes_add_up_to_the_rows_of_eval_parquet(runs: dict[str, Path], algo: str) -> None:
    files = RunFiles(runs[algo])
    rows = read_parquet(files.eval, EVAL_SCHEMA).to_pylist()
    episodes = read_parquet(files.eval_episodes, EVAL_EPISODES_SCHEMA)
    config = config_from_metadata(episodes)
    assert config["algo"] == algo
    n = config["final_policy_eval_episodes"]
    first_seed = config["final_policy_eval_seed_offset"]
    modes = sorted({row["shielded"] for row in rows}, reverse=True)
    assert episodes.num_rows == n * len(modes)
    max_horizon = max(row["horizon"] for row in rows)
    for shielded in modes:
        mine = [e for e in episodes.to_pylist() if e["shielded"] == shielded]
        assert [e["episode"] for e in mine] == list(range(n))
        assert [e["seed"] for e in mine] == [first_seed + i for i in range(n)]
        assert all(1 <= e["length"] <= max_horizon for e in mine)
        first = [e["first_violation_step"] for e in mine]
        for row in (r for r in rows if r["shielded"] == shielded):
            within = _first_violation_within(first, row["horizon"])
            assert row["violations"] == len(within)
            assert row["violating_episodes"] == within
            if row["horizon"] == max_horizon:
                # The same sums as the row's means.
                returns = [e["team_return"] for e in mine]
                assert row["mean_return"] == pytest.approx(np.mean(returns), rel=1e-12)
                assert row["mean_cost"] == pytest.approx(np.mean([e["cost"] for e in mine]))
        replaced = [e["shield_interventions"] for e in mine]
        assert all(isinstance(value, int) and value >= 0 for value in replaced)
        if not shielded:
            assert replaced == [0] * n  # no shield acts: nothing is replaced


def test_the_deployed_shield_reports_its_interventions(runs: dict[str, Path]) -> None:
    episodes = read_parquet(RunFiles(runs["shield"]).eval_episodes, EVAL_EPISODES_SCHEMA)
    on = [e["shield_interventions"] for e in episodes.to_pylist() if e["shielded"]]
    assert sum(on) > 0, "the tiny shield replaces some actions of its untrained policy"


def test_keeping_the_episodes_changes_no_number_of_eval_parquet(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = runs["shield"]
    alone = evaluate_run(run_dir, tmp_path / "eval.parquet")
    table = pq.read_table(tmp_path / "eval.parquet")
    assert table.equals(pq.read_table(RunFiles(run_dir).eval))
    assert list(alone.columns) == EVAL_SCHEMA.names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.parquet"]


def test_a_policy_that_does_not_say_what_it_replaced_gets_null_interventions() -> None:
    class Silent:
        """An actor without `shielded` / `last_intervened` (e.g. a test double)."""

        def reset(self, num_envs: int, seed: int) -> None:
            self.num_envs = num_envs

        def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
            return np.zeros(obs.shape[:2], dtype=np.int64)

    from src.envs.registry import make_vector_env

    batch = collect_episodes(
        make_vec=lambda copies: make_vector_env(
            "hazard_grid", num_envs=copies, seed=None, n_agents=2, max_steps=5
        ),
        actor=Silent(),
        seeds=[1, 2, 3],
        max_steps=5,
        batch_size=2,
        actor_seed=0,
    )
    assert batch.interventions is None


def test_no_evaluation_episodes_give_an_empty_episode_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "ippo" / "run0"
    train_run(tiny_run_config("ippo", final_policy_eval_episodes=0), run_dir, progress=False)
    files = RunFiles(run_dir)
    evaluate_run(
        run_dir, files.eval, episodes_out=files.eval_episodes, certificate_out=files.certificate
    )
    assert read_parquet(files.eval_episodes, EVAL_EPISODES_SCHEMA).num_rows == 0
    assert json.loads(files.certificate.read_text())["has_certificate"] is False


def _strict_json(path: Path) -> dict:
    """The JSON of `path`, refusing NaN and infinities (not JSON)."""

    def refuse(value: str) -> None:
        raise AssertionError(f"{path} holds {value}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_the_certificate_record_of_a_shield_run(runs: dict[str, Path]) -> None:
    run_dir = runs["shield"]
    record = _strict_json(RunFiles(run_dir).certificate)
    assert list(record) == list(CERTIFICATE_RECORD_KEYS)
    certificate = load_certificate(run_dir)
    assert certificate is not None and certificate.episodes == 4
    config = json.loads(RunFiles(run_dir).config.read_text())
    assert record["has_certificate"] is True and record["shielded"] is True
    assert (record["env"], record["algo"], record["run"]) == ("hazard_grid", "shield", 0)
    assert record["certified"] == certificate.certified
    assert record["n"] == certificate.episodes == 4
    assert record["k"] == certificate.violations
    assert record["max_risk"] == certificate.max_risk == config["max_risk"]
    assert record["delta"] == certificate.delta
    assert record["horizon"] == certificate.horizon == 10
    assert record["allowance"] == certificate.allowance
    assert record["p_value"] == certificate.p_value
    assert record["calibration_seeds"] == {"first": certificate.first_seed, "count": 4}
    assert len(record["tested"]) == len(certificate.tested)
    # The code that trained the run and computed its certificate, as config.json records it.
    assert record["git_commit"] == config["git_commit"]
    assert record["git_dirty"] == config["git_dirty"]
    # The same certificate as the eval.parquet rows.
    row = read_parquet(RunFiles(run_dir).eval, EVAL_SCHEMA).to_pylist()[0]
    assert (row["certified"], row["cert_episodes"], row["cert_first_seed"]) == (
        record["certified"],
        record["n"],
        record["calibration_seeds"]["first"],
    )


def test_a_run_without_a_shield_has_a_record_saying_so(runs: dict[str, Path]) -> None:
    record = _strict_json(RunFiles(runs["ippo"]).certificate)
    assert list(record) == list(CERTIFICATE_RECORD_KEYS)
    assert record["has_certificate"] is False and record["shielded"] is False
    certificate_fields = set(CERTIFICATE_RECORD_KEYS) - {
        "env",
        "algo",
        "run",
        "shielded",
        "has_certificate",
        "git_commit",
        "git_dirty",
    }
    assert all(record[key] is None for key in certificate_fields)
    assert (
        record["git_commit"] == json.loads(RunFiles(runs["ippo"]).config.read_text())["git_commit"]
    )


def test_a_shield_that_tested_nothing_has_n_zero_and_no_p_value() -> None:
    certificate = Certificate(
        certified=False,
        allowance=0.02,
        max_risk=0.1,
        delta=0.05,
        horizon=100,
        episodes=0,
        violations=-1,
        p_value=math.nan,
        first_seed=123,
    )
    config = {
        "env_name": "hazard_grid",
        "algo": "shield",
        "run_idx": 2,
        "shielded": True,
        "git_commit": "abc",
    }
    record = certificate_record(config, certificate.to_dict())
    assert (record["n"], record["k"], record["p_value"], record["certified"]) == (
        0,
        None,
        None,
        False,
    )
    assert record["calibration_seeds"] == {"first": 123, "count": 0}
    assert record["git_dirty"] is None  # not recorded
    json.dumps(record, allow_nan=False)
