"""`train_run`: the one entry point of the workflow's train rule.

Given a resolved run config (docs/architecture.md, "Resolved run config") and an output
folder, it builds the env and the trainer, resumes from `out_dir/checkpoint/` if a complete
checkpoint is there, trains, writes `config.json`, `policy.pt`, `history.json` and
`updates.json`, and removes the checkpoint folder.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from src.algos.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    remove_checkpoints,
    save_checkpoint,
)
from src.algos.ippo import IPPO
from src.algos.registry import IPPO_VERSIONS, LAG_VERSIONS, get_algorithm, lookup
from src.core.io import create_dir, save_to_file
from src.core.logging import log

__all__ = ["build_trainer", "make_run_config", "make_vector_env_for", "run_metadata", "train_run"]

# Keys the resolved run config adds to create_base_config's output.
RUN_EXTRA_KEYS = ("algo", "run_idx", "seed", "env_params", "algo_params", "threads")
_PACKAGES = ("torch", "numpy", "pettingzoo", "mpe2", "gymnasium", "safe-marl-pipeline")


def _check_config(config: Mapping[str, Any]) -> None:
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    missing = [k for k in (*RUN_EXTRA_KEYS, "checkpoint_every", "n_agents") if k not in config]
    if missing:
        raise ValueError(f"resolved run config lacks the keys {missing}")
    for key in ("threads", "checkpoint_every"):
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"run config {key}={value!r}: must be an int >= 1")
    for key in ("env_params", "algo_params"):
        if not isinstance(config[key], Mapping):
            raise ValueError(f"run config {key} must be a dict, got {config[key]!r}")
    if "n_agents" in config["env_params"] or "num_envs" in config["env_params"]:
        raise ValueError(
            "env_params must not set n_agents or num_envs: they come from the base config"
        )
    get_algorithm(config["algo"])
    lookup(IPPO_VERSIONS, config.get("ippo_version"), "ippo_version")
    if config["algo"] == "ippo_lag":
        lookup(LAG_VERSIONS, config.get("lag_version"), "lag_version")


def make_vector_env_for(config: Mapping[str, Any]) -> Any:
    """The run's VectorEnv from the env registry (env_params plus num_envs, seed, n_agents)."""
    from src.envs.registry import make_vector_env

    return make_vector_env(
        config["env_name"],
        num_envs=config["num_envs"],
        seed=config["seed"],
        n_agents=config["n_agents"],
        **config["env_params"],
    )


def build_trainer(config: Mapping[str, Any], env: Any) -> IPPO:
    """Instantiate the trainer class of `config['algo']` on `env`."""
    _check_config(config)
    if config["algo"] == "ippo":
        trainer_cls = IPPO_VERSIONS[config["ippo_version"]]()
    else:
        trainer_cls = get_algorithm(config["algo"]).trainer()
    return trainer_cls(config, env)


def run_metadata() -> dict[str, Any]:
    """Git commit (and whether the tree had changes) and the versions of key packages."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    versions = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "git_commit": commit or "unknown",
        "git_dirty": None if status is None else bool(status),
        "package_versions": versions,
    }


def train_run(
    config: dict,
    out_dir: str | Path,
    *,
    make_env: Callable[[Mapping[str, Any]], Any] | None = None,
    progress: bool = True,
) -> None:
    """Train one run and write its outputs into `out_dir` (see the module docstring).

    `make_env` replaces the env registry (tests use a toy VectorEnv); `progress=False` hides
    the progress bar (it is hidden anyway when stderr is not a terminal).
    """
    _check_config(config)
    out = create_dir(str(out_dir))
    torch.set_num_threads(config["threads"])
    env = (make_env or make_vector_env_for)(config)
    try:
        trainer = build_trainer(config, env)
        checkpoint = latest_checkpoint(out)
        if checkpoint is not None:
            load_checkpoint(trainer, checkpoint)
            log(f"resumed {out} from {checkpoint.name}", type="train")
        log(
            f"training {config['algo']} on {config['env_name']} run {config['run_idx']} "
            f"(seed {config['seed']}): {trainer.num_updates} updates of "
            f"{trainer.steps_per_update} env steps",
            type="train",
        )
        every = config["checkpoint_every"]

        def on_update(t: IPPO) -> None:
            if t.update % every == 0 and t.update < t.num_updates:
                save_checkpoint(t, out)

        trainer.train(on_update=on_update, progress=progress)
        save_to_file(trainer.policy_state(), out, "policy.pt")
        save_to_file(trainer.history, out, "history.json")
        save_to_file(trainer.updates, out, "updates.json")
        save_to_file({**config, **run_metadata()}, out, "config.json")
        remove_checkpoints(out)
        log(f"finished {out}: {len(trainer.history)} episodes", type="train")
    finally:
        env.close()


def make_run_config(
    *,
    env_name: str = "hazard_grid",
    algo: str = "ippo",
    run_idx: int = 0,
    num_envs: int = 4,
    n_agents: int = 2,
    timesteps: int = 2048,
    rollouts: int = 32,
    learning_epochs: int = 2,
    mini_batches: int = 4,
    learning_rate: float = 3e-4,
    max_risk: float = 0.1,
    seed_offset: int = 0,
    env_params: dict | None = None,
    algo_params: dict | None = None,
    threads: int = 1,
    checkpoint_every: int = 1,
    **base_overrides: Any,
) -> dict[str, Any]:
    """A resolved run config for tests and benchmarks, built like the workflow builds one."""
    from src.core.wandb import create_base_config

    base = create_base_config(
        env_name,
        num_envs,
        n_agents,
        timesteps,
        1 + run_idx,
        rollouts,
        learning_epochs,
        mini_batches,
        learning_rate,
        max_risk,
        False,
        seed_offset=seed_offset,
        **base_overrides,
    )
    return {
        **base,
        "algo": algo,
        "run_idx": run_idx,
        "seed": seed_offset + run_idx,
        "env_params": dict(env_params or {}),
        "algo_params": dict(algo_params or {}),
        "threads": threads,
        "checkpoint_every": checkpoint_every,
    }
