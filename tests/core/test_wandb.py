"""Tests of src.core.wandb: the seed signatures, config validation, EpisodeLog, and logging to
real offline wandb runs read back from their .wandb files (no mocks of wandb)."""

import dataclasses
import inspect
import json
import math
import random
import re
import socket

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from src.core.io import save_to_file
from src.core.wandb import (
    ConfigError,
    create_base_config,
    episode_rows,
    log_history,
    start_run,
)
from src.records import EpisodeLog, load_history
from tests.wandb_file import find_run_files, read_history, read_records

# ------------------------------------------------------------------------------------------
# The seed contract (../shared/seed/core_utilities_api.md), written out here verbatim.
# ------------------------------------------------------------------------------------------

SEED_CREATE_BASE_CONFIG = (
    "(env_name: str, num_envs: int, n_agents: int, timesteps: int, num_runs: int, "
    "rollouts: int, learning_epochs: int, mini_batches: int, learning_rate: float, "
    "max_risk: float, use_wandb: bool, shield_patience: int = 64, "
    "shield_opponent_mode: str = 'monotone_floor', shield_reward_mode: str = 'bayesian', "
    "shield_credible_delta: float = 0.05, shield_credible_schedule: str = 'summable', "
    "experiment_tag: str = '', seed_offset: int = 0, wm_version: str = 'v0', "
    "om_version: str = 'v0', ippo_version: str = 'v0', lag_version: str = 'v0', "
    "shield_version: str = 'v0', final_policy_eval_episodes: int = 0, "
    "final_policy_eval_horizons: tuple[int, ...] = (1, 10, 50, 100, 200), "
    "final_policy_eval_seed_offset: int = 1000000, final_policy_eval_confidence: float = 0.95, "
    "**overrides: Any) -> dict"
)
P = inspect.Parameter
SEED_START_RUN = [
    ("algo", P.POSITIONAL_OR_KEYWORD, P.empty),
    ("run_idx", P.POSITIONAL_OR_KEYWORD, P.empty),
    ("base_cfg", P.POSITIONAL_OR_KEYWORD, P.empty),
    ("extra_cfg", P.POSITIONAL_OR_KEYWORD, None),
]
SEED_LOG_HISTORY = [
    ("run", P.POSITIONAL_OR_KEYWORD, P.empty),
    ("history", P.POSITIONAL_OR_KEYWORD, P.empty),
    ("prefix", P.POSITIONAL_OR_KEYWORD, ""),
]


CLOCK_KEYS = ("_timestamp", "_runtime")  # wandb's own per-row keys besides `_step`


def _params(func):
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


def test_create_base_config_signature_matches_seed():
    assert str(inspect.signature(create_base_config)) == SEED_CREATE_BASE_CONFIG
    params = inspect.signature(create_base_config).parameters
    assert params["final_policy_eval_horizons"].default == (1, 10, 50, 100, 200)
    assert params["final_policy_eval_seed_offset"].default == 1000000
    assert params["overrides"].kind is P.VAR_KEYWORD
    assert not any(p.kind is P.KEYWORD_ONLY for p in params.values())


def test_start_run_and_log_history_signatures_match_seed():
    assert _params(start_run) == SEED_START_RUN
    annotations = {n: p.annotation for n, p in inspect.signature(start_run).parameters.items()}
    assert annotations == {"algo": str, "run_idx": int, "base_cfg": dict, "extra_cfg": dict | None}
    assert _params(log_history) == SEED_LOG_HISTORY
    assert inspect.signature(log_history).parameters["prefix"].annotation is str


def test_episode_log_is_a_frozen_kw_only_dataclass_with_the_documented_fields():
    assert dataclasses.is_dataclass(EpisodeLog)
    assert EpisodeLog.__dataclass_params__.frozen
    names = [f.name for f in dataclasses.fields(EpisodeLog)]
    assert names == [
        "env",
        "algo",
        "run",
        "episode",
        "env_copy",
        "t_start",
        "t_end",
        "length",
        "team_return",
        "agent_returns",
        "cost",
        "violated",
        "first_violation_step",
        "truncated_by_cap",
        "shield_interventions",
    ]
    assert all(f.kw_only for f in dataclasses.fields(EpisodeLog))
    with pytest.raises(TypeError):
        EpisodeLog("hazard_grid", "ippo")  # positional construction is refused


