"""`src.algos.api`, the module an algorithm is written against, and the example written with it
alone (`examples/reinforce.py`): it trains through the pipeline's entry points, writes what
the summary needs, resumes exactly, and learns."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import src.algos.api as api
from src.algos.policy import load_actor
from src.algos.registry import get_algorithm
from src.algos.train import build_trainer, make_vector_env_for, train_run
from src.analysis.aggregate import aggregate
from src.analysis.export import export_run
from src.analysis.tables import make_summary
from src.config.run import RunConfig, make_run_config
from src.core.io import load_from_file
from src.custom import register_algorithm
from src.evaluation.evaluate import evaluate_run
from src.runfiles import RunFiles
from src.schemas import UPDATE_METRIC_KEYS
from tests.tiny_runs import tiny_run_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "reinforce.py"
ENTRY = "examples.reinforce:Reinforce"


@pytest.fixture
def reinforce() -> str:
    """The example registered as a config's `custom_algos` registers it; its name."""
    register_algorithm("reinforce", ENTRY)
    return "reinforce"


def test_the_api_gathers_what_an_algorithm_receives_provides_and_uses():
    for name in api.__all__:
        assert hasattr(api, name), name
    assert (api.__doc__ or "").count("\n") > 20  # the module docstring is the guide
    # The same objects as the modules that use them, not copies.
    import src.algos.ippo
    import src.algos.train

    assert src.algos.train.Algorithm is api.Algorithm
    assert src.algos.ippo.TrainingCallback is api.TrainingCallback
    # An update row may hold exactly the keys the export has columns for.
    assert set(api.METRIC_KEYS) == set(UPDATE_METRIC_KEYS)
    assert set(api.EPISODE_METRICS) <= set(api.METRIC_KEYS)
    assert {api.LAMBDA, api.SHIELD_INTERVENTIONS} <= set(api.METRIC_KEYS)


def test_update_row_is_what_the_export_accepts_and_refuses_what_it_would_refuse():
    episode = api.EpisodeLog(
        env="hazard_grid",
        algo="mine",
        run=0,
        episode=0,
        env_copy=0,
        t_start=1,
        t_end=10,
        length=10,
        team_return=2.0,
        agent_returns=(1.0, 1.0),
        cost=1.0,
        violated=True,
        first_violation_step=3,
        truncated_by_cap=True,
        shield_interventions=0,
    )
    row = api.update_row(
        update=0, global_step=64, wall_time=0.5, episodes=[episode], extra={api.LAMBDA: 0.25}
    )
    assert row[api.EPISODE_RETURN] == 2.0 and row[api.VIOLATION_RATE] == 1.0
    assert row[api.LAMBDA] == 0.25 and row["global_step"] == row[api.GLOBAL_STEP] == 64
    assert set(row) <= {*api.UPDATE_KEYS, *api.METRIC_KEYS}
    empty = api.update_row(update=1, global_step=128, wall_time=1.0, episodes=[])
    assert all(empty[key] is None for key in api.EPISODE_METRICS)
    with pytest.raises(ValueError, match=r"update 2: \['my/metric'\] are not metric constants"):
        api.update_row(update=2, global_step=0, wall_time=0.0, episodes=[], extra={"my/metric": 1})
    with pytest.raises(ValueError, match="metric losses/policy = nan is not a finite number"):
        api.update_row(
            update=2, global_step=0, wall_time=0.0, episodes=[], extra={"losses/policy": np.nan}
        )


def test_the_example_imports_nothing_of_src_but_the_api():
    tree = ast.parse(EXAMPLE.read_text(encoding="utf-8"))
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert {m for m in modules if m and m.split(".")[0] == "src"} == {"src.algos.api"}


def test_the_example_trains_evaluates_and_makes_a_summary_row(reinforce: str, tmp_path: Path):
    spec = get_algorithm(reinforce)
    assert (spec.constrained, spec.shielded, spec.multiplier) == (False, False, False)
    assert spec.description.startswith("REINFORCE")
    run = tmp_path / "runs" / "hazard_grid" / reinforce / "run0"
    train_run(tiny_run_config(reinforce), run, progress=False)
    files = RunFiles(run)
    evaluate_run(run, files.eval)
    export_run(run, files.history, files.updates)
    aggregate([run], tmp_path / "tables")
    make_summary(tmp_path / "tables")
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert summary["policy"].tolist() == [reinforce]
    actor = load_actor(run)
    actor.reset(3, seed=7)
    obs_dim, n_agents, _ = load_from_file(run, "policy.pt")["shape"]
    obs = np.zeros((3, n_agents, obs_dim), dtype=np.float32)
    assert actor.act(obs, np.ones(3, dtype=np.int64)).shape == (3, 2)


def test_the_example_resumes_from_its_state_as_if_never_stopped(reinforce: str):
    config = RunConfig.from_dict(tiny_run_config(reinforce, timesteps=4 * 16 * 3))
    whole = build_trainer(config, make_vector_env_for(config))
    whole.train(progress=False)
    first = build_trainer(config, make_vector_env_for(config))
    first.num_updates = 1
    first.train(progress=False)
    resumed = build_trainer(config, make_vector_env_for(config))
    resumed.load_state(first.state())
    resumed.train(progress=False)
    assert resumed.history == whole.history and len(whole.history) > 0
    timeless = [{k: v for k, v in row.items() if k != "wall_time"} for row in whole.updates]
    assert [{k: v for k, v in row.items() if k != "wall_time"} for row in resumed.updates] == (
        timeless
    )
    for name, tensor in whole.net.state_dict().items():
        assert torch.equal(tensor, resumed.net.state_dict()[name]), name


def test_the_example_learns_to_reach_goals(reinforce: str):
    # 24 updates of 16 copies x 64 steps (about a second): the mean team return of the
    # episodes of the last four updates against the first four's.
    config = make_run_config(
        algo=reinforce,
        num_envs=16,
        timesteps=16 * 64 * 24,
        rollouts=64,
        learning_epochs=1,
        mini_batches=1,
        learning_rate=3e-3,
        env_params={"max_steps": 50},
    )
    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))
    trainer.train(progress=False)
    returns = [row[api.EPISODE_RETURN] for row in trainer.updates]
    assert np.mean(returns[-4:]) > np.mean(returns[:4]) + 1.0, returns
