"""The shield's certificate of a run as a small JSON record of its own: `certificate.json`.

The certificate (`src.algos.shield.calibration.Certificate`, stored in policy.pt) is also on
every row of eval.parquet; this record states it once, in plain JSON, for readers that do not
open Parquet or torch files, together with the code that produced it (the git commit that
config.json records for the training). Its keys are documented in docs/schemas.md,
"`certificate.json`". Every run folder of the workflow has one: runs without a certificate
(algorithms without a shield, a shield that stores none) have `has_certificate: false` and
null certificate fields.

>>> from src.algos.shield.calibration import Certificate
>>> certificate = Certificate(certified=True, allowance=0.05, max_risk=0.1, delta=0.05,
...     horizon=100, episodes=100, violations=2, p_value=0.002, first_seed=7)
>>> record = certificate_record({"env_name": "hazard_grid", "algo": "shield", "run_idx": 0,
...     "git_commit": "abc", "git_dirty": False}, certificate)
>>> record["n"], record["k"], record["calibration_seeds"], record["certified"]
(100, 2, {'first': 7, 'count': 100}, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from src.algos.registry import algorithm_names, get_algorithm
from src.algos.shield.calibration import Certificate
from src.core.io import save_to_file

__all__ = ["RECORD_KEYS", "certificate_record", "write_certificate_record"]

RECORD_KEYS = (
    "env",
    "algo",
    "run",
    "shielded",
    "has_certificate",
    "certified",
    "n",
    "k",
    "max_risk",
    "delta",
    "horizon",
    "allowance",
    "p_value",
    "calibration_seeds",
    "tested",
    "git_commit",
    "git_dirty",
)
"""The keys of a record, in the order written."""


def _finite(value: float) -> float | None:
    """`value` as a float, None when it is not finite (JSON has no NaN)."""
    number = float(value)
    return number if math.isfinite(number) else None


def certificate_record(
    config: Mapping[str, Any], certificate: Certificate | None
) -> dict[str, Any]:
    """The record of a run whose config.json holds `config` and whose policy.pt holds
    `certificate` (None: none).

    `n` and `k` are the calibration episodes the deployed allowance played and how many of
    them violated within `horizon` steps; their reset seeds are `calibration_seeds.first + i`,
    i < `calibration_seeds.count` (= n). A shield that tested nothing (`calibration_episodes:
    0`) has n = 0 and null k and p-value. `tested` lists every allowance the fixed-sequence
    test tried, in order.
    """
    algo = str(config["algo"])
    record: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    record.update(
        env=str(config["env_name"]),
        algo=algo,
        run=int(config["run_idx"]),
        shielded=algo in algorithm_names() and get_algorithm(algo).shielded,
        has_certificate=certificate is not None,
        git_commit=config.get("git_commit"),
        git_dirty=config.get("git_dirty"),
    )
    if certificate is None:
        return record
    tested = certificate.episodes > 0
    record.update(
        certified=bool(certificate.certified),
        n=int(certificate.episodes),
        k=int(certificate.violations) if tested else None,
        max_risk=float(certificate.max_risk),
        delta=float(certificate.delta),
        horizon=int(certificate.horizon),
        allowance=_finite(certificate.allowance),
        p_value=_finite(certificate.p_value) if tested else None,
        calibration_seeds={
            "first": int(certificate.first_seed),
            "count": int(certificate.episodes),
        },
        tested=[
            {
                key: _finite(value) if isinstance(value, float) else value
                for key, value in entry.items()
            }
            for entry in certificate.tested
        ],
    )
    return record


def write_certificate_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Write a record (`certificate_record`) to `path` as JSON, atomically."""
    target = Path(path)
    return save_to_file(dict(record), target.parent, target.name)
