"""Evaluate the policy of any saved run folder on chosen reset seeds and horizons.

    python -m src.evaluation.checkpoint RUN_DIR --seeds FIRST COUNT --horizons 1 10 100 \\
        --out PATH.parquet [--shield on|off|both] [--num-envs E]

writes a Parquet file with the columns of eval.parquet (`EVAL_SCHEMA`, docs/schemas.md): one
row per shield mode and horizon, over COUNT episodes with reset seeds FIRST, ..., FIRST + COUNT
- 1. The run folder's config.json and policy.pt are read, nothing else, and only as regular
files inside it: a symbolic link there (one that could point anywhere) is refused
(`src.containment`). Without `--seeds` and `--horizons` the run's own evaluation seeds and
horizons are used, so the file has the numbers of its eval.parquet; `--shield` defaults to the
run's evaluation modes (on and off for a shielded algorithm) and `--num-envs` (env copies per
batch, part of what the numbers depend on) to the run's `final_policy_eval_num_envs`. The
policy's generator of batch b is seeded FIRST + b * E, as the evaluation seeds it.

Bad arguments and run folders that cannot be read end the command with one line naming what
is wrong and exit status 2, before anything is written; the output is written atomically, so
it is either complete or absent. The schema metadata holds the run's config (`config`) and
what was evaluated (`evaluation`: run folder, seeds, horizons, shield modes, env copies). Runs
of tasks or algorithms given by import path are not evaluated by this command (their code is
never imported from a run folder).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from src.algos.shield.calibration import Certificate, load_certificate
from src.config.base import SEED_MAX
from src.config.recorded import read_run_config
from src.config.run import RunConfig
from src.containment import ContainmentError, regular_file
from src.core.io import PersistenceError
from src.evaluation.run_inputs import check_policy
from src.runfiles import RunFiles
from src.schemas import EVAL_SCHEMA, table_with_config, write_parquet

__all__ = ["EVALUATION_METADATA_KEY", "CheckpointRequest", "UsageError", "main", "parse_request"]

EVALUATION_METADATA_KEY = b"evaluation"
"""Schema metadata key of what the command evaluated (JSON)."""

SHIELD_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


class UsageError(ValueError):
    """A bad argument or an unreadable run folder; the message is one line."""


@dataclass(frozen=True)
class CheckpointRequest:
    """What to evaluate, checked: the run, its config and certificate, seeds, horizons, modes."""

    run_dir: Path
    raw_config: dict[str, Any]
    config: RunConfig
    certificate: Certificate | None
    first_seed: int
    count: int
    horizons: tuple[int, ...]
    modes: tuple[bool, ...]
    num_envs: int
    out: Path

    @property
    def seeds(self) -> list[int]:
        """The reset seed of every episode."""
        return [self.first_seed + i for i in range(self.count)]

    def metadata(self) -> dict[str, Any]:
        """What was evaluated (the `evaluation` schema metadata)."""
        return {
            "run_dir": str(self.run_dir),
            "first_seed": self.first_seed,
            "episodes": self.count,
            "horizons": list(self.horizons),
            "shielded": list(self.modes),
            "num_envs": self.num_envs,
        }


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m src.evaluation.checkpoint",
        description=(
            "Evaluate a saved run folder's policy on chosen reset seeds and horizons; write a "
            "Parquet file with the columns of eval.parquet."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (config.json, policy.pt)")
    parser.add_argument(
        "--seeds",
        nargs=2,
        type=int,
        metavar=("FIRST", "COUNT"),
        help="COUNT episodes with reset seeds FIRST, FIRST+1, ... (default: the run's own)",
    )
    parser.add_argument(
        "--horizons",
        nargs="+",
        type=int,
        metavar="H",
        help="horizons in steps (default: the run's own)",
    )
    parser.add_argument("--out", required=True, metavar="PATH.parquet", help="the file to write")
    parser.add_argument(
        "--shield",
        choices=sorted(SHIELD_MODES),
        help="evaluate with the shield on, off or both (default: the run's evaluation modes)",
    )
    parser.add_argument(
        "--num-envs",
        type=int,
        metavar="E",
        help="env copies per batch (default: the run's final_policy_eval_num_envs)",
    )
    return parser


def _read_run(run_dir: Path) -> tuple[dict[str, Any], RunConfig, Certificate | None]:
    """config.json and the certificate in policy.pt, read as regular files inside `run_dir`."""
    if not run_dir.is_dir():
        raise UsageError(f"RUN_DIR {run_dir} is not a folder")
    files = RunFiles(run_dir)
    for path in (files.config, files.policy):
        try:
            regular_file(run_dir, path.name)
        except FileNotFoundError:
            raise UsageError(
                f"RUN_DIR {run_dir} has no {path.name}: not a trained run folder"
            ) from None
    # Bounded and checked, the policy's recorded shapes too, before anything is built.
    raw, config = read_run_config(files)
    if config.custom:
        raise UsageError(
            f"{run_dir} is a run of a task or algorithm given by import path; this command "
            "evaluates runs of the built-in ones only"
        )
    check_policy(run_dir, config)
    return raw, config, load_certificate(run_dir)


def parse_request(argv: Sequence[str] | None = None) -> CheckpointRequest:
    """Parse and check the arguments and read the run folder; raises `UsageError` (one line)
    for anything wrong, and `SystemExit(2)` for what argparse itself refuses."""
    args = _parser().parse_args(argv)
    run_dir = Path(args.run_dir).absolute()
    out = Path(args.out).absolute()
    if out.is_dir():
        raise UsageError(f"--out {args.out} is a folder")
    if out.suffix != ".parquet":
        raise UsageError(f"--out {args.out}: the file name must end with .parquet")
    if not out.parent.is_dir():
        raise UsageError(f"--out {args.out}: the folder {out.parent} does not exist")
    try:
        raw, config, certificate = _read_run(run_dir)
    except (ContainmentError, PersistenceError, ValueError) as error:
        raise UsageError(" ".join(str(error).split())) from None
    if out.resolve() in {(run_dir / name).resolve() for name in RunFiles.NAMES.values()}:
        raise UsageError(f"--out {args.out} is a file of the run folder itself")
    settings = config.evaluation
    if args.seeds is None:
        first, count = settings.first_seed(config.run_idx), settings.episodes
        if count < 1:
            raise UsageError(
                "the run evaluates no episode (final_policy_eval_episodes: 0): give --seeds"
            )
    else:
        first, count = args.seeds
    if first < 0 or first > SEED_MAX:
        raise UsageError(f"--seeds: FIRST must lie in [0, {SEED_MAX}], got {first}")
    if count < 1:
        raise UsageError(f"--seeds: COUNT must be >= 1, got {count}")
    if first + count - 1 > SEED_MAX:
        raise UsageError(
            f"--seeds: the last seed FIRST + COUNT - 1 = {first + count - 1} exceeds {SEED_MAX}"
        )
    horizons = tuple(settings.horizons) if args.horizons is None else tuple(args.horizons)
    bad = [h for h in horizons if h < 1]
    if bad:
        raise UsageError(f"--horizons must be >= 1, got {bad[0]}")
    if len(set(horizons)) != len(horizons):
        raise UsageError(f"--horizons must be distinct, got {' '.join(map(str, horizons))}")
    modes = config.eval_modes if args.shield is None else SHIELD_MODES[args.shield]
    if True in modes and not config.shielded:
        raise UsageError(f"--shield {args.shield}: {config.algo} has no shield")
    if args.num_envs is not None and args.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {args.num_envs}")
    num_envs = settings.final_policy_eval_num_envs if args.num_envs is None else args.num_envs
    return CheckpointRequest(
        run_dir=run_dir,
        raw_config=raw,
        config=config,
        certificate=certificate,
        first_seed=int(first),
        count=int(count),
        horizons=tuple(sorted(int(h) for h in horizons)),
        modes=modes,
        num_envs=min(int(num_envs), int(count)),
        out=out,
    )


def run(request: CheckpointRequest) -> int:
    """Evaluate the request and write its file; the number of rows written."""
    # torch and the envs: after the checks
    from src.algos.policy import load_actor
    from src.evaluation.evaluate import evaluate_policy

    certificate = request.certificate
    rows, _ = evaluate_policy(
        {mode: load_actor(request.run_dir, shielded=mode) for mode in request.modes},
        request.config,
        seeds=request.seeds,
        horizons=request.horizons,
        batch_size=request.num_envs,
        actor_seed=request.first_seed,
        certificate=None if certificate is None else certificate.to_dict(),
    )
    table = table_with_config(rows, EVAL_SCHEMA, request.raw_config)
    metadata = dict(table.schema.metadata or {})
    metadata[EVALUATION_METADATA_KEY] = json.dumps(request.metadata(), sort_keys=True)
    table = table.replace_schema_metadata(metadata)
    write_parquet(table, request.out)
    return table.num_rows


def main(argv: Sequence[str] | None = None) -> int:
    """The command: 0 when the file was written, 2 (one line on stderr) for bad arguments."""
    try:
        request = parse_request(argv)
    except UsageError as error:
        print(f"python -m src.evaluation.checkpoint: error: {error}", file=sys.stderr)
        return 2
    written = run(request)
    print(
        f"wrote {request.out}: {written} rows ({request.count} episodes from seed "
        f"{request.first_seed}, horizons {' '.join(map(str, request.horizons))}, shield "
        f"{'/'.join('on' if mode else 'off' for mode in request.modes)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
