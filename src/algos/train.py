"""`train_run`: the one entry point of the workflow's train rule.

Given a run config (`src.config.run.RunConfig`, or its flat dict form) and an output folder,
it builds the env and the trainer, resumes from the folder's checkpoint if a complete one is
there and was written by this run (the same config and code, `checkpoint.run_fingerprint`),
trains, writes `config.json`, `policy.pt`, `history.json` and `updates.json` (the
names of `src.runfiles.RunFiles`), and removes the checkpoint folder.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import torch

from src.algos.checkpoint import (
    checkpoint_fingerprint,
    latest_checkpoint,
    load_checkpoint,
    remove_checkpoints,
    run_fingerprint,
    save_checkpoint,
)
from src.algos.ippo import IPPO, IPPO_VERSIONS, TrainingCallback
from src.algos.ippo_lag import IPPOLag
from src.algos.registry import algorithm_class, get_algorithm
from src.algos.seeding import seed_everything
from src.algos.shield.trainer import ShieldedIPPO
from src.checks import lookup
from src.config.run import RunConfig
from src.core.io import create_dir, save_to_file
from src.core.logging import log
from src.numerics import kernels
from src.runfiles import RunFiles

__all__ = [
    "Algorithm",
    "CheckpointEvery",
    "build_trainer",
    "make_vector_env_for",
    "run_metadata",
    "torch_threads",
    "train_run",
    "trainer_class",
]

_PACKAGES = ("torch", "numpy", "pettingzoo", "mpe2", "gymnasium", "safe-marl-pipeline")


def make_vector_env_for(config: RunConfig) -> Any:
    """The run's VectorEnv from the env registry (its params, n_agents, num_envs, seed)."""
    from src.envs.registry import make_vector_env

    return make_vector_env(
        config.env_name,
        num_envs=config.ppo.num_envs,
        seed=config.seed,
        **config.env.constructor_params(),
    )


