"""Counter-based random streams, one per env copy, drawn for all copies in one array call.

Copy ``e`` owns a 64-bit ``key`` (from its seed) and a ``counter`` that advances by one per
reset or step. Draw ``j`` of counter value ``n`` is splitmix64 (Steele, Lea and Flood 2014)
output number ``n * STRIDE + j + 1`` of the generator seeded with ``key``. A copy's numbers
therefore depend only on its own key and counter: a batch of E copies draws exactly what E
separately seeded single copies draw, without a Python loop over copies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["STRIDE", "draw", "index_terms", "mix64", "seed_keys", "uniform_below"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_SHIFT30 = np.uint64(30)
_SHIFT27 = np.uint64(27)
_SHIFT31 = np.uint64(31)
_LOW32 = np.uint64(0xFFFFFFFF)

STRIDE = 1 << 20
"""Draws available per counter value (indices ``0 .. STRIDE - 1``)."""

# Distance in splitmix64 state between consecutive counter values.
_COUNTER_STEP = np.array([STRIDE], dtype=np.uint64) * _GOLDEN


def mix64(state: np.ndarray) -> np.ndarray:
    """The splitmix64 output function on a uint64 array (wrapping arithmetic)."""
    z = state ^ (state >> _SHIFT30)
    z *= _MUL1
    z ^= z >> _SHIFT27
    z *= _MUL2
    z ^= z >> _SHIFT31
    return z


def seed_keys(seeds: Sequence[int]) -> np.ndarray:
    """One uint64 stream key per seed (the first splitmix64 output of that seed)."""
    return mix64(np.array(seeds, dtype=np.uint64) + _GOLDEN)


def index_terms(indices: np.ndarray | Sequence[int]) -> np.ndarray:
    """Precompute the state offsets of draw indices (pass the result to :func:`draw`)."""
    idx = np.asarray(indices, dtype=np.uint64)
    if idx.size and int(idx.max()) >= STRIDE:
        raise ValueError(f"draw indices must be < {STRIDE}, got {int(idx.max())}")
    return (idx + np.uint64(1)) * _GOLDEN


def draw(keys: np.ndarray, counters: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """Random uint64 ``[R, K]``: draws ``terms`` (from :func:`index_terms`) of each row's stream.

    ``keys`` and ``counters`` are uint64 ``[R]``.
    """
    base = keys + counters * _COUNTER_STEP  # [R]
    return mix64(base[:, None] + terms[None, :])


def uniform_below(bits: np.ndarray, probability: float) -> np.ndarray:
    """Bernoulli(``probability``) events from the low 32 bits of ``bits`` (exact at 0 and 1)."""
    threshold = np.uint64(round(probability * 2**32))
    return (bits & _LOW32) < threshold