# ------------------------------------------------------------------------------------------
# create_base_config
# ------------------------------------------------------------------------------------------

REQUIRED = {
    "env_name": "hazard_grid",
    "num_envs": 2,
    "n_agents": 3,
    "timesteps": 128,
    "num_runs": 2,
    "rollouts": 16,
    "learning_epochs": 2,
    "mini_batches": 4,
    "learning_rate": 3e-4,
    "max_risk": 0.1,
    "use_wandb": True,
}


def test_create_base_config_fills_defaults_in_parameter_order():
    cfg = create_base_config(**REQUIRED)
    assert list(cfg) == list(inspect.signature(create_base_config).parameters)[:-1]
    assert cfg == {
        **REQUIRED,
        "shield_patience": 64,
        "shield_opponent_mode": "monotone_floor",
        "shield_reward_mode": "bayesian",
        "shield_credible_delta": 0.05,
        "shield_credible_schedule": "summable",
        "experiment_tag": "",
        "seed_offset": 0,
        "wm_version": "v0",
        "om_version": "v0",
        "ippo_version": "v0",
        "lag_version": "v0",
        "shield_version": "v0",
        "final_policy_eval_episodes": 0,
        "final_policy_eval_horizons": [1, 10, 50, 100, 200],
        "final_policy_eval_seed_offset": 1000000,
        "final_policy_eval_confidence": 0.95,
    }
    # Stored as a list so the config equals its own JSON round trip (config.json).
    assert json.loads(json.dumps(cfg)) == cfg


def test_create_base_config_positional_call_and_overrides_in_order():
    cfg = create_base_config(
        "spread",
        1,
        2,
        8,
        1,
        8,
        1,
        2,
        1,  # an int learning rate is a number too; stored as float
        0.5,
        False,
        final_policy_eval_horizons=(5, 7),
        experiment_tag="paper-v1.2_a",
        zeta={"a": [1, 2]},
        alpha=None,
        wandb_mode="online",
        wandb_project="proj",
        wandb_dir=__import__("pathlib").Path("results/x/wandb"),
    )
    assert cfg["learning_rate"] == 1.0 and type(cfg["learning_rate"]) is float
    assert cfg["final_policy_eval_horizons"] == [5, 7]
    assert list(cfg)[-5:] == ["zeta", "alpha", "wandb_mode", "wandb_project", "wandb_dir"]
    assert cfg["wandb_dir"] == "results/x/wandb"
    assert cfg["experiment_tag"] == "paper-v1.2_a"


def test_create_base_config_converts_numpy_scalars_to_plain_python():
    cfg = create_base_config(
        **{**REQUIRED, "num_envs": np.int64(2), "max_risk": np.float32(0.25)},
        final_policy_eval_horizons=np.array([1, 3]).tolist(),
        seed_offset=np.int32(7),
    )
    assert type(cfg["num_envs"]) is int and type(cfg["seed_offset"]) is int
    assert type(cfg["max_risk"]) is float and cfg["max_risk"] == 0.25
    json.dumps(cfg)