class Algorithm(Protocol):
    """What `train_run`, checkpoints and evaluation use of a trainer (IPPO and its subclasses
    are ones; an algorithm given by import path must be one: docs/architecture.md).

    Built as `cls(config: RunConfig, env: VectorEnv)`. Capabilities are class attributes
    (`src.algos.registry.CAPABILITY_DEFAULTS`); `REQUIRED_METHODS` lists the methods.
    """

    num_updates: int
    """Policy updates of the whole run."""
    steps_per_update: int
    """Env steps (over all copies) between updates."""
    update: int
    """Updates completed so far (restored by `load_state`)."""
    history: list[Any]
    """One `src.records.EpisodeLog` per finished training episode."""
    updates: list[dict[str, Any]]
    """One row per update: `update`, `global_step`, `wall_time` and metric constants of
    `src.algos.metrics`."""

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        """Run the remaining updates, calling each callback's `on_update_end(self)`."""
        ...

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs (dicts, lists, numbers, strings, arrays, tensors)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state()` returned."""
        ...

    def policy_state(self) -> dict[str, Any]:
        """The content of policy.pt (tensors, state dicts, plain values); it holds `config`."""
        ...


_ATTRIBUTES = ("num_updates", "steps_per_update", "update", "history", "updates")
"""Instance attributes `train_run` reads from every trainer."""


# Algorithm name -> its trainer class for the run config's version keys. `ippo` picks its
# class by `ippo_version`; the others select their parts (multiplier, shield, models) inside.
_TRAINERS: dict[str, Callable[[Mapping[str, Any]], type[IPPO]]] = {
    "ippo": lambda versions: lookup(IPPO_VERSIONS, versions["ippo_version"], "ippo_version"),
    "ippo_lag": lambda versions: IPPOLag,
    "shield": lambda versions: ShieldedIPPO,
    "shield_dec": lambda versions: ShieldedIPPO,
}


def trainer_class(algo: str, versions: Mapping[str, Any]) -> type[Any]:
    """The trainer class of `algo` selected by `versions` (a run config's base or its keys);
    the class itself for an algorithm given by import path."""
    spec = get_algorithm(algo)
    if spec.entry is not None:
        return algorithm_class(spec.name)
    return _TRAINERS[spec.name](versions)


def build_trainer(config: RunConfig | Mapping[str, Any], env: Any) -> Algorithm:
    """The trainer of the run's algorithm (and implementation versions) on `env`."""
    config = RunConfig.from_dict(config)
    trainer = trainer_class(config.algo, config.base)(config, env)
    missing = [name for name in _ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise TypeError(
            f"algo {config.algo}: its trainer lacks the attributes {missing} after construction "
            "(docs/architecture.md, 'Your own task and algorithm')"
        )
    return trainer


def torch_threads(requested: int) -> int:
    """Torch threads for a job granted `requested` threads: never more than the machine's CPUs."""
    return max(1, min(int(requested), os.cpu_count() or 1))


class CheckpointEvery:
    """A training callback writing a checkpoint every `every` updates (not after the last)."""

    def __init__(self, every: int, run_dir: str | Path, *, fingerprint: str) -> None:
        """Checkpoint into `run_dir/checkpoint/` after every `every`-th update, marked with the
        run's `fingerprint` (`checkpoint.run_fingerprint`)."""
        self.every, self.run_dir, self.fingerprint = every, run_dir, fingerprint

    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        """Nothing mid-update."""

    def on_update_end(self, trainer: Any) -> None:
        """Save after updates `every`, `2 * every`, ... except the final one."""
        if trainer.update % self.every == 0 and trainer.update < trainer.num_updates:
            save_checkpoint(trainer, self.run_dir, fingerprint=self.fingerprint)


def run_metadata() -> dict[str, Any]:
    """Git commit (and whether the tree had changes), the versions of key packages and the
    CPU kernels torch ran on (`src.numerics.kernels`)."""
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
        "kernels": kernels(),
    }


def train_run(
    config: RunConfig | Mapping[str, Any],
    out_dir: str | Path,
    *,
    make_env: Callable[[RunConfig], Any] | None = None,
    progress: bool = True,
    callbacks: Sequence[TrainingCallback] = (),
    threads: int | None = None,
) -> None:
    """Train one run and write its outputs into `out_dir` (see the module docstring).

    `make_env` replaces the env registry (tests use a toy VectorEnv); `progress=False` hides
    the progress bar (it is hidden anyway when stderr is not a terminal); `callbacks` run
    after the checkpointing one; `threads` (the threads the job was granted, default the
    config's) caps torch's threads, never above the machine's CPUs.
    """
    config = RunConfig.from_dict(config)
    files = RunFiles(create_dir(str(out_dir)))
    torch.set_num_threads(torch_threads(config.threads if threads is None else threads))
    # Python's, NumPy's and torch's generators start from the run's seed before anything is
    # built, whatever the task and the algorithm (the built-in trainers seed them again).
    seed_everything(config.seed)
    env = (make_env or make_vector_env_for)(config)
    try:
        trainer = build_trainer(config, env)
        fingerprint = run_fingerprint(config)
        checkpoint = latest_checkpoint(files.root)
        if checkpoint is not None and checkpoint_fingerprint(checkpoint) != fingerprint:
            log(
                f"not resumed from {files.root}/checkpoint/{checkpoint.name}: written by other "
                "code or another config; training starts afresh",
                type="train",
            )
        elif checkpoint is not None:
            load_checkpoint(trainer, checkpoint)
            log(f"resumed {files.root} from {checkpoint.name}", type="train")
        log(
            f"training {config.algo} on {config.env_name} run {config.run_idx} "
            f"(seed {config.seed}): {trainer.num_updates} updates of "
            f"{trainer.steps_per_update} env steps",
            type="train",
        )
        every = CheckpointEvery(config.checkpoint_every, files.root, fingerprint=fingerprint)
        trainer.train(callbacks=[every, *callbacks], progress=progress)
        for path, value in (
            (files.policy, trainer.policy_state()),
            (files.history_json, trainer.history),
            (files.updates_json, trainer.updates),
            (files.config, {**config.to_dict(), **run_metadata()}),
        ):
            save_to_file(value, path.parent, path.name)
        remove_checkpoints(files.root)
        log(f"finished {files.root}: {len(trainer.history)} episodes", type="train")
    finally:
        env.close()
