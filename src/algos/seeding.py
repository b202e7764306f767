"""Seeds of a run: the global RNGs, the env copies' reset seeds, the shield's generators.

Everything random in training draws from one of these, derived from the run's seed, so the
same config and seed give the same numbers.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["copy_seeds", "derived_seeds", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs (network init uses torch's)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def copy_seeds(seed: int, num_envs: int) -> list[int]:
    """Independent per-copy reset seeds, so runs with neighbouring seeds share no copy."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs)]


def derived_seeds(seed: int, count: int) -> list[int]:
    """`count` independent 63-bit seeds for the shield's generators, derived from `seed`."""
    state = np.random.SeedSequence([int(seed), 0x5E1D]).generate_state(count, dtype=np.uint64)
    return [int(s >> np.uint64(1)) for s in state]