BAD_VALUES = [
    ("env_name", ""),
    ("env_name", "   "),
    ("env_name", 3),
    ("num_envs", 0),
    ("num_envs", True),
    ("num_envs", 2.0),
    ("n_agents", -1),
    ("timesteps", "100"),
    ("num_runs", 0),
    ("rollouts", 0),
    ("learning_epochs", 1.5),
    ("mini_batches", 0),
    ("learning_rate", 0.0),
    ("learning_rate", -1e-3),
    ("learning_rate", math.inf),
    ("learning_rate", math.nan),
    ("learning_rate", "3e-4"),
    ("learning_rate", True),
    ("max_risk", 0.0),
    ("max_risk", 1.0),
    ("max_risk", 1.5),
    ("max_risk", None),
    ("use_wandb", 1),
    ("use_wandb", "true"),
    ("shield_patience", -1),
    ("shield_patience", False),
    ("shield_opponent_mode", "models"),
    ("shield_opponent_mode", None),
    ("shield_reward_mode", "Bayesian"),
    ("shield_credible_delta", 0),
    ("shield_credible_delta", 1),
    ("shield_credible_schedule", "linear"),
    ("experiment_tag", "a b"),
    ("experiment_tag", "a/b"),
    ("experiment_tag", ".."),
    ("experiment_tag", None),
    ("seed_offset", -1),
    ("seed_offset", 0.0),
    ("wm_version", ""),
    ("om_version", None),
    ("ippo_version", 0),
    ("lag_version", " "),
    ("shield_version", ["v0"]),
    ("final_policy_eval_episodes", -1),
    ("final_policy_eval_horizons", ()),
    ("final_policy_eval_horizons", (10, 10)),
    ("final_policy_eval_horizons", (10, 5)),
    ("final_policy_eval_horizons", (0, 5)),
    ("final_policy_eval_horizons", (1, 2.0)),
    ("final_policy_eval_horizons", (1, True)),
    ("final_policy_eval_horizons", "1,10"),
    ("final_policy_eval_horizons", 10),
    ("final_policy_eval_seed_offset", -5),
    ("final_policy_eval_confidence", 1.0),
    ("final_policy_eval_confidence", 0.0),
    ("final_policy_eval_confidence", "0.95"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_create_base_config_rejects_each_bad_value_naming_key_and_value(key, value):
    with pytest.raises(ConfigError) as info:
        create_base_config(**{**REQUIRED, key: value})
    message = str(info.value)
    assert message.startswith(f"{key}={value!r}:")
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


def test_string_numbers_get_a_yaml_hint():
    with pytest.raises(ConfigError, match="write numbers without quotes"):
        create_base_config(**{**REQUIRED, "learning_rate": "3e-4"})


def test_minibatches_must_divide_the_ppo_batch():
    # batch = num_envs * rollouts * n_agents = 2 * 16 * 3 = 96; 5 does not divide it.
    with pytest.raises(ConfigError) as info:
        create_base_config(**{**REQUIRED, "mini_batches": 5})
    message = str(info.value)
    assert message.startswith("mini_batches=5:")
    assert "num_envs*rollouts*n_agents" in message and "96" in message
    assert create_base_config(**{**REQUIRED, "mini_batches": 96})["mini_batches"] == 96


def test_timesteps_must_allow_one_update():
    with pytest.raises(ConfigError) as info:
        create_base_config(**{**REQUIRED, "timesteps": 31})  # one update = 2 * 16 = 32 steps
    assert str(info.value).startswith("timesteps=31:")
    assert "num_envs*rollouts" in str(info.value) and "32" in str(info.value)
    assert create_base_config(**{**REQUIRED, "timesteps": 32})["timesteps"] == 32


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("wandb_mode", "dryrun"),
        ("wandb_mode", None),
        ("wandb_project", ""),
        ("wandb_dir", 5),
        ("wandb_dir", ""),
        ("extra", object()),
        ("extra", math.nan),
        ("extra", {1: "a"}.keys()),
    ],
)
def test_create_base_config_rejects_bad_overrides(key, value):
    with pytest.raises(ConfigError) as info:
        create_base_config(**REQUIRED, **{key: value})
    assert str(info.value).startswith(f"{key}={value!r}:")
    assert "\n" not in str(info.value)


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 8),
    n_agents=st.integers(1, 5),
    rollouts=st.integers(1, 64),
    mini_batches=st.integers(1, 16),
    extra_steps=st.integers(0, 1000),
    max_risk=st.floats(0.0, 1.0, exclude_min=True, exclude_max=True),
    horizons=st.lists(st.integers(1, 500), min_size=1, max_size=6, unique=True),
)
def test_valid_configs_round_trip_through_json(
    num_envs, n_agents, rollouts, mini_batches, extra_steps, max_risk, horizons
):
    batch = num_envs * rollouts * n_agents
    kwargs = {
        **REQUIRED,
        "num_envs": num_envs,
        "n_agents": n_agents,
        "rollouts": rollouts,
        "mini_batches": mini_batches,
        "timesteps": num_envs * rollouts + extra_steps,
        "max_risk": max_risk,
        "final_policy_eval_horizons": tuple(sorted(horizons)),
    }
    if batch % mini_batches:
        with pytest.raises(ConfigError, match=r"^mini_batches="):
            create_base_config(**kwargs)
        return
    cfg = create_base_config(**kwargs)
    assert json.loads(json.dumps(cfg)) == cfg
    assert cfg["final_policy_eval_horizons"] == sorted(horizons)


