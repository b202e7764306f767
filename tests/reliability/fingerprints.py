"""Short training runs of every built-in algorithm on every built-in task, hashed.

Each run is the default experiment's run 0 (config/config.yaml: its base settings, algorithm
parameters and versions) at a budget of a few seconds: 4 env copies x 16 steps x 3 updates,
episodes capped at 12 steps, the shields armed after the first update and certified on 4
calibration episodes. Its fingerprint hashes what training wrote: the episode history, the
update metrics (less the wall-clock ones), every tensor of policy.pt and the certificate. A
machine that computes one bit differently prints another fingerprint for the run.

`python -m tests.reliability.fingerprints` trains them all (`--runs 'spread/*'`: some), prints
each fingerprint and the code path (`src.numerics.kernels`), and with `--write` stores them in
fingerprints.json next to this file, which `test_fingerprint.py` compares against.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from src.algos import metrics as M
from src.algos.train import train_run
from src.config.workflow import resolve_run_config, validate_workflow_config
from src.core.io import load_from_file, save_to_file
from src.numerics import kernels
from src.runfiles import RunFiles

ROOT = Path(__file__).resolve().parents[2]
STORE = Path(__file__).with_name("fingerprints.json")
CONFIG = ROOT / "config" / "config.yaml"
TASKS = ("hazard_grid", "intersection", "spread", "spread_mpe2")
ALGOS = ("ippo", "ippo_lag", "shield", "shield_dec")


def workflow_config(path: Path = CONFIG) -> dict[str, Any]:
    """The workflow config at `path` (config/config.yaml) on every built-in task and algorithm,
    at the tiny budget."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["envs"], config["algos"], config["num_runs"] = list(TASKS), list(ALGOS), 1
    config["base"].update(
        num_envs=4,
        timesteps=4 * 16 * 3,
        rollouts=16,
        learning_epochs=1,
        mini_batches=2,
        shield_patience=1,
        use_wandb=False,
    )
    config["env_params"] = {task: {"n_agents": 2, "max_steps": 12} for task in TASKS}
    for algo in ("shield", "shield_dec"):
        config["algo_params"][algo] = {
            **config["algo_params"][algo],
            "calibration_episodes": 4,
            "critic_steps": 2,
            "critic_batch_size": 8,
        }
    return validate_workflow_config(config)


def _digest_tensors(value: Any, digest: Any) -> None:
    """Feed the bits of every tensor in `value` (nested dicts and lists) into `digest`, with
    their paths, in sorted key order; other leaves as their JSON."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _digest_tensors(value[key], digest)
    elif isinstance(value, list | tuple):
        for item in value:
            _digest_tensors(item, digest)
    elif hasattr(value, "numpy"):
        digest.update(str(tuple(value.shape)).encode() + str(value.dtype).encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    else:
        digest.update(json.dumps(value, sort_keys=True, default=str).encode())


def run_fingerprint(run_dir: Path) -> str:
    """16 hex digits of the SHA-256 of a finished run's history, update metrics (without
    `metrics.WALL_CLOCK_KEYS`) and policy.pt (weights, normalisers, shield state)."""
    files = RunFiles(run_dir)
    digest = hashlib.sha256()
    history = json.loads(files.history_json.read_text(encoding="utf-8"))
    updates = json.loads(files.updates_json.read_text(encoding="utf-8"))
    updates = [{k: v for k, v in row.items() if k not in M.WALL_CLOCK_KEYS} for row in updates]
    digest.update(json.dumps([history, updates], sort_keys=True).encode())
    _digest_tensors(load_from_file(files.policy.parent, files.policy.name), digest)
    return digest.hexdigest()[:16]


def train_and_fingerprint(task: str, algo: str, root: Path, config: Path = CONFIG) -> str:
    """Train run 0 of (task, algo) of `config` at the tiny budget under `root`; its
    fingerprint."""
    run_dir = root / task / algo / "run0"
    run = resolve_run_config(workflow_config(config), task, algo, 0)
    train_run(run, run_dir, progress=False)
    return run_fingerprint(run_dir)


def all_fingerprints(patterns: Sequence[str] = ("*",), config: Path = CONFIG) -> dict[str, str]:
    """`{"task/algo": fingerprint}` of every run of `config` whose name matches one of the
    shell-style `patterns`, trained in a temporary folder."""
    names = [f"{task}/{algo}" for task in TASKS for algo in ALGOS]
    chosen = [name for name in names if any(fnmatch(name, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no run matches {list(patterns)}; the runs are {names}")
    with tempfile.TemporaryDirectory() as tmp:
        return {name: train_and_fingerprint(*name.split("/"), Path(tmp), config) for name in chosen}


def main(argv: list[str] | None = None) -> None:
    """Print the fingerprints and the code path; `--write` stores them in `STORE`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"store them in {STORE.name}")
    parser.add_argument(
        "--runs", nargs="+", default=["*"], help="only the runs matching these, e.g. 'spread/*'"
    )
    parser.add_argument(
        "--config", type=Path, default=CONFIG, help="the workflow config (another code's names)"
    )
    args = parser.parse_args(argv)
    if args.write and (args.runs != ["*"] or args.config != CONFIG):
        parser.error("--write stores every run of config/config.yaml: leave out --runs, --config")
    prints = all_fingerprints(args.runs, args.config)
    record = {"kernels": kernels(), "runs": prints}
    print(json.dumps(record, indent=2))
    if args.write:
        save_to_file(record, STORE.parent, STORE.name)


if __name__ == "__main__":
    main()
