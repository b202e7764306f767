"""The batched evaluation loop and `evaluate_run`, with a scripted vector env and a fake actor."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import src.evaluation.evaluate as evaluate_module
from src.algos.shield.calibration import Certificate
from src.config.run import RunConfig
from src.envs.base import StepResult
from src.evaluation.evaluate import collect_episodes, evaluate_run
from src.schemas import CERTIFICATE_COLUMNS, EVAL_SCHEMA, config_from_metadata
from tests.analysis.synthetic import make_certificate, make_config

N_AGENTS = 2
OBS_DIM = 3


def script(seed: int) -> tuple[int, int | None]:
    """Episode length and 1-based step of the single violation (None: safe) of a seed."""
    length = 3 + seed % 5  # 3..7 steps, then the copy terminates
    violation_step = (seed % 4) + 1 if seed % 3 == 0 else None
    return length, violation_step


class ScriptedVectorEnv:
    """Each copy plays its seed's script; after an episode it auto-resets into a risky one."""

    def __init__(self, num_envs: int, max_steps: int) -> None:
        self.num_envs = num_envs
        self.max_steps = max_steps
        self.seeds = [0] * num_envs
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.after_reset = np.zeros(num_envs, dtype=bool)
        self.closed = False

    def _obs(self) -> np.ndarray:
        base = np.array(self.seeds, dtype=np.float32)[:, None, None] + self.t[:, None, None]
        return np.broadcast_to(base, (self.num_envs, N_AGENTS, OBS_DIM)).copy()

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        assert isinstance(seed, list) and len(seed) == self.num_envs
        self.seeds = list(seed)
        self.t[:] = 0
        self.after_reset[:] = False
        return self._obs()

    def step(self, actions: np.ndarray) -> StepResult:
        assert actions.shape == (self.num_envs, N_AGENTS)
        self.t += 1
        reward = np.zeros((self.num_envs, N_AGENTS), np.float32)
        cost = np.zeros((self.num_envs, N_AGENTS), np.float32)
        terminated = np.zeros((self.num_envs, N_AGENTS), bool)
        truncated = np.zeros((self.num_envs, N_AGENTS), bool)
        for e, seed in enumerate(self.seeds):
            length, violation_step = script(seed)
            reward[e] = 1.0 + seed  # team reward per step: 2 * (1 + seed)
            if self.after_reset[e] or violation_step == self.t[e]:
                cost[e, 0] = 1.0  # the episodes after the first are always violating
                # Team cost is the sum over agents, not the violation flag: 1.5 on even seeds.
                cost[e, 1] = 0.5 if seed % 2 == 0 else 0.0
            terminated[e] = self.t[e] >= length
            truncated[e] = ~terminated[e] & (self.t[e] >= self.max_steps)
        steps = self.t.copy()
        done = terminated.any(axis=1) | truncated.any(axis=1)
        self.t[done] = 0
        self.after_reset |= done
        obs = self._obs()
        return StepResult(obs, reward, cost, terminated, truncated, obs.copy(), steps)

    def close(self) -> None:
        self.closed = True


class FakeActor:
    """Records its calls; acts with a seeded generator so batches are visible in the output."""

    def __init__(self) -> None:
        self.resets: list[tuple[int, int]] = []
        self.first_steps: list[np.ndarray] = []
        self.rng = np.random.default_rng(0)

    def reset(self, num_envs: int, seed: int) -> None:
        self.resets.append((num_envs, seed))
        self.rng = np.random.default_rng(seed)
        self.first_steps.append(None)

    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        if self.first_steps[-1] is None:
            self.first_steps[-1] = episode_step.copy()
        return self.rng.integers(0, 4, size=obs.shape[:2])


def collect(seeds: list[int], *, max_steps: int = 6, batch_size: int = 3):
    built: list[ScriptedVectorEnv] = []

    def make_vec(copies: int) -> ScriptedVectorEnv:
        built.append(ScriptedVectorEnv(copies, max_steps))
        return built[-1]

    actor = FakeActor()
    batch = collect_episodes(
        make_vec=make_vec,
        actor=actor,
        seeds=seeds,
        max_steps=max_steps,
        batch_size=batch_size,
        actor_seed=100,
    )
    return batch, built, actor


