"""Fixtures of the algorithm tests: tiny run configs on the toy env."""

from __future__ import annotations

from typing import Any

import pytest

from src.config.run import make_run_config


def toy_config(**overrides: Any) -> dict[str, Any]:
    """A run config small enough that a whole training run takes about a second."""
    settings: dict[str, Any] = {
        "env_name": "risky_context",
        "num_envs": 4,
        "n_agents": 2,
        "timesteps": 4 * 16 * 4,
        "rollouts": 16,
        "learning_epochs": 2,
        "mini_batches": 4,
        "learning_rate": 3e-3,
    }
    settings.update(overrides)
    return make_run_config(**settings)


@pytest.fixture
def config() -> dict[str, Any]:
    """A tiny ippo run config on the toy env."""
    return toy_config()