# ------------------------------------------------------------------------------------------
# EpisodeLog and load_history
# ------------------------------------------------------------------------------------------


def make_episode(**changes):
    values = {
        "env": "hazard_grid",
        "algo": "ippo",
        "run": 0,
        "episode": 0,
        "env_copy": 1,
        "t_start": 2,
        "t_end": 12,
        "length": 5,
        "team_return": -1.25,
        "agent_returns": (0.5, -1.75),
        "cost": 2.0,
        "violated": True,
        "first_violation_step": 3,
        "truncated_by_cap": False,
        "shield_interventions": 4,
    }
    values.update(changes)
    return EpisodeLog(**values)


def test_episode_log_round_trips_through_json():
    episode = make_episode()
    data = episode.to_dict()
    assert data["agent_returns"] == [0.5, -1.75]
    rebuilt = EpisodeLog.from_dict(json.loads(json.dumps(data)))
    assert rebuilt == episode
    assert rebuilt.agent_returns == (0.5, -1.75)
    with pytest.raises(dataclasses.FrozenInstanceError):
        episode.cost = 0.0


def test_episode_log_normalises_numpy_values():
    episode = make_episode(
        run=np.int64(1),
        t_end=np.int64(20),
        team_return=np.float32(1.5),
        agent_returns=np.array([1.0, 0.5], dtype=np.float32),
        violated=np.bool_(True),
        truncated_by_cap=np.bool_(False),
    )
    assert type(episode.run) is int and type(episode.t_end) is int
    assert type(episode.team_return) is float
    assert episode.agent_returns == (1.0, 0.5)
    assert all(type(v) is float for v in episode.agent_returns)
    assert episode.violated is True and episode.truncated_by_cap is False
    json.dumps(episode.to_dict())


def test_episode_without_violation():
    episode = make_episode(cost=0.0, violated=False, first_violation_step=-1)
    assert not episode.violated


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"env": ""}, "env"),
        ({"algo": None}, "algo"),
        ({"run": -1}, "run"),
        ({"episode": 1.0}, "episode"),
        ({"env_copy": True}, "env_copy"),
        ({"t_start": -3}, "t_start"),
        ({"t_end": 1}, "t_end"),  # before t_start
        ({"length": "5"}, "length"),
        ({"length": 0, "cost": 0.0, "violated": False, "first_violation_step": -1}, "length"),
        ({"team_return": math.nan}, "team_return"),
        ({"team_return": "1"}, "team_return"),
        ({"agent_returns": "ab"}, "agent_returns"),
        ({"agent_returns": ()}, "agent_returns"),
        ({"agent_returns": 3.0}, "agent_returns"),
        ({"agent_returns": (1.0, math.inf)}, "agent_returns[1]"),
        ({"cost": -1.0}, "cost"),
        ({"violated": 1}, "violated"),
        ({"violated": False}, "violated"),  # cost > 0 but not violated
        ({"first_violation_step": 0}, "first_violation_step"),
        ({"first_violation_step": 6}, "first_violation_step"),  # beyond length 5
        ({"first_violation_step": 2.0}, "first_violation_step"),
        (
            {"cost": 0.0, "violated": False, "first_violation_step": 2},
            "first_violation_step",
        ),
        ({"truncated_by_cap": "no"}, "truncated_by_cap"),
        ({"shield_interventions": -1}, "shield_interventions"),
    ],
)
def test_episode_log_rejects_bad_values_naming_the_field(changes, field):
    with pytest.raises(ValueError, match="^" + re.escape(f"EpisodeLog.{field}=")):
        make_episode(**changes)