def test_collect_episodes_records_each_seeds_episode_and_masks_auto_resets() -> None:
    seeds = list(range(7))
    batch, built, actor = collect(seeds, max_steps=6, batch_size=3)
    assert batch.reward.shape == (7, 6)
    for i, seed in enumerate(seeds):
        length, violation_step = script(seed)
        length = min(length, 6)  # seeds with 7 steps are cut by the lifted cap (6)
        assert batch.length[i] == length
        expected_violation = np.zeros(6, bool)
        if violation_step is not None and violation_step <= length:
            expected_violation[violation_step - 1] = True
        # The auto-reset episode that follows violates at every step: all masked out.
        np.testing.assert_array_equal(batch.violation[i], expected_violation)
        team_cost = 1.5 if seed % 2 == 0 else 1.0
        np.testing.assert_array_equal(batch.cost[i], team_cost * expected_violation)
        np.testing.assert_array_equal(batch.reward[i, :length], 2.0 * (1 + seed))
        np.testing.assert_array_equal(batch.reward[i, length:], 0.0)
    # Batches of 3, 3 and 1 copies: one env per distinct size, all closed afterwards.
    assert [vec.num_envs for vec in built] == [3, 1]
    assert all(vec.closed for vec in built)
    assert actor.resets == [(3, 100), (3, 103), (1, 106)]
    # The actor is told the 1-based index of the step its first actions take.
    assert all(first.tolist() == [1] * len(first) for first in actor.first_steps)


def test_batch_size_does_not_change_what_the_env_produces() -> None:
    seeds = [5, 9, 12, 30, 31]
    one, _, _ = collect(seeds, batch_size=1)
    all_at_once, _, _ = collect(seeds, batch_size=5)
    np.testing.assert_array_equal(one.violation, all_at_once.violation)
    np.testing.assert_array_equal(one.length, all_at_once.length)


def test_collect_episodes_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        collect([1, 2], batch_size=0)
    with pytest.raises(ValueError, match="max_steps"):
        collect([1, 2], max_steps=0)


def write_config(tmp_path: Path, **overrides: object) -> Path:
    run_dir = tmp_path / "run0"
    run_dir.mkdir()
    config = {**make_config("scripted", overrides.pop("algo", "ippo"), 0), **overrides}
    (run_dir / "config.json").write_text(json.dumps(config))
    return run_dir


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Route evaluate_run's env and actor construction to the scripted fakes; the run's
    certificate is `calls["certificate"]` (a dict, None: none), its reads are counted."""
    calls: dict = {"vec": [], "actor": [], "certificate": None, "certificate_reads": 0}

    def fake_make_vector_env(name: str, *, num_envs: int, seed: object, **params: object):
        calls["vec"].append((name, num_envs, seed, params))
        return ScriptedVectorEnv(num_envs, int(params["max_steps"]))

    def fake_load_actor(run_dir: Path, *, shielded: bool = True) -> FakeActor:
        calls["actor"].append(shielded)
        return FakeActor()

    def fake_load_certificate(run_dir: Path) -> Certificate | None:
        calls["certificate_reads"] += 1
        certificate = calls["certificate"]
        return None if certificate is None else Certificate.from_dict(certificate)

    monkeypatch.setattr(evaluate_module, "make_vector_env", fake_make_vector_env)
    monkeypatch.setattr(evaluate_module, "load_actor", fake_load_actor)
    monkeypatch.setattr(evaluate_module, "load_certificate", fake_load_certificate)
    return calls


def test_evaluate_run_writes_eval_parquet(tmp_path: Path, scripted: dict) -> None:
    run_dir = write_config(
        tmp_path,
        final_policy_eval_episodes=12,
        final_policy_eval_horizons=[1, 3, 5],
        final_policy_eval_seed_offset=0,
        final_policy_eval_num_envs=5,
    )
    frame = evaluate_run(run_dir, run_dir / "eval.parquet")
    table = pq.read_table(run_dir / "eval.parquet")
    assert table.schema.equals(EVAL_SCHEMA, check_metadata=False)
    assert config_from_metadata(table)["algo"] == "ippo"
    assert list(frame.columns) == EVAL_SCHEMA.names
    assert frame["horizon"].tolist() == [1, 3, 5]
    assert not frame["shielded"].any()
    # Seeds 0..11: seeds 0, 3, 6, 9 violate at steps 1, 4, 3, 2 (within their lengths 3, 6,
    # 4, 7), so within 1, 3 and 5 steps: {0}, {0, 6, 9}, all four.
    assert frame["violations"].tolist() == [1, 3, 4]
    assert frame["n"].tolist() == [12, 12, 12]
    # The episodes themselves (episode i is seed i here), sorted, for paired comparisons.
    assert table.column("violating_episodes").to_pylist() == [[0], [0, 6, 9], [0, 3, 6, 9]]
    assert [list(v) for v in frame["violating_episodes"]] == [[0], [0, 6, 9], [0, 3, 6, 9]]
    # The hidden cap is lifted to the largest horizon and n_agents comes from the config.
    name, _, seed, params = scripted["vec"][0]
    assert (name, seed, params["max_steps"], params["n_agents"]) == ("scripted", None, 5, 2)
    assert sorted({call[1] for call in scripted["vec"]}) == [2, 5]
    assert (frame["ippo_version"] == "v0").all()


def test_run_2_evaluates_its_own_block_of_seeds(
    tmp_path: Path, scripted: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run r's episode i is seeded offset + r * N + i: run 2 with N = 5 from offset 1000 resets
    1010..1014 (batches of 3 and 2, the actor seeded with each batch's first seed)."""
    resets: list[list[int]] = []
    actor = FakeActor()

    class RecordingVectorEnv(ScriptedVectorEnv):
        def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
            resets.append(list(seed))
            return super().reset(seed)

    def make_vector_env(
        name: str, *, num_envs: int, seed: object, **params: object
    ) -> RecordingVectorEnv:
        return RecordingVectorEnv(num_envs, int(params["max_steps"]))

    monkeypatch.setattr(evaluate_module, "make_vector_env", make_vector_env)
    monkeypatch.setattr(evaluate_module, "load_actor", lambda run_dir, shielded=True: actor)
    run_dir = write_config(
        tmp_path,
        run_idx=2,
        num_runs=3,
        seed=2,
        final_policy_eval_episodes=5,
        final_policy_eval_horizons=[2],
        final_policy_eval_seed_offset=1000,
        final_policy_eval_num_envs=3,
    )
    frame = evaluate_run(run_dir, tmp_path / "eval.parquet")
    assert frame["run"].tolist() == [2]
    assert resets == [[1010, 1011, 1012], [1013, 1014]]
    assert actor.resets == [(3, 1010), (2, 1013)]
    settings = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text())).evaluation
    assert settings.seeds(0) == [1000, 1001, 1002, 1003, 1004]
    assert settings.seeds(2) == [1010, 1011, 1012, 1013, 1014]
    assert settings.first_seed(3) == 1015


