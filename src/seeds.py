"""Every reset seed the pipeline uses, in one registry: what each range is for, and the check
that no two uses that make a claim share a seed.

A claim is only as good as the independence of its data: a certificate tested on episodes the
policy trained on, or on a range that was looked at while the method was tuned, promises less
than it says. So every use of reset seeds is declared here, and the workflow refuses a config
whose uses meet (`check_seed_uses`), for every config the schema allows:

- *training*: the env copies of run r reset from `copy_seeds(seed_offset + r, num_envs)`
  (hashed into [2**31, 2**32), above every other default range; episodes after the first
  continue each copy's generator, so these seeds are all training resets);
- *evaluation*: run r's episode i from `final_policy_eval_seed_offset + r N + i`, the same
  for every algorithm (paired comparisons); the *videos* of run r replay the seeds from its
  first evaluation seed on (its evaluation episodes, and the next run's where it renders more
  than N), so they may share the evaluation's seeds, and only those;
- *calibration*: run r of each shielded algorithm tests its certificate on
  `calibration_seed_offset + r n + i` (algorithms may share these: each tests its own
  policies);
- the fixed ranges of `RESERVED`: the range the certificate's ladder and design were tuned on
  (spent: never a calibration or check range again), the range the default experiment's
  hyperparameters were chosen on (`TUNING`, spent), the ranges the certificate checks of
  `benchmarks/certificate_check.py` have used (spent), and the one they use now.

A range that informed a choice is spent: when a check's range has been used, the next check
takes a new one and the old one joins `RESERVED` as spent.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CERTIFICATE_CHECK",
    "CHECK_STRIDE",
    "LADDER_DEPTH",
    "RESERVED",
    "TRAINING_FLOOR",
    "TUNING",
    "SeedUse",
    "check_seed_uses",
    "copy_seeds",
    "overlaps",
]


TRAINING_FLOOR = 2**31
"""Training copies reset from hashed seeds at or above it; every other use's default range
lies below, so they cannot meet whatever the training seeds hash to."""


def copy_seeds(seed: int, num_envs: int) -> list[int]:
    """Independent per-copy reset seeds of run seed `seed`, hashed into [2**31, 2**32), so runs
    with neighbouring seeds share no copy and no copy resets from a seed below 2**31."""
    state = np.random.SeedSequence(seed).generate_state(num_envs)
    return [int(s) | TRAINING_FLOOR for s in state]


@dataclass(frozen=True)
class SeedUse:
    """Reset seeds used for one purpose: the range [first, stop), or the listed `seeds`."""

    name: str
    """What uses them, as an error message names it (e.g. "evaluation")."""
    key: str | None = None
    """The config key that moves them, and its value (None: a reserved range)."""
    value: int = 0
    first: int = 0
    stop: int = 0
    seeds: frozenset[int] = frozenset()
    """Seeds that are not a range (the training copies' hashed seeds)."""
    spent: bool = False
    """A range that informed a choice: nothing may use it again."""

    def __post_init__(self) -> None:
        """Refuse an empty use or a reversed range."""
        if self.stop < self.first:
            raise ValueError(f"seed use {self.name!r}: stop {self.stop} < first {self.first}")

    def meets(self, other: SeedUse) -> int | None:
        """A seed both uses share, or None."""
        for a, b in ((self, other), (other, self)):
            for seed in sorted(a.seeds):
                if b.contains(seed):
                    return seed
        low, high = max(self.first, other.first), min(self.stop, other.stop)
        return low if low < high else None

    def contains(self, seed: int) -> bool:
        """Whether `seed` is one of this use's seeds."""
        return self.first <= seed < self.stop or seed in self.seeds

    def describe(self) -> str:
        """The seeds as an error message names them."""
        parts = [f"{self.first}..{self.stop - 1}"] if self.stop > self.first else []
        if self.seeds:
            parts.append(f"{len(self.seeds)} hashed seeds")
        return " and ".join(parts) or "no seeds"


CHECK_STRIDE = 10_000
"""Seeds per run of a certificate check: run k plays `CERTIFICATE_CHECK.first` + 10,000 k + i."""
CERTIFICATE_CHECK = SeedUse(
    "the certificate check (benchmarks/certificate_check.py)", first=35_000_000, stop=36_000_000
)
"""Fresh reset seeds of `benchmarks/certificate_check.py`, for up to 100 runs of at most
`CHECK_STRIDE` episodes each."""

LADDER_DEPTH = SeedUse(
    "the ladder's depth (benchmarks/ladder_depth.py, spent)",
    first=42_000_000,
    stop=43_000_000,
    spent=True,
)
"""Reset seeds of `benchmarks/ladder_depth.py`, for up to 100 runs of at most `CHECK_STRIDE`
episodes each: what it measured chose `config/paper.yaml`'s `certify_multiples`, so they are
spent the moment they are used."""

TUNING = SeedUse(
    "the hyperparameter tuning (benchmarks/tuning.py, spent)",
    first=40_000_000,
    stop=41_000_000,
    spent=True,
)
"""Reset seeds of the tuning runs of `benchmarks/tuning.py` (evaluation, then calibration
half a million seeds on): they chose the default experiment's hyperparameters, so they are
spent the moment they are used; the tuning itself is the one use allowed on them."""

RESERVED: tuple[SeedUse, ...] = (
    SeedUse("the ladder's tuning (spent)", first=2_000_000, stop=3_000_000, spent=True),
    TUNING,
    SeedUse("earlier certificate checks (spent)", first=9_000_000, stop=10_000_000, spent=True),
    SeedUse("earlier certificate checks (spent)", first=30_000_000, stop=35_000_000, spent=True),
    SeedUse(
        "the default experiment's calibration at the per-run level (spent)",
        first=22_000_000,
        stop=23_000_000,
        spent=True,
    ),
    SeedUse(
        "the paper config's calibration before its ladder reached H / T (spent)",
        first=23_000_000,
        stop=23_005_000,
        spent=True,
    ),
    LADDER_DEPTH,
    CERTIFICATE_CHECK,
)
"""Ranges no config may use: the one the certificate's ladder (`certify_multiples`) and its
two-look design were chosen on (the calibration range of the runs that chose them), the one
the default experiment's hyperparameters were chosen on (`TUNING`), the fresh ranges of the
certificate checks made so far (each check looks at a range once), the next check's, and the
default experiment's calibration range before `joint_certificates` (its counts were seen when
the family's level was chosen), the paper config's first calibration range (its counts showed
that the ladder must reach further) and the range that measured how far (`LADDER_DEPTH`)."""


NO_CLAIM = frozenset(("training", "the videos"))
"""Uses that claim nothing about the seeds they play: they may meet a spent range."""


def overlaps(uses: Sequence[SeedUse], allowed: Iterable[frozenset[str]] = ()) -> str | None:
    """The first pair of `uses` and `RESERVED` that share a seed, as one line naming the config
    key that moves the later one, or None; pairs of names in `allowed` may share."""
    permitted = set(allowed)
    everything = [*uses, *RESERVED]
    for i, a in enumerate(everything):
        for b in everything[i + 1 :]:
            if (a in RESERVED and b in RESERVED) or frozenset((a.name, b.name)) in permitted:
                continue
            if (a.spent or b.spent) and NO_CLAIM & {a.name, b.name}:
                continue  # a spent range only bars the uses that make claims
            seed = a.meets(b)
            if seed is not None:
                mover = b if b.key is not None else a
                return (
                    f"config key '{mover.key}' = {mover.value}: the seeds of {a.name} "
                    f"({a.describe()}) and of {b.name} ({b.describe()}) share seed {seed}"
                )
    return None


def check_seed_uses(
    *,
    seed_offset: int,
    num_runs: int,
    num_envs: int,
    eval_offset: int,
    eval_episodes: int,
    video_episodes: int,
    calibration: Mapping[str, tuple[int, int]],
) -> str | None:
    """Whether an experiment's seed uses are disjoint: None, or one line naming the config key
    to move, the two uses that meet and a seed they share.

    `calibration` maps each shielded algorithm to (calibration_seed_offset,
    calibration_episodes); algorithms may share their calibration seeds (each tests its own
    policies); runs of one cannot (their ranges follow each other).
    """
    training = frozenset(
        seed for run in range(num_runs) for seed in copy_seeds(seed_offset + run, num_envs)
    )
    uses = [SeedUse("training", "base.seed_offset", seed_offset, seeds=training)]
    evaluation = "base.final_policy_eval_seed_offset"
    if eval_episodes:
        stop = eval_offset + num_runs * eval_episodes
        uses.append(SeedUse("evaluation", evaluation, eval_offset, eval_offset, stop))
    if video_episodes:
        stop = eval_offset + (num_runs - 1) * eval_episodes + video_episodes
        stop = max(stop, eval_offset + video_episodes)
        uses.append(SeedUse("the videos", evaluation, eval_offset, eval_offset, stop))
    names = []
    for algo, (offset, episodes) in calibration.items():
        if episodes:
            names.append(f"the calibration of {algo}")
            key = f"algo_params.{algo}.calibration_seed_offset"
            uses.append(SeedUse(names[-1], key, offset, offset, offset + num_runs * episodes))
    allowed = [frozenset(("evaluation", "the videos"))]
    allowed += [frozenset(pair) for pair in itertools.combinations(names, 2)]
    return overlaps(uses, allowed)
