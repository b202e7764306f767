"""Short learning runs on the toy task with a fixed seed (tiny budgets, no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from src.algos import metrics as M
from src.algos.train import build_trainer
from tests.algos.conftest import toy_config
from tests.algos.toy_env import make_toy_env

BUDGET = {"num_envs": 8, "rollouts": 32, "timesteps": 8 * 32 * 20, "learning_epochs": 4}


def _train(algo: str, **extra):
    config = toy_config(algo=algo, max_risk=0.1, **BUDGET, **extra)
    trainer = build_trainer(config, make_toy_env(config))
    trainer.train(progress=False)
    return trainer


def _mean(rows, key):
    return float(np.mean([row[key] for row in rows if row[key] is not None]))


@pytest.mark.slow
def test_ippo_return_improves():
    trainer = _train("ippo")
    first = _mean(trainer.updates[:2], M.EPISODE_RETURN)
    last = _mean(trainer.updates[-3:], M.EPISODE_RETURN)
    # A uniform policy earns about 0.83 per agent-step; the risky action earns 1.5.
    assert last > first * 1.3


@pytest.mark.slow
@pytest.mark.parametrize("lag_version", ["v0", "pid"])
def test_ippo_lag_violates_less_than_ippo_at_the_same_budget(lag_version):
    ippo = _train("ippo")
    lag = _train("ippo_lag", lag_version=lag_version)
    ippo_rate = _mean(ippo.updates[-5:], M.VIOLATION_RATE)
    lag_rate = _mean(lag.updates[-5:], M.VIOLATION_RATE)
    assert lag_rate < ippo_rate - 0.2
    assert lag.multiplier.value > 0.0
