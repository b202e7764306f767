"""The IPPO trainer and train_run on the toy env: outputs, errors, determinism, hooks."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algos import metrics as M
from src.algos.ippo import IPPO
from src.algos.train import build_trainer, train_run
from src.core.io import load_from_file
from src.records import EpisodeLog, load_history
from tests.algos.conftest import toy_config
from tests.algos.toy_env import RiskyContextEnv, make_toy_env


def _weights(run_dir):
    return load_from_file(run_dir, "policy.pt")["actor_critic"]


@pytest.mark.parametrize("algo", ["ippo", "ippo_lag"])
def test_train_run_writes_every_output(tmp_path, algo):
    config = toy_config(algo=algo)
    train_run(config, tmp_path, make_env=make_toy_env, progress=False)
    assert not (tmp_path / "checkpoint").exists()

    written = json.loads((tmp_path / "config.json").read_text())
    assert written["algo"] == algo and written["seed"] == config["seed"]
    assert written["git_commit"] and "torch" in written["package_versions"]
    assert written["kernels"]["torch_cpu_capability"]  # the kernels the run's numbers came from

    policy = torch.load(tmp_path / "policy.pt", weights_only=True)
    assert set(policy) >= {"actor_critic", "network", "config", "algo_config"}
    assert policy["network"]["cost_critic"] is (algo == "ippo_lag")

    history = load_history(tmp_path, "history.json")
    assert history and all(isinstance(ep, EpisodeLog) for ep in history)
    assert [ep.episode for ep in history] == list(range(len(history)))
    t_end = [ep.t_end for ep in history]
    assert all(b > a for a, b in itertools.pairwise(t_end))
    total = config["timesteps"]
    assert t_end[-1] <= total
    for ep in history:
        # global step numbers: vector step * E + copy + 1, so both ends sit in the same copy
        assert (ep.t_end - 1) % config["num_envs"] == ep.env_copy
        assert (ep.t_start - 1) % config["num_envs"] == ep.env_copy
        assert ep.t_end - ep.t_start == (ep.length - 1) * config["num_envs"]
        assert ep.team_return == pytest.approx(sum(ep.agent_returns))
    assert any(ep.truncated_by_cap for ep in history)
    assert any(not ep.truncated_by_cap for ep in history)

    updates = load_from_file(tmp_path, "updates.json")

    def reject(constant):
        raise AssertionError(f"updates.json holds {constant}, which strict JSON forbids")

    json.loads((tmp_path / "updates.json").read_text(), parse_constant=reject)
    assert [u["update"] for u in updates] == list(range(4))
    assert updates[-1]["global_step"] == total
    for key in ("wall_time", M.POLICY_LOSS, M.VALUE_LOSS, M.ENTROPY, M.APPROX_KL):
        assert all(isinstance(u[key], float) for u in updates), key
    if algo == "ippo_lag":
        assert all(u[M.LAMBDA] >= 0.0 for u in updates)
        assert all(M.COST_VALUE_LOSS in u for u in updates)


def test_same_seed_same_run_other_seed_other_run(tmp_path):
    for name, seed_offset in (("a", 3), ("b", 3), ("c", 4)):
        train_run(
            toy_config(seed_offset=seed_offset),
            tmp_path / name,
            make_env=make_toy_env,
            progress=False,
        )
    a, b, c = (_weights(tmp_path / name) for name in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    history = [load_from_file(tmp_path / name, "history.json") for name in "abc"]
    assert history[0] == history[1] != history[2]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mini_batches": 3}, "mini_batches=3"),
        ({"algo_params": {"gamma": 0.9, "gama": 0.9}}, "gama"),
        ({"algo_params": {"gamma": 1.5}}, "gamma"),
        ({"algo_params": {"hidden_sizes": []}}, "hidden_sizes"),
        ({"algo_params": {"normalise_advantages": 1}}, "normalise_advantages"),
        ({"algo": "ppo"}, "unknown algo 'ppo'"),
        ({"ippo_version": "v9"}, "unknown ippo_version 'v9'"),
        ({"algo": "ippo_lag", "lag_version": "nope"}, "unknown lag_version 'nope'"),
        ({"threads": 0}, "threads"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"env_params": {"n_agents": 3}}, "n_agents"),
        ({"timesteps": 10}, "timesteps=10"),
    ],
)
def test_bad_config_raises_naming_the_problem(tmp_path, config, changes, message):
    config = {**config, **changes}
    with pytest.raises(ValueError, match=message):
        train_run(config, tmp_path, make_env=make_toy_env, progress=False)
    assert not (tmp_path / "policy.pt").exists()


def test_missing_key_is_named(tmp_path, config):
    del config["checkpoint_every"]
    with pytest.raises(ValueError, match="checkpoint_every"):
        train_run(config, tmp_path, make_env=make_toy_env, progress=False)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("src.config.ppo", "PPOConfig"),
        ("src.config.lagrange", "LagrangeConfig"),
        ("src.config.shield", "ShieldConfig"),
        ("src.config.evaluation", "EvalConfig"),
        ("src.config.run", "RunConfig"),
        ("src.config.run", "EnvConfig"),
    ],
)
def test_config_dataclass_fields_all_have_docstrings(module, name):
    import ast
    import importlib
    import inspect

    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    body = cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and "ClassVar" not in ast.unparse(node.annotation):
            nxt = body[i + 1]
            assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), node.target.id


def test_algo_params_reach_their_section():
    from src.config.run import RunConfig

    config = RunConfig.from_dict(toy_config(algo_params={"hidden_sizes": [8]}))
    assert config.ppo.hidden_sizes == (8,)


class _ZeroFilter:
    """An action filter replacing every proposal by action 0; records the steps it saw."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.seen_steps: list[np.ndarray] = []

    def filter(self, obs, proposed, logits, episode_step):
        assert obs.shape == (self.num_envs, 2, 3) and proposed.shape == (self.num_envs, 2)
        assert logits.shape == (self.num_envs, 2, 3)
        self.seen_steps.append(episode_step.copy())
        executed = np.zeros_like(proposed)
        return executed, proposed != executed

    def reset(self, num_envs, seed):
        pass


