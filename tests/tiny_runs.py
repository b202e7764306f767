"""The run config of a tiny training run on hazard_grid, shared by tests that need a trained run
folder: two policy updates of 4 env copies x 16 steps, episodes capped at 10 steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.config.run import make_run_config


def tiny_run_config(algo: str, **overrides: Any) -> dict[str, Any]:
    """A flat run config of `algo` on hazard_grid at the tiny budget; `overrides` replace or add
    `make_run_config` arguments (base keys, `algo_params`, evaluation settings)."""
    settings: dict[str, Any] = {
        "env_name": "hazard_grid",
        "algo": algo,
        "num_envs": 4,
        "timesteps": 4 * 16 * 2,
        "rollouts": 16,
        "learning_epochs": 1,
        "mini_batches": 2,
        "env_params": {"max_steps": 10},
        "final_policy_eval_episodes": 4,
        "final_policy_eval_horizons": (1, 5, 10),  # 10: the cap, the constraint horizon
        "checkpoint_every": 100,
    }
    settings.update(overrides)
    return make_run_config(**settings)


def four_update_config(**overrides: Any) -> dict[str, Any]:
    """ippo on hazard_grid (2 copies, 20-step episodes): 4 updates of 64 env steps, a
    checkpoint after each (the reliability tests' kill, resume and lock runs)."""
    settings: dict[str, Any] = {
        "env_name": "hazard_grid",
        "algo": "ippo",
        "num_envs": 2,
        "timesteps": 2 * 32 * 4,
        "rollouts": 32,
        "mini_batches": 2,
        "env_params": {"max_steps": 20},
        "checkpoint_every": 1,
    }
    settings.update(overrides)
    return make_run_config(**settings)


def train_tiny_shield(results: Path) -> Path:
    """A tiny shield run trained in `results` (`runs/hazard_grid/shield/run0`, armed after one
    update, `max_risk` 0.5, 4 calibration episodes); returns its folder."""
    from src.algos.train import train_run

    run = results / "runs" / "hazard_grid" / "shield" / "run0"
    config = tiny_run_config(
        "shield", shield_patience=1, max_risk=0.5, algo_params={"calibration_episodes": 4}
    )
    train_run(config, run, progress=False)
    return run