def test_from_dict_names_missing_and_unknown_keys():
    data = make_episode().to_dict()
    del data["cost"], data["t_end"]
    data["reward"] = 1.0
    with pytest.raises(ValueError) as info:
        EpisodeLog.from_dict(data)
    assert str(info.value) == (
        "EpisodeLog.from_dict: missing keys: t_end, cost; unknown keys: reward"
    )
    with pytest.raises(TypeError, match="needs a dict, got list"):
        EpisodeLog.from_dict([1, 2])


def test_load_history_reads_what_save_to_file_wrote(tmp_path):
    history = [make_episode(episode=i, t_end=12 + i) for i in range(3)]
    save_to_file(history, tmp_path, "history.json")
    assert load_history(tmp_path, "history.json") == history
    save_to_file([e.to_dict() for e in history], tmp_path, "history.yaml")
    assert load_history(tmp_path, "history.yaml") == history


def test_load_history_names_the_file_and_the_bad_entry(tmp_path):
    good = make_episode().to_dict()
    bad = {**good, "length": -1}
    save_to_file([good, bad], tmp_path, "history.json")
    with pytest.raises(ValueError, match=r"history\.json: entry 1: EpisodeLog\.length=-1"):
        load_history(tmp_path, "history.json")
    save_to_file({"not": "a list"}, tmp_path, "other.json")
    with pytest.raises(ValueError, match="expected a list of episode records, got dict"):
        load_history(tmp_path, "other.json")
    with pytest.raises(FileNotFoundError):
        load_history(tmp_path, "missing.json")


# ------------------------------------------------------------------------------------------
# start_run and log_history on real wandb runs (offline, under tmp paths)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_env(tmp_path_factory):
    """Point every wandb path at a temp folder for this module; stop wandb's service after."""
    root = tmp_path_factory.mktemp("wandb_env")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_SILENT", "true")
        for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            patch.setenv(name, str(root / name.lower()))
        patch.setenv("WANDB_ARTIFACT_DIR", str(root / "artifacts"))
        patch.delenv("WANDB_MODE", raising=False)
        yield root
        import wandb  # local import: see the real_run fixture of test_wandb_file.py

        # wandb's service process keeps the environment it started with; stop it so later
        # users of wandb in this interpreter start one with their own environment.
        wandb.teardown()


def base_cfg(wandb_dir, **changes):
    return create_base_config(
        **{**REQUIRED, "experiment_tag": "unit-1", "seed_offset": 100, **changes},
        wandb_dir=str(wandb_dir),
    )


def shuffled_history(n, seed=0):
    history = [
        make_episode(
            run=2,
            episode=i,
            env_copy=i % 2,
            t_start=max(0, 6 * i - 5),
            t_end=6 * i + 1 + i % 2,
            team_return=-0.5 * i,
            agent_returns=(float(i), 0.25),
            cost=float(i % 3 == 0),
            violated=i % 3 == 0,
            first_violation_step=2 if i % 3 == 0 else -1,
            truncated_by_cap=i % 2 == 1,
            shield_interventions=i,
        )
        for i in range(n)
    ]
    random.Random(seed).shuffle(history)
    return history