class _ForceActionZero(IPPO):
    """Filters every proposal to action 0 and records what the hooks saw."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.action_filter = _ZeroFilter(self.num_envs)
        self.observed = 0
        self.after: list[int] = []

    def observe(self, obs, executed, result):
        assert np.all(executed == 0)
        self.observed += 1

    def after_update(self, update):
        self.after.append(update)
        return {M.SHIELD_INTERVENTIONS: float(self.buffer.intervened.sum())}


def test_hooks_see_the_loop_and_the_buffer_stores_executed_actions(config):
    env = make_toy_env(config)
    trainer = _ForceActionZero(config, env)
    trainer.train(progress=False)
    steps = trainer.num_updates * trainer.rollouts
    assert trainer.observed == steps and trainer.after == list(range(trainer.num_updates))
    assert torch.all(trainer.buffer.actions == 0)
    # episode_step is the 1-based step index: 1 at the start of every episode
    seen = np.stack(trainer.action_filter.seen_steps)  # [steps, E]
    assert seen[0].tolist() == [1] * config["num_envs"]
    assert seen.min() == 1 and seen.max() <= env.max_steps
    assert sum(ep.shield_interventions for ep in trainer.history) > 0
    assert all(M.SHIELD_INTERVENTIONS in row for row in trainer.updates)
    # the stored log-probabilities are those of the executed action under the policy
    with torch.no_grad():
        log_p = torch.log_softmax(trainer.net.logits(trainer.buffer.inputs), -1)[..., 0]
    assert torch.all(trainer.buffer.log_probs <= 0.0) and log_p.shape == (16, 4, 2)


def test_trainer_rejects_env_of_wrong_size(config):
    env = RiskyContextEnv(num_envs=3, n_agents=2)
    with pytest.raises(ValueError, match="num_envs=4"):
        build_trainer(config, env)


@settings(max_examples=25, deadline=None)
@given(
    rollouts=st.integers(1, 6),
    num_envs=st.integers(1, 4),
    n_agents=st.integers(1, 3),
    mini_batches=st.integers(1, 8),
)
def test_minibatch_divisibility_over_the_config_space(rollouts, num_envs, n_agents, mini_batches):
    # Built directly (not through create_base_config): the trainer's config is checked anyway.
    config = toy_config(num_envs=1, n_agents=1, rollouts=1, mini_batches=1, timesteps=1000)
    config.update(
        rollouts=rollouts, num_envs=num_envs, n_agents=n_agents, mini_batches=mini_batches
    )
    env = RiskyContextEnv(num_envs=num_envs, n_agents=n_agents)
    batch = rollouts * num_envs * n_agents
    if batch % mini_batches:
        with pytest.raises(ValueError, match=f"mini_batches={mini_batches}: must divide"):
            build_trainer(config, env)
        return
    trainer = build_trainer(config, env)
    assert trainer.buffer.size == batch
    assert trainer.num_updates == 1000 // (rollouts * num_envs)
