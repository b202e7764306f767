"""`train_run`: the one entry point of the workflow's train rule.

Given a run config (`src.config.run.RunConfig`, or its flat dict form) and an output folder,
it builds the env and the trainer, resumes from the folder's checkpoint if a complete one is
there and was written by this run (the same config and code, `checkpoint.run_fingerprint`),
trains, writes `config.json`, `policy.pt`, `history.json` and `updates.json` (the
names of `src.runfiles.RunFiles`), and removes the checkpoint folder. A run that finished no
training episode is refused before anything is written (`src.records.NoTrainingEpisodeError`,
one line naming the run folder).

One process trains a run folder at a time: `train_run` holds the folder's `src.lock.RunLock`
from before it reads the checkpoint until it returns, and a second trainer is refused in one
line naming the pid that holds it. A resume is said on the console and in the log. In the
workflow's train job (logging into the run's `logs/train.log`), the log of an earlier attempt
is kept as `logs/train.<n>.log` (`_AttemptLogs`). Interrupted (Ctrl-C), it raises a
`KeyboardInterrupt` whose message is the one line to show: where training stopped and what a
rerun does (the job's hook prints it instead of a traceback).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from src.algos.api import REQUIRED_ATTRIBUTES, Algorithm
from src.algos.checkpoint import (
    checkpoint_fingerprint,
    latest_checkpoint,
    load_checkpoint,
    remove_checkpoints,
    run_fingerprint,
    save_checkpoint,
)
from src.algos.ippo import IPPO_VERSIONS, TrainingCallback
from src.algos.registry import algorithm_class, get_algorithm
from src.algos.seeding import seed_everything
from src.checks import lookup
from src.config.run import RunConfig
from src.containment import (
    ContainmentError,
    below_results_root,
    held_folder,
    inside,
    remove_tree,
    replace,
)
from src.core.io import create_dir, save_to_file
from src.core.logging import current_log_file, log
from src.custom import load_entry
from src.lock import RunLock
from src.numerics import kernels
from src.records import NoTrainingEpisodeError
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


def trainer_class(algo: str, versions: Mapping[str, Any]) -> type[Any]:
    """The trainer class of `algo` selected by `versions` (a run config's base or its keys);
    the class itself for an algorithm given by import path."""
    spec = get_algorithm(algo)
    if spec.entry is not None:
        return algorithm_class(spec.name)
    if spec.trainer is None:  # ippo: its class by `ippo_version`
        return lookup(IPPO_VERSIONS, versions["ippo_version"], "ippo_version")
    # The others select their parts (multiplier, shield, models) inside; imported here, so
    # that a run imports only its own algorithm's code (`builtin_entries`).
    return load_entry(spec.trainer)


def build_trainer(config: RunConfig | Mapping[str, Any], env: Any) -> Algorithm:
    """The trainer of the run's algorithm (and implementation versions) on `env`."""
    config = RunConfig.from_dict(config)
    trainer = trainer_class(config.algo, config.base)(config, env)
    missing = [name for name in REQUIRED_ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise TypeError(
            f"algo {config.algo}: its trainer lacks the attributes {missing} after construction "
            "(docs/algorithms.md, 'Writing an algorithm')"
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


_NUMBERED_LOG = re.compile(r"^train\.(\d+)\.log$")
_RUNNING_LOG = ".train.attempt.log"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


class _AttemptLogs:
    """The logs of a run's earlier training attempts, kept beside `logs/train.log`.

    Snakemake deletes a job's log when it starts the job again, so the running attempt gives
    its `logs/train.log` a second name, `logs/.train.attempt.log` (a hard link: it follows
    every line to the end, a kill included). The next attempt finds that name on another file
    than its own `train.log`: the whole log of the earlier attempt (interrupted, killed or
    failed), which it renames to `logs/train.<n>.log`, n = 1, 2, ... in attempt order. A
    finished attempt drops the second name. A new run (no second name, no checkpoint) deletes
    the numbered logs of the run it replaces. Paths go through `src.containment`; nothing is
    done where `train_run` does not log into the run's `logs/train.log`.
    """

    def __init__(self, files: RunFiles) -> None:
        """The attempt logs of the run folder of `files`."""
        self.root = files.root
        self.log = Path(os.path.abspath(files.log("train")))
        current = current_log_file()
        self.active = current is not None and Path(os.path.abspath(current)) == self.log
        if self.active:
            self.log = inside(files.root, self.log)
        self.running = self.log.parent / _RUNNING_LOG

    def _is_log(self, info: os.stat_result) -> bool:
        """Whether `info` is that of the file `logs/train.log` names now."""
        now = _lstat(self.log)
        return now is not None and (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)

    def numbered(self) -> list[Path]:
        """The kept logs `logs/train.<n>.log`, oldest first."""
        if not self.log.parent.is_dir():
            return []
        found = []
        with os.scandir(self.log.parent) as entries:
            for entry in entries:
                match = _NUMBERED_LOG.match(entry.name)
                if match:
                    found.append((int(match.group(1)), Path(entry.path)))
        return [path for _, path in sorted(found)]

    def _keep(self) -> Path:
        """Rename the second name to the next `logs/train.<n>.log`; returns that path."""
        numbers = [int(_NUMBERED_LOG.match(path.name).group(1)) for path in self.numbered()]
        target = inside(self.root, self.log.parent / f"train.{max(numbers, default=0) + 1}.log")
        replace(self.root, self.running, target)
        return target

    def start(self, *, resumable: bool) -> list[Path]:
        """Keep the log of an earlier attempt and give this attempt's its second name; returns
        the kept logs of the earlier attempts, oldest first. `resumable`: the run folder holds
        a checkpoint (else, without a second name, this is a new run). A file system error is
        logged, and training goes on."""
        if not self.active:
            return []
        try:
            return self._start(resumable=resumable)
        except OSError as error:
            log(f"the logs of earlier attempts are not kept: {error}", type="train")
            return []

    def _start(self, *, resumable: bool) -> list[Path]:
        previous = _lstat(self.running)
        if previous is not None and not stat.S_ISREG(previous.st_mode):
            raise ContainmentError(
                f"{self.running} is not a regular file: it is neither read nor renamed",
                path=self.running,
            )
        if previous is None and not resumable:
            for path in self.numbered():
                remove_tree(self.root, path)
        if previous is not None and self._is_log(previous):
            return self.numbered()
        if previous is not None:
            self._keep()
        try:
            with contextlib.ExitStack() as stack:
                folder = self.log.parent
                if below_results_root(folder):
                    # In the logs folder as it is now, whatever is swapped at its name.
                    folder = stack.enter_context(held_folder(folder))
                os.link(folder / self.log.name, folder / self.running.name, follow_symlinks=False)
        except OSError as error:
            log(
                f"the log of this attempt is not kept for a later one: {self.running}: "
                f"{error.strerror}",
                type="train",
            )
        return self.numbered()

    def finish(self) -> None:
        """Drop the second name of a finished attempt's log (kept under a number if
        `logs/train.log` is now another job's)."""
        if not self.active:
            return
        info = _lstat(self.running)
        if info is None or not stat.S_ISREG(info.st_mode):
            return
        try:
            if self._is_log(info):
                remove_tree(self.root, self.running)
            else:
                self._keep()
        except OSError as error:
            log(f"{self.running} is left behind: {error}", type="train")


def _attempt_note(root: Path, earlier: Sequence[Path]) -> str:
    """`attempt n` and where the earlier attempts' logs are ('' for a first attempt)."""
    if not earlier:
        return ""
    names = ", ".join(os.path.relpath(path, os.path.abspath(root)) for path in earlier)
    whose = "the log of attempt 1 is" if len(earlier) == 1 else "the earlier attempts' logs are"
    return f"attempt {len(earlier) + 1}; {whose} {names}"


def _interrupted(files: RunFiles, trainer: Any, fingerprint: str | None, every: int) -> str:
    """The one line that ends an interrupted training: where it stopped, what a rerun does."""
    if trainer is None:
        return f"interrupted before training {files.root} began; rerun the same command to start it"
    done, total = int(trainer.update), int(trainer.num_updates)
    where = (
        f"during update {done + 1} of {total}"
        if done < total
        else f"after its last update ({total}), while it wrote its outputs"
    )
    try:
        checkpoint = latest_checkpoint(files.root)
        if checkpoint is not None and checkpoint_fingerprint(checkpoint) != fingerprint:
            checkpoint = None
    except Exception:  # a damaged folder: the rerun says what is wrong with it
        checkpoint = None
    if checkpoint is None:
        return (
            f"interrupted training {files.root} {where}, before its first checkpoint (one every "
            f"{every} updates); rerun the same command to start it again"
        )
    after = int(checkpoint.name.rsplit("-", 1)[1])
    return (
        f"interrupted training {files.root} {where}; rerun the same command to resume from its "
        f"last checkpoint (after update {after})"
    )


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

    Raises `src.lock.LockHeldError` if another process trains `out_dir`,
    `src.records.NoTrainingEpisodeError` (before writing any output) if the trainer finished no
    episode, and on an interrupt a `KeyboardInterrupt` whose message says where training
    stopped and what a rerun does.
    """
    config = RunConfig.from_dict(config)
    files = RunFiles(create_dir(str(out_dir)))
    lock = RunLock(files.root)
    if not lock.acquire():
        log(
            f"{files.root}: this file system has no file locks, so a second trainer of this "
            "run folder would not be refused",
            type="train",
            priority="warning",
            console=True,
        )
    try:
        attempts = _AttemptLogs(files)
        earlier = attempts.start(resumable=os.path.lexists(files.checkpoint))
        trainer: Any = None
        fingerprint: str | None = None
        try:
            torch.set_num_threads(torch_threads(config.threads if threads is None else threads))
            # Python's, NumPy's and torch's generators start from the run's seed before anything
            # is built, whatever the task and the algorithm (the built-in trainers seed them
            # again).
            seed_everything(config.seed)
            env = (make_env or make_vector_env_for)(config)
            try:
                trainer = build_trainer(config, env)
                fingerprint = run_fingerprint(config)
                _train(config, files, trainer, fingerprint, callbacks, progress, earlier)
            finally:
                env.close()
        except KeyboardInterrupt:
            line = _interrupted(files, trainer, fingerprint, config.checkpoint_every)
            raise KeyboardInterrupt(line) from None
        attempts.finish()
    finally:
        lock.release()


def _train(
    config: RunConfig,
    files: RunFiles,
    trainer: Algorithm,
    fingerprint: str,
    callbacks: Sequence[TrainingCallback],
    progress: bool,
    earlier: Sequence[Path],
) -> None:
    """Resume `trainer` from the run's checkpoint if it is this run's, train, write."""
    note = _attempt_note(files.root, earlier)
    checkpoint = latest_checkpoint(files.root)
    resumed = False
    if checkpoint is not None and checkpoint_fingerprint(checkpoint) != fingerprint:
        log(
            f"not resumed from {files.root}/checkpoint/{checkpoint.name}: written by other "
            "code or another config; training starts afresh",
            type="train",
            console=True,
        )
    elif checkpoint is not None:
        load_checkpoint(trainer, checkpoint)
        resumed = True
        log(
            f"resumed {files.root} from its checkpoint after update {trainer.update} of "
            f"{trainer.num_updates} (checkpoint/{checkpoint.name})" + (f"; {note}" if note else ""),
            type="train",
            console=True,
        )
    log(
        f"training {config.algo} on {config.env_name} run {config.run_idx} "
        f"(seed {config.seed}): {trainer.num_updates} updates of "
        f"{trainer.steps_per_update} env steps" + (f"; {note}" if note and not resumed else ""),
        type="train",
    )
    every = CheckpointEvery(config.checkpoint_every, files.root, fingerprint=fingerprint)
    trainer.train(callbacks=[every, *callbacks], progress=progress)
    if not trainer.history:
        # Refused here, before any output is written, rather than by the summary after every
        # other job of the experiment.
        raise NoTrainingEpisodeError(
            f"{files.root}: the run finished no training episode in its {trainer.update} "
            "updates, and the summary and the learning curves need at least one: "
            f"{config.algo}'s train() must step the env until episodes end and add their "
            "EpisodeLogs to its history (src.algos.api)"
        )
    for path, value in (
        (files.policy, trainer.policy_state()),
        (files.history_json, trainer.history),
        (files.updates_json, trainer.updates),
        (files.config, {**config.to_dict(), **run_metadata()}),
    ):
        save_to_file(value, path.parent, path.name)
    remove_checkpoints(files.root)
    log(f"finished {files.root}: {len(trainer.history)} episodes", type="train")
