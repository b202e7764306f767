"""Seeds of a run: the global RNGs and the shield's generators (the env copies' reset seeds:
`src.seeds.copy_seeds`).

Everything random in training draws from one of these, derived from the run's seed, so the
same config and seed give the same numbers.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["derived_seeds", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs (network init uses torch's)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def derived_seeds(seed: int, count: int) -> list[int]:
    """`count` independent 63-bit seeds for the shield's generators, derived from `seed`."""
    state = np.random.SeedSequence([int(seed), 0x5E1D]).generate_state(count, dtype=np.uint64)
    return [int(s >> np.uint64(1)) for s in state]