@pytest.fixture(scope="module")
def episode_run(wandb_env):
    """One offline run holding a shuffled EpisodeLog history logged with a prefix."""
    from wandb.analytics.opentelemetry import opentelemetry_proxy

    wandb_dir = wandb_env / "episodes"
    import wandb  # local import: see the real_run fixture of test_wandb_file.py

    history = shuffled_history(7)
    lookups = []
    with pytest.MonkeyPatch.context() as patch:
        # Record every host name this process resolves while the run is open.
        real_getaddrinfo = socket.getaddrinfo
        patch.setattr(
            socket,
            "getaddrinfo",
            lambda host, *args, **kwargs: (
                lookups.append(host) or real_getaddrinfo(host, *args, **kwargs)
            ),
        )
        run = start_run("ippo", 2, base_cfg(wandb_dir), {"algo_params": {"gamma": 0.99}})
        mode = run.settings.mode
        log_history(run, history, prefix="train/")
        run.finish()
        # finish() returns before wandb's service has flushed the run file; teardown waits.
        wandb.teardown()
        analytics = opentelemetry_proxy.get_open_telemetry_proxy()
    (path,) = find_run_files(wandb_dir)
    return {
        "path": path,
        "history": history,
        "mode": mode,
        "run_id": run.id,
        "lookups": lookups,
        "analytics": analytics,
    }


def test_an_offline_run_opens_no_network_connection(episode_run):
    assert episode_run["lookups"] == []
    # wandb's usage analytics would post to its server from run.log; start_run turns it off.
    assert episode_run["analytics"] is None


def test_start_run_opens_an_offline_run_with_grouping_naming_and_seed(episode_run):
    assert episode_run["mode"] == "offline"
    assert episode_run["path"].name == f"run-{episode_run['run_id']}.wandb"
    (run_record,) = [r.run for r in read_records(episode_run["path"]) if r.HasField("run")]
    assert run_record.run_group == "unit-1"
    assert run_record.job_type == "ippo"
    assert run_record.display_name == "hazard_grid-ippo-run2"
    assert run_record.project == "safe-marl"
    config = {u.key: json.loads(u.value_json) for u in run_record.config.update}
    assert config["algo"] == "ippo"
    assert config["run_idx"] == 2
    assert config["seed"] == 102  # seed_offset 100 + run 2
    assert config["algo_params"] == {"gamma": 0.99}
    assert config["final_policy_eval_horizons"] == [1, 10, 50, 100, 200]
    assert config["env_name"] == "hazard_grid"


def test_log_history_logs_one_row_per_episode_at_t_end(episode_run):
    rows = read_history(episode_run["path"])
    expected = sorted(episode_run["history"], key=lambda e: e.t_end)
    assert len(rows) == len(expected)
    assert [row["_step"] for row in rows] == [e.t_end for e in expected]
    for row, episode in zip(rows, expected, strict=True):
        assert row["train/t_end"] == episode.t_end
        assert row["train/episode"] == episode.episode
        assert row["train/env_copy"] == episode.env_copy
        assert row["train/t_start"] == episode.t_start
        assert row["train/length"] == episode.length
        assert row["train/team_return"] == episode.team_return
        assert row["train/agent_returns/0"] == episode.agent_returns[0]
        assert row["train/agent_returns/1"] == episode.agent_returns[1]
        assert row["train/cost"] == episode.cost
        assert row["train/violated"] == int(episode.violated)
        assert row["train/first_violation_step"] == episode.first_violation_step
        assert row["train/truncated_by_cap"] == int(episode.truncated_by_cap)
        assert row["train/shield_interventions"] == episode.shield_interventions
        logged = {k for k in row if not k.startswith("_")}
        assert len(logged) == 13 and all(k.startswith("train/") for k in logged)


def test_episode_rows_are_the_rows_log_history_logs(episode_run):
    rows = episode_rows(episode_run["history"], prefix="train/")
    logged = [
        {("step" if k == "_step" else k): v for k, v in row.items() if k not in CLOCK_KEYS}
        for row in read_history(episode_run["path"])
    ]
    assert rows == logged
    assert [row["step"] for row in rows] == sorted(e.t_end for e in episode_run["history"])
    assert episode_rows([]) == []


