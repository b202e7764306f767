"""Box actions in ippo and ippo_lag: the Gaussian policy on `spread` with continuous actions.

It trains and learns, gives the same bits for the same seed, resumes bit for bit after a kill,
is evaluated (the run's evaluation and `python -m src.evaluation.checkpoint` agree) like a
Discrete policy; its log-probability and entropy are those of `torch.distributions.Normal`.
A team mixing Discrete and Box agents, and an algorithm that does not declare Box actions, are
refused in one line (the shields on Box actions: tests/algos/shield/test_box_shield.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal

from src.algos.actions import POLICY_KEY, BoxActions, shared_action_space, team_action_box
from src.algos.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from src.algos.networks import gaussian_entropy, gaussian_log_prob, sample_gaussian
from src.algos.policy import load_actor
from src.algos.train import build_trainer, make_vector_env_for, train_run
from src.analysis.floor import task_floor
from src.config.run import RunConfig, make_run_config
from src.config.workflow import WorkflowConfigError, check_workflow_config
from src.core.io import load_from_file, save_to_file
from src.custom import ComponentError, register_algorithm, register_env
from src.envs.registry import make_vector_env
from src.envs.task import TaskError
from src.evaluation import checkpoint as checkpoint_cli
from src.evaluation.evaluate import evaluate_run
from tests.algos.test_resume import _start_and_kill
from tests.custom.conftest import tiny_config

SPREAD_BOX = {"continuous_actions": True, "max_steps": 10}


def _config(algo: str, **changes: Any) -> dict[str, Any]:
    """A run of `algo` on spread with Box actions: 4 copies x 16 steps x 6 updates."""
    settings: dict[str, Any] = {
        "env_name": "spread",
        "algo": algo,
        "num_envs": 4,
        "n_agents": 2,
        "rollouts": 16,
        "timesteps": 4 * 16 * 6,
        "learning_epochs": 2,
        "mini_batches": 4,
        "learning_rate": 3e-3,
        "checkpoint_every": 2,
        "env_params": dict(SPREAD_BOX),
        "final_policy_eval_episodes": 6,
        "final_policy_eval_horizons": [1, 5, 10],
        "final_policy_eval_num_envs": 4,
    }
    settings.update(changes)
    return make_run_config(**settings)


def _same_weights(first: Path, second: Path) -> None:
    expected = load_from_file(first, "policy.pt")["actor_critic"]
    found = load_from_file(second, "policy.pt")["actor_critic"]
    assert expected.keys() == found.keys()
    for key in expected:
        assert torch.equal(expected[key], found[key]), key


def _same_training(first: Path, second: Path) -> None:
    """The same weights, episodes and update rows (less the wall-clock ones)."""
    _same_weights(first, second)
    assert load_from_file(first, "history.json") == load_from_file(second, "history.json")
    strip = ("wall_time", "charts/steps_per_second")
    rows = [
        [
            {k: v for k, v in row.items() if k not in strip}
            for row in load_from_file(d, "updates.json")
        ]
        for d in (first, second)
    ]
    assert rows[0] == rows[1]


# ------------------------------------------------------------------ the Gaussian policy


def test_log_prob_and_entropy_are_those_of_torch_normal():
    gen = torch.Generator().manual_seed(3)
    mean = torch.randn(7, 3, 5, generator=gen)
    log_std = 0.5 * torch.randn(5, generator=gen)
    actions = mean + 2.0 * torch.randn(7, 3, 5, generator=gen)
    normal = Normal(mean, log_std.exp())
    expected = normal.log_prob(actions).sum(-1)
    assert torch.allclose(gaussian_log_prob(mean, log_std, actions), expected, atol=1e-5)
    entropy = normal.entropy().sum(-1)  # [7, 3], the same everywhere
    assert torch.allclose(gaussian_entropy(log_std).expand_as(entropy), entropy, atol=1e-6)


def test_samples_come_from_the_generator_alone_and_follow_the_gaussian():
    mean, log_std = torch.tensor([0.5, -1.0]), torch.log(torch.tensor([0.1, 2.0]))
    draws = [
        sample_gaussian(mean.expand(20_000, 2), log_std, torch.Generator().manual_seed(11))
        for _ in range(2)
    ]
    assert torch.equal(draws[0], draws[1])
    assert torch.allclose(draws[0].mean(0), mean, atol=0.05)
    assert torch.allclose(draws[0].std(0), log_std.exp(), rtol=0.03)


def test_box_samples_are_clipped_only_on_their_way_to_the_env():
    box = BoxActions.from_space(spaces.Box(0.0, 1.0, (2, 3), np.float32), env="test")
    raw = torch.tensor([[-0.5, 0.25, 1.5, 0.0, 1.0, 2.0]])
    kept = raw.clone()
    sent = box.to_env(raw)
    assert sent.shape == (1, 2, 3) and sent.dtype == np.float32
    assert sent.reshape(-1).tolist() == [0.0, 0.25, 1.0, 0.0, 1.0, 1.0]
    assert torch.equal(raw, kept)  # the policy learns from the raw sample
    again = BoxActions.from_description(box.describe(), where="policy.pt")
    assert again.shape == box.shape and again.dtype == box.dtype
    assert np.array_equal(again.low, box.low) and np.array_equal(again.high, box.high)


def test_a_box_of_integers_and_a_broken_description_are_refused_in_one_line():
    with pytest.raises(
        ComponentError, match=r"^env x: its Box actions .* hold int64; the Gaussian"
    ):
        BoxActions.from_space(spaces.Box(0, 3, (2,), np.int64), env="x")
    described = BoxActions.from_space(spaces.Box(0.0, 1.0, (2,), np.float32), env="x").describe()
    for broken, problem in (
        ({**described, "low": [0.0]}, "has low [0.0], not a list of 2 numbers"),
        ({**described, "low": [2.0, 0.0]}, "has a lower bound above its upper bound"),
        ({**described, "dtype": "int32"}, "has dtype int32, not a float dtype"),
        ({**described, "shape": []}, "has shape [], not a non-empty list of sizes"),
    ):
        with pytest.raises(ValueError) as error:
            BoxActions.from_description(broken, where="run/policy.pt")
        assert str(error.value) == f"run/policy.pt: entry {POLICY_KEY!r} {problem}"


# ------------------------------------------------------------------ training and evaluation


@pytest.mark.parametrize("algo", ["ippo", "ippo_lag"])
def test_box_run_trains_and_is_evaluated_like_a_discrete_one(tmp_path, algo):
    config = _config(algo)
    run = tmp_path / "run"
    train_run(config, run, progress=False)
    assert load_from_file(run, "history.json")
    policy = load_from_file(run, "policy.pt")
    assert policy["network"]["continuous"] and policy["network"]["n_actions"] == 5
    assert policy[POLICY_KEY] == {
        "kind": "box",
        "shape": [5],
        "low": [0.0] * 5,
        "high": [1.0] * 5,
        "dtype": "float32",
    }
    assert policy["actor_critic"]["log_std"].shape == (5,)
    rows = load_from_file(run, "updates.json")
    assert all(np.isfinite(row["losses/entropy"]) for row in rows)

    # The deployed policy samples as the discrete one does: from the generator `reset` seeds,
    # its samples clipped to the Box.
    actor = load_actor(run)
    obs = np.random.default_rng(0).normal(size=(3, 2, 12)).astype(np.float32)
    draws = []
    for _ in range(2):
        actor.reset(num_envs=3, seed=7)
        draws.append(actor.act(obs, np.ones(3, dtype=np.int64)))
    assert draws[0].shape == (3, 2, 5) and draws[0].dtype == np.float32
    assert np.array_equal(draws[0], draws[1])
    assert draws[0].min() >= 0.0 and draws[0].max() <= 1.0
    assert not actor.shielded and actor.last_intervened is None

    evaluation = evaluate_run(run, tmp_path / "eval.parquet")
    assert evaluation["horizon"].tolist() == [1, 5, 10]
    assert (evaluation["n"] == 6).all() and not evaluation["shielded"].any()
    # The command evaluates a saved run on the run's own seeds to the same numbers.
    out = tmp_path / "cli.parquet"
    assert checkpoint_cli.main([str(run), "--out", str(out)]) == 0
    again = pd.read_parquet(out)
    for column in ("horizon", "violations", "mean_return", "mean_cost"):
        assert again[column].tolist() == evaluation[column].tolist(), column
    assert [list(v) for v in again["violating_episodes"]] == [
        list(v) for v in evaluation["violating_episodes"]
    ]


def test_box_ippo_learns_on_spread(tmp_path):
    # 30 updates of 8 copies x 32 steps (a few seconds): the return rises as the discrete
    # policy's does on the same budget.
    config = _config(
        "ippo",
        num_envs=8,
        rollouts=32,
        timesteps=8 * 32 * 30,
        learning_epochs=4,
        checkpoint_every=100,
    )
    train_run(config, tmp_path, progress=False)
    returns = [row["charts/episode_return"] for row in load_from_file(tmp_path, "updates.json")]
    first, last = np.mean(returns[:6]), np.mean(returns[-6:])
    assert last > first + 1.0, (first, last)


def test_same_config_and_seed_give_the_same_bits(tmp_path):
    config = _config("ippo_lag")
    for name in ("a", "b"):
        train_run(config, tmp_path / name, progress=False)
    _same_training(tmp_path / "a", tmp_path / "b")
    other = tmp_path / "other"
    train_run(_config("ippo_lag", seed_offset=1), other, progress=False)
    with pytest.raises(AssertionError):
        _same_weights(tmp_path / "a", other)


def test_a_resumed_trainer_goes_on_as_if_never_stopped(tmp_path):
    config = RunConfig.from_dict(_config("ippo"))
    whole = build_trainer(config, make_vector_env_for(config))
    whole.train(progress=False)
    half = build_trainer(config, make_vector_env_for(config))
    half.num_updates = 3
    half.train(progress=False)
    folder = save_checkpoint(half, tmp_path)
    resumed = build_trainer(config, make_vector_env_for(config))
    load_checkpoint(resumed, folder)
    resumed.train(progress=False)
    for key, tensor in whole.net.state_dict().items():
        assert torch.equal(tensor, resumed.net.state_dict()[key]), key
    assert [e.to_dict() for e in whole.history] == [e.to_dict() for e in resumed.history]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ippo", "ippo_lag"])
@pytest.mark.parametrize(
    ("pause_at", "checkpoint_update"),
    [("after_checkpoint:3", 4), ("mid_update:3", 2)],
    ids=["update-boundary", "mid-update"],
)
def test_killed_box_run_resumes_bit_for_bit(tmp_path, algo, pause_at, checkpoint_update):
    config = _config(algo)
    reference = tmp_path / "reference"
    train_run(config, reference, progress=False)
    killed = tmp_path / "killed"
    _start_and_kill(config, killed, pause_at)
    assert not (killed / "policy.pt").exists()
    checkpoint = latest_checkpoint(killed)
    assert checkpoint is not None and checkpoint.name == f"update-{checkpoint_update:06d}"
    train_run(config, killed, progress=False)
    assert not (killed / "checkpoint").exists()
    _same_training(reference, killed)


def test_the_risk_floor_of_box_spread_is_that_of_its_one_hot_actions():
    # The floor's teams choose Discrete actions; the one-hot Box action of each moves the
    # agents to the same bits, so a Box task's floor is its Discrete copy's.
    box, discrete = (
        make_vector_env("spread", num_envs=3, seed=4, n_agents=3, **{**SPREAD_BOX, **flag})
        for flag in ({}, {"continuous_actions": False})
    )
    assert np.array_equal(box.reset(), discrete.reset())
    rng = np.random.default_rng(0)
    for _ in range(12):
        chosen = rng.integers(0, 5, size=(3, 3))
        one_hot = np.eye(5, dtype=np.float32)[chosen]
        stepped = box.step(one_hot), discrete.step(chosen)
        for field in ("obs", "reward", "cost", "truncated", "final_obs"):
            assert np.array_equal(getattr(stepped[0], field), getattr(stepped[1], field)), field
    settings = {"first_seed": 10, "episodes": 4, "horizon": 10, "confidence": 0.95}
    params = {"n_agents": 3, "max_steps": 10}
    floors = (
        task_floor("spread", {**params, "continuous_actions": flag}, **settings)
        for flag in (True, False)
    )
    assert next(floors) == next(floors)


# ------------------------------------------------------------------ refusals


def test_a_team_mixing_discrete_and_box_agents_is_refused_in_one_line():
    team = {
        "agent_0": spaces.Discrete(5),
        "agent_1": spaces.Box(0.0, 1.0, (5,), np.float32),
    }
    with pytest.raises(ComponentError) as error:
        shared_action_space(team, env="mixed")
    assert str(error.value) == (
        "env mixed: agent 'agent_0' has Discrete actions Discrete(5) and agent 'agent_1' has "
        "Box actions Box(0.0, 1.0, (5,), float32); a team that mixes Discrete and Box actions "
        "is not supported: every agent needs the same action space"
    )


MIXED_ERROR = (
    r"env mixed: agent 'agent_0' has Discrete actions Discrete\(5\) and agent 'agent_1' has "
    r"Box actions Box\(0\.0, 1\.0, \(5,\), float32\); a team that mixes Discrete and Box"
)


def test_a_mixed_team_is_refused_by_the_trainer_and_by_the_config_check():
    # The task's own VectorEnv has Box actions and no action_space: the trainer reads the
    # agents' spaces from the task's factory. The config check reads them whatever it has.
    register_env(
        "mixed",
        "tests.algos.box_tasks:mixed_team",
        vector="tests.algos.box_tasks:continuous_spread",
    )
    config = make_run_config(
        env_name="mixed", algo="ippo", num_envs=2, n_agents=3, rollouts=8, timesteps=32
    )
    env = make_vector_env_for(RunConfig.from_dict(config))
    with pytest.raises(ComponentError, match=f"^{MIXED_ERROR}"):
        team_action_box(env, env_name="mixed", params={"n_agents": 3})
    with pytest.raises(ComponentError, match=f"^{MIXED_ERROR}"):
        build_trainer(config, env)

    workflow = tiny_config(
        ["mixed"],
        ["ippo"],
        custom_envs={
            "mixed": {
                "factory": "tests.algos.box_tasks:mixed_team",
                "vector": "tests.algos.box_tasks:continuous_spread_with_space",
                "cost": "mpe2_collisions",
            }
        },
        env_params={"mixed": {"n_agents": 3, "max_steps": 10}},
    )
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(workflow)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("config key 'custom_envs.mixed' = ")
    assert "agent 'agent_0' has Discrete actions Discrete(5) and agent 'agent_1'" in message

    # Without a VectorEnv of its own, the task's vector form refuses the team when it is built.
    register_env("mixed_list", "tests.algos.box_tasks:mixed_team", cost="mpe2_collisions")
    with pytest.raises(TaskError) as refused:
        make_vector_env("mixed_list", num_envs=1, n_agents=3)
    assert "\n" not in str(refused.value)
    assert "agents 'agent_0' and 'agent_1' act in different spaces (Discrete(5) and Box(" in str(
        refused.value
    )


def test_an_ippo_subclass_without_box_actions_is_refused_by_its_trainer_in_one_line():
    # A shielded IPPO given by import path declares the default action kinds (Discrete).
    register_algorithm("my_shield", "tests.custom.tasks:ShieldedPenalty")
    config = _config("my_shield", shield_patience=1)
    with pytest.raises(ValueError) as error:
        build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))
    assert str(error.value) == (
        "algo my_shield takes discrete actions, and env spread has box actions (5 entries in "
        "[0, 1]); leave my_shield out for this env (the built-in algorithms that take box "
        "actions: ippo, ippo_lag, shield, shield_dec)"
    )


def test_a_box_policy_without_its_action_space_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    train_run(_config("ippo", timesteps=4 * 16 * 2), run, progress=False)
    state = load_from_file(run, "policy.pt")
    del state[POLICY_KEY]
    save_to_file(state, run, "policy.pt")
    with pytest.raises(ValueError) as error:
        load_actor(run)
    message = str(error.value)
    assert "\n" not in message
    assert message.endswith(
        f"a Box policy needs both a continuous network and the entry {POLICY_KEY!r} (network "
        "continuous: True; entries: ['actor_critic', 'algo_config', 'config', 'network'])"
    )
