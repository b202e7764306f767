"""Workflow configs of tasks and algorithms given by import path, at tiny budgets."""

from __future__ import annotations

import copy
from typing import Any

CUSTOM_ENVS: dict[str, Any] = {
    "tag": {"factory": "mpe2.simple_tag_v3:parallel_env", "cost": "mpe2_collisions"},
    "adversary": {
        "factory": "mpe2.simple_adversary_v3:parallel_env",
        "cost": "mpe2_adversary_proximity",
    },
    "corridor": "examples.corridor:Corridor",
    "walk": "tests.custom.tasks:walk",
    "walk_vector": {
        "factory": "tests.custom.tasks:walk",
        "vector": "tests.custom.tasks:WalkVector",
    },
}
ENV_PARAMS: dict[str, dict[str, Any]] = {
    "tag": {"n_agents": 4, "max_cycles": 10},
    "adversary": {"n_agents": 3, "max_cycles": 10},
    "corridor": {"n_agents": 2, "max_cycles": 12},
    "walk": {"n_agents": 2, "max_steps": 8},
    "walk_vector": {"n_agents": 2, "max_steps": 8},
}
CUSTOM_ALGOS = {
    "toy": "tests.custom.toy_algorithm:Preferences",
    "ippo_penalty": "examples.penalty:PenalisedIPPO",
}


def tiny_config(envs: list[str], algos: list[str], **changes: Any) -> dict[str, Any]:
    """A workflow config of `envs` x `algos` with one run of two updates; `changes` replace
    top-level keys."""
    config: dict[str, Any] = {
        "experiment_tag": "custom",
        "envs": list(envs),
        "algos": list(algos),
        "num_runs": 1,
        "checkpoint_every": 1,
        "custom_envs": {name: CUSTOM_ENVS[name] for name in envs if name in CUSTOM_ENVS},
        "custom_algos": {name: CUSTOM_ALGOS[name] for name in algos if name in CUSTOM_ALGOS},
        "base": {
            "num_envs": 2,
            "timesteps": 2 * 2 * 16,
            "rollouts": 16,
            "learning_epochs": 1,
            "mini_batches": 2,
            "learning_rate": 1.0e-2,
            "shield_patience": 1,
            "final_policy_eval_episodes": 4,
            "final_policy_eval_horizons": [1, 5, 10],
            "constraint_horizon": 5,  # within every test task's episode
            "use_wandb": False,
        },
        "env_params": {name: dict(ENV_PARAMS.get(name, {"n_agents": 2})) for name in envs},
        "algo_params": {"shield": {"model_epochs": 1, "critic_steps": 2, "critic_batch_size": 16}},
    }
    config["algo_params"] = {k: v for k, v in config["algo_params"].items() if k in algos}
    config.update(copy.deepcopy(changes))
    return config