def test_violating_episodes_are_indices_within_the_runs_block_of_seeds(
    tmp_path: Path, scripted: dict
) -> None:
    """Run 1 with N = 6 from offset 0 plays seeds 6..11: seed 6 violates at step 3 (episode
    length 4) and seed 9 at step 2, the others never (not multiples of 3). Its rows list the
    episode indices i (seed - 6), not the seeds: within 2 steps {3}, within 5 steps {0, 3}."""
    run_dir = write_config(
        tmp_path,
        run_idx=1,
        num_runs=2,
        seed=1,
        final_policy_eval_episodes=6,
        final_policy_eval_horizons=[2, 5],
        final_policy_eval_seed_offset=0,
    )
    evaluate_run(run_dir, tmp_path / "eval.parquet")
    table = pq.read_table(tmp_path / "eval.parquet")
    assert table.column("violations").to_pylist() == [1, 2]
    assert table.column("violating_episodes").to_pylist() == [[3], [0, 3]]
    assert table.schema.field("violating_episodes").type == pa.list_(pa.int32())


def test_shield_runs_are_evaluated_with_and_without_the_shield(
    tmp_path: Path, scripted: dict
) -> None:
    run_dir = write_config(
        tmp_path, algo="shield", final_policy_eval_episodes=4, final_policy_eval_horizons=[2, 4]
    )
    frame = evaluate_run(run_dir, tmp_path / "eval.parquet")
    assert scripted["actor"] == [True, False]
    assert frame[["shielded", "horizon"]].values.tolist() == [
        [True, 2],
        [True, 4],
        [False, 2],
        [False, 4],
    ]