@pytest.mark.parametrize(
    ("history", "prefix", "error", "match"),
    [
        ([{"step": 1, "a": 1}], "", TypeError, "must be a list of EpisodeLog, got list"),
        ("rows", "", TypeError, "got str"),
        ([make_episode()], None, TypeError, "prefix must be a str"),
        (
            [make_episode(episode=0, t_end=12), make_episode(episode=1, t_end=12)],
            "",
            ValueError,
            "episodes 0 and 1 share t_end=12",
        ),
    ],
)
def test_episode_rows_rejects_what_log_history_rejects(history, prefix, error, match):
    with pytest.raises(error, match=match):
        episode_rows(history, prefix=prefix)


def test_log_history_of_dicts_and_columns_in_one_run(wandb_env):
    """list of dicts, dict of lists and empty histories into one (second) offline run."""
    import wandb  # local import: see the real_run fixture of test_wandb_file.py

    wandb_dir = wandb_env / "rows"
    cfg = base_cfg(wandb_dir, wandb_project="unit-project")
    run = start_run("ippo_lag", 0, cfg)
    log_history(run, [{"step": 3, "loss": 0.5}, {"step": 5, "loss": 0.25, "nested": {"a": 1}}])
    log_history(run, [])
    log_history(run, {})
    # Step 5 is committed: wandb would drop a second row at 5 (or 4), so both are refused.
    with pytest.raises(ValueError, match="first step 5 is below the run's current step 6"):
        log_history(run, [{"step": 5, "loss": 9.0}])
    with pytest.raises(ValueError, match="first step 4 is below the run's current step 6"):
        log_history(run, {"step": [4], "loss": [9.0]})
    columns = {"step": np.array([8, 9]), "p": np.array([0.1, 0.2]), "tag": ["a", "b"]}
    log_history(run, columns, prefix="eval/")
    log_history(run, [{"late": 1}])  # no step: wandb continues after the last one
    run.finish()
    wandb.teardown()

    (path,) = find_run_files(wandb_dir)
    rows = [
        {k: v for k, v in row.items() if k not in ("_timestamp", "_runtime")}
        for row in read_history(path)
    ]
    assert rows == [
        {"_step": 3, "loss": 0.5},
        {"_step": 5, "loss": 0.25, "nested.a": 1},
        {"_step": 8, "eval/p": 0.1, "eval/tag": "a"},
        {"_step": 9, "eval/p": 0.2, "eval/tag": "b"},
        {"_step": 10, "late": 1},
    ]
    (run_record,) = [r.run for r in read_records(path) if r.HasField("run")]
    assert run_record.project == "unit-project"
    assert run_record.display_name == "hazard_grid-ippo_lag-run0"
    config = {u.key: json.loads(u.value_json) for u in run_record.config.update}
    assert config["seed"] == 100


def test_disabled_run_when_use_wandb_is_false(wandb_env):
    wandb_dir = wandb_env / "disabled"
    run = start_run("shield", 1, base_cfg(wandb_dir, use_wandb=False))
    assert run.disabled
    run.log({"x": 1.0}, step=3)
    log_history(run, shuffled_history(3))
    run.finish()
    assert not wandb_dir.exists() or find_run_files(wandb_dir) == []


def test_mode_comes_from_config_then_environment(wandb_env, monkeypatch):
    # "disabled" keeps these checks free of run files; the offline default is checked above.
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run = start_run("ippo", 0, base_cfg(wandb_env / "env_mode"))
    assert run.disabled
    run.finish()
    monkeypatch.setenv("WANDB_MODE", "offline")
    run = start_run("ippo", 0, base_cfg(wandb_env / "cfg_mode", wandb_mode="disabled"))
    assert run.disabled
    run.finish()
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ConfigError, match=r"^WANDB_MODE \(environment\)='sometimes':"):
        start_run("ippo", 0, base_cfg(wandb_env / "bad_mode"))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("", 0), ValueError, "algo=''"),
        ((None, 0), ValueError, "algo=None"),
        (("ippo", -1), ValueError, "run_idx=-1"),
        (("ippo", True), ValueError, "run_idx=True"),
        (("ippo", 1.0), ValueError, "run_idx=1.0"),
    ],
)
def test_start_run_rejects_bad_algo_and_run_index(tmp_path, args, error, match):
    with pytest.raises(error, match=match):
        start_run(*args, base_cfg(tmp_path, use_wandb=False))


def test_start_run_rejects_bad_configs(tmp_path):
    cfg = base_cfg(tmp_path, use_wandb=False)
    with pytest.raises(TypeError, match="base_cfg must be a dict"):
        start_run("ippo", 0, [("env_name", "x")])
    with pytest.raises(TypeError, match="extra_cfg must be a dict or None"):
        start_run("ippo", 0, cfg, ["x"])
    incomplete = {k: v for k, v in cfg.items() if k not in ("env_name", "seed_offset")}
    with pytest.raises(ConfigError, match="base_cfg is missing env_name, seed_offset"):
        start_run("ippo", 0, incomplete)
    with pytest.raises(ConfigError, match=r"^use_wandb='no':"):
        start_run("ippo", 0, {**cfg, "use_wandb": "no"})
    with pytest.raises(ConfigError, match=r"^wandb_mode='cloud':"):
        start_run("ippo", 0, {**cfg, "use_wandb": True, "wandb_mode": "cloud"})
    with pytest.raises(
        ConfigError, match=r"^seed=5: contradicts the run being started \(seed=103\)"
    ):
        start_run("ippo", 3, cfg, {"seed": 5})
    with pytest.raises(ConfigError, match=r"^algo='shield': contradicts"):
        start_run("ippo", 3, {**cfg, "algo": "shield"})
    # The same identity (a resolved run config) is accepted.
    run = start_run("ippo", 3, cfg, {"algo": "ippo", "run_idx": 3, "seed": 103})
    run.finish()


@pytest.fixture
def noop_run(tmp_path):
    run = start_run("ippo", 0, base_cfg(tmp_path, use_wandb=False))
    yield run
    run.finish()


@pytest.mark.parametrize(
    ("history", "error", "match"),
    [
        (None, TypeError, "got NoneType"),
        (5, TypeError, "got int"),
        ("rows", TypeError, "got str"),
        ({1, 2}, TypeError, "got set"),
        ([{"a": 1}, 3], TypeError, r"history\[1\] is int"),
        ([make_episode(), {"a": 1}], TypeError, "got a mix"),
        ([{"a": 1}, make_episode()], TypeError, "got a mix"),
        ([{1: "a"}], TypeError, "non-string key 1"),
        ({1: [1]}, TypeError, "column name 1"),
        ({"a": 3}, TypeError, "column 'a' must be a list"),
        ({"a": np.zeros((2, 2))}, TypeError, "column 'a' must be a list .* got ndarray"),
        ({"a": "xyz"}, TypeError, "column 'a' must be a list"),
        ({"a": [1, 2], "b": [1]}, ValueError, r"equal lengths \(a: 2, b: 1\)"),
        ([{"step": 2, "a": 1}, {"step": 2, "a": 2}], ValueError, "strictly increasing"),
        ([{"step": 3}, {"step": 1}], ValueError, "row 1 has step 1 after 3"),
        ([{"step": 1}, {"a": 1}], ValueError, "every row has a 'step' or none"),
        ([{"step": -1}], ValueError, r"\['step'\]=-1"),
        ([{"step": 1.5}], ValueError, r"\['step'\]=1.5"),
        ({"step": [1, True]}, ValueError, r"\['step'\]=True"),
        (
            [make_episode(episode=0, t_end=12), make_episode(episode=1, t_end=12)],
            ValueError,
            "episodes 0 and 1 share t_end=12",
        ),
        (
            [make_episode(run=0, t_end=12), make_episode(run=1, t_end=13)],
            ValueError,
            "several runs",
        ),
    ],
)
def test_log_history_rejects_bad_histories(noop_run, history, error, match):
    with pytest.raises(error, match=match):
        log_history(noop_run, history)


def test_log_history_rejects_bad_run_and_prefix(noop_run):
    with pytest.raises(TypeError, match="run must be a wandb run"):
        log_history({"log": 1}, [])
    with pytest.raises(TypeError, match="prefix must be a str, got NoneType"):
        log_history(noop_run, [], prefix=None)