@pytest.mark.parametrize("certified", [True, False])
def test_every_row_of_a_shield_run_carries_its_certificate(
    tmp_path: Path, scripted: dict, certified: bool
) -> None:
    scripted["certificate"] = make_certificate(3, certified=certified, delta=0.1)
    run_dir = write_config(
        tmp_path, algo="shield", final_policy_eval_episodes=4, final_policy_eval_horizons=[2, 4]
    )
    frame = evaluate_run(run_dir, tmp_path / "eval.parquet")
    table = pq.read_table(tmp_path / "eval.parquet")
    assert table.schema.equals(EVAL_SCHEMA, check_metadata=False)
    assert scripted["certificate_reads"] == 1  # once for both shield modes
    expected = {
        "certified": certified,
        "cert_allowance": 0.02,
        "cert_episodes": 200,
        "cert_violations": 8 if certified else 40,
        "cert_p_value": 0.0001 if certified else 0.97,
        "cert_delta": 0.1,
        "cert_horizon": 100,
        "cert_first_seed": 2_000_600,
    }
    assert set(expected) == set(CERTIFICATE_COLUMNS)
    assert len(table) == 4
    for name, value in expected.items():
        assert table.column(name).to_pylist() == [value] * 4, name
    assert frame["certified"].tolist() == [certified] * 4


def test_a_run_without_a_certificate_has_null_certificate_columns(
    tmp_path: Path, scripted: dict
) -> None:
    run_dir = write_config(tmp_path, final_policy_eval_episodes=4, final_policy_eval_horizons=[2])
    evaluate_run(run_dir, tmp_path / "eval.parquet")
    table = pq.read_table(tmp_path / "eval.parquet")
    assert len(table) == 1
    for name in CERTIFICATE_COLUMNS:
        assert table.column(name).to_pylist() == [None], name


def test_a_shield_that_tested_nothing_is_not_certified(tmp_path: Path, scripted: dict) -> None:
    scripted["certificate"] = make_certificate(0, certified=False, episodes=0)
    run_dir = write_config(
        tmp_path, algo="shield", final_policy_eval_episodes=4, final_policy_eval_horizons=[2]
    )
    evaluate_run(run_dir, tmp_path / "eval.parquet")
    row = pq.read_table(tmp_path / "eval.parquet").to_pylist()[0]
    assert (row["certified"], row["cert_episodes"]) == (False, 0)
    # Nothing tested: no violation count (the dict's -1) and no p-value (its NaN).
    assert row["cert_violations"] is None and row["cert_p_value"] is None
    assert (row["cert_allowance"], row["cert_horizon"]) == (0.02, 100)


def test_zero_episodes_skips_evaluation_cleanly(tmp_path: Path, scripted: dict) -> None:
    run_dir = write_config(tmp_path, final_policy_eval_episodes=0)
    frame = evaluate_run(run_dir, run_dir / "eval.parquet")
    assert frame.empty
    assert (scripted["vec"], scripted["actor"]) == ([], [])
    table = pq.read_table(run_dir / "eval.parquet")
    assert table.num_rows == 0
    assert table.schema.equals(EVAL_SCHEMA, check_metadata=False)


def test_same_config_gives_the_same_numbers(tmp_path: Path, scripted: dict) -> None:
    run_dir = write_config(
        tmp_path, final_policy_eval_episodes=9, final_policy_eval_horizons=[2, 6]
    )
    first = evaluate_run(run_dir, tmp_path / "a.parquet")
    second = evaluate_run(run_dir, tmp_path / "b.parquet")
    assert first.equals(second)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"final_policy_eval_episodes": -1}, "final_policy_eval_episodes"),
        ({"final_policy_eval_confidence": 1.0}, "final_policy_eval_confidence"),
        ({"final_policy_eval_horizons": []}, "horizons"),
        ({"final_policy_eval_num_envs": 0}, "final_policy_eval_num_envs"),
    ],
)
def test_bad_eval_settings_are_rejected(override: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({**make_config("scripted", "ippo", 0), **override})


def test_missing_config_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        evaluate_run(tmp_path, tmp_path / "eval.parquet")
    (tmp_path / "config.json").write_text(json.dumps({"env_name": "x", "algo": "ippo"}))
    with pytest.raises(ValueError, match="run_idx"):
        evaluate_run(tmp_path, tmp_path / "eval.parquet")
    assert not (tmp_path / "eval.parquet").exists()


def test_env_params_come_from_the_config() -> None:
    config = make_config("scripted", "ippo", 0)
    env = RunConfig.from_dict(config).env
    assert env.constructor_params(max_steps=200) == {"max_steps": 200, "n_agents": 2}
    del config["n_agents"]
    with pytest.raises(ValueError, match="n_agents"):
        RunConfig.from_dict(config)
