"""The decentralised shield's view of the others: their actions predicted, not seen.

With `coordination: decentralised` each agent's shield knows the joint observation and its own
proposal, not the other agents' proposals. It judges an own action b by its expected risk over
the others' actions,

    rho_i(s, b) = E_{a_-i ~ p(. | s)} q(s, (b, a_-i)),    p_j = (1 - w) pi_j + w / n_actions,

with pi_j the opponent model's prediction of agent j's action from j's own observation and w
the uniform-mixing weight that `shield_opponent_mode` sets (`monotone_floor`: w never falls
faster than the model's held-out cross-entropy allows). The expectation runs over
*completions*, joint actions of the others with weights:

- every one of the n_actions ** (n_agents - 1), weighted by its probability under p, when there
  are at most `opponent_samples` of them (exact);
- else `opponent_samples` completions drawn by Latin hypercube sampling (each agent's
  K draws stratified over its inverse CDF, the strata independently permuted per agent),
  weighted 1 / K: work linear in the team.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from src.algos.shield.search import joint_actions

__all__ = [
    "JUDGED_BLOCK",
    "ROW_TILE",
    "mixed_probs",
    "opponent_completions",
    "own_action_risk",
    "tile_span",
]

ROW_TILE = 12
"""Rows of a matrix product that OpenBLAS's (pinned, `src.numerics`) sgemm kernel computes
together: the rows of a full tile of 12 in one way, those of the last, partial tile in
another, so a row's bits depend on its place in the tiles. A block of rows that starts at a
multiple of `ROW_TILE` and ends at one (or at the end), with at least two rows (one row takes
NumPy's matrix-vector path), has the bits of the same rows in the whole product."""

JUDGED_BLOCK = 64 * ROW_TILE
"""Distinct joint actions `own_action_risk` judges per call of its `risk_options` (a multiple
of `ROW_TILE`): each member's product on a block (4 agents' rows of 64 hidden units in the
cost model: 0.8 MB) stays in the CPU's cache, where those of a step's options (15,000 of
them with 100 copies of 4 agents) would not; smaller blocks cost more calls than they save."""


def mixed_probs(model_probs: torch.Tensor, weight: float) -> torch.Tensor:
    """p = (1 - w) pi + w / n of the model's action distributions [..., n]."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the uniform-mixing weight must lie in [0, 1], got {weight}")
    n = model_probs.shape[-1]
    return model_probs * (1.0 - weight) + weight / n


def opponent_completions(
    probs: torch.Tensor, *, samples: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The others' joint actions each agent's shield averages over (module docstring).

    probs [E, A, n]: every agent's predicted action distribution. Returns completions
    [E, A, K, A] int64 (row (e, i, k) is a joint action whose entry i is a placeholder 0, the
    judged agent's own slot) and their weights [E, A, K] (float64, summing to 1 over K).
    """
    e, a, n = probs.shape
    if a < 2:
        raise ValueError(f"a decentralised shield needs at least 2 agents, got {a}")
    probs = probs.double()
    probs = probs / probs.sum(dim=-1, keepdim=True)  # exactly normalised in float64
    others = torch.tensor([[j for j in range(a) if j != i] for i in range(a)])  # [A, A-1]
    if n ** (a - 1) <= samples:
        grid = joint_actions(a - 1, n)  # [K, A-1]
        k = grid.shape[0]
        completions = torch.zeros(e, a, k, a, dtype=torch.int64)
        index = others[:, None, :].expand(a, k, a - 1)
        completions.scatter_(3, index.expand(e, a, k, a - 1), grid.expand(e, a, k, a - 1))
        # p of agent others[i][m] taking grid[k, m], multiplied over m: [E, A, K]
        p_others = probs[:, others]  # [E, A, A-1, n]
        picked = p_others.gather(3, grid.t().expand(e, a, a - 1, k))  # [E, A, A-1, K]
        return completions, picked.prod(dim=2)
    k = samples
    # Latin hypercube: draw k of agent j's action at (perm_j(k) + U) / K of its CDF.
    strata = torch.rand(e, a, a - 1, k, generator=generator, dtype=torch.float64).argsort(dim=3)
    u = (strata + torch.rand(e, a, a - 1, k, generator=generator, dtype=torch.float64)) / k
    cdf = probs[:, others].cumsum(dim=3)  # [E, A, A-1, n]
    drawn = torch.searchsorted(cdf, u, right=True).clamp_(max=n - 1)  # [E, A, A-1, K]
    completions = torch.zeros(e, a, k, a, dtype=torch.int64)
    index = others[:, None, :].expand(a, k, a - 1).expand(e, a, k, a - 1)
    completions.scatter_(3, index, drawn.transpose(2, 3))
    return completions, torch.full((e, a, k), 1.0 / k, dtype=torch.float64)


def own_action_risk(
    risk_options: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    completions: torch.Tensor,
    weights: torch.Tensor,
    copies: torch.Tensor,
    agents: torch.Tensor,
    own: torch.Tensor,
) -> torch.Tensor:
    """rho_i(s, b) of agent `agents[r]` of copy `copies[r]` for each own action own[r] [R, B].

    `risk_options(copies, options)` returns q [P] of the joint actions `options` [P, A] in
    the states of the copies [P]; completions [E, A, K, A] and weights [E, A, K] are
    `opponent_completions`' output. Returns [R, B] float64.

    Each distinct joint action of a copy is judged once: completions repeat (sampled ones
    often do, and the agents of a copy complete each other's proposals), and a joint action's q
    does not depend on which agent asks. They are judged in blocks of `JUDGED_BLOCK` (the last
    one up to twice that), ordered by copy: the copies of a block are consecutive.
    """
    r, b = own.shape
    chosen = completions[copies, agents]  # [R, K, A]
    k, a = chosen.shape[1:]
    options = chosen[:, None].expand(r, b, k, a).clone()
    slot = agents.view(r, 1, 1, 1).expand(r, b, k, 1)
    options.scatter_(3, slot, own.view(r, b, 1, 1).expand(r, b, k, 1))
    flat = options.view(r * b * k, a)
    row_copy = copies.repeat_interleave(b * k)
    rows = torch.cat([row_copy.unsqueeze(1), flat], dim=1)
    _, inverse = torch.unique(_row_keys(rows), return_inverse=True)
    # The first row of each distinct key.
    first = torch.full((int(inverse.max()) + 1 if len(inverse) else 0,), len(rows))
    first.scatter_reduce_(0, inverse, torch.arange(len(rows)), reduce="amin")
    q = torch.empty(len(first), dtype=torch.float64)
    for start, stop in _blocks(len(first), JUDGED_BLOCK):
        rows = first[start:stop]  # ordered by key, whose first digit is the copy
        q[start:stop] = risk_options(row_copy[rows], flat[rows])
    q = q[inverse]
    return (q.view(r, b, k) * weights[copies, agents][:, None, :]).sum(dim=2)


def tile_span(low: int, high: int, total: int) -> tuple[int, int]:
    """The rows [low, high) of `total` widened to `ROW_TILE` boundaries (or the end) and to at
    least two rows where there are two: a product on them has the bits of the whole one."""
    start = low // ROW_TILE * ROW_TILE
    stop = min(total, -(-high // ROW_TILE) * ROW_TILE)
    if stop - start < 2:
        start = max(0, start - ROW_TILE)
    return start, stop


def _blocks(total: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of consecutive blocks of `size` covering `total` items, the last one
    taking the rest (between `size` and 2 `size` - 1 of them; one block when total < 2 size)."""
    count = max(1, total // size)
    bounds = [i * size for i in range(count)] + [total]
    return list(itertools.pairwise(bounds))


def _row_keys(rows: torch.Tensor) -> torch.Tensor:
    """One int64 per row of non-negative integers [N, C], equal exactly for equal rows: the row
    as the digits of a number (`torch.unique` over rows where that number would overflow)."""
    if not len(rows):
        return rows.new_zeros(0)
    bases = [int(column.max()) + 1 for column in rows.unbind(dim=1)]
    if math.prod(bases) >= 2**62:
        return torch.unique(rows, dim=0, return_inverse=True)[1]
    key = rows[:, 0].clone()
    for column, base in zip(rows.unbind(dim=1)[1:], bases[1:], strict=True):
        key = key * base + column
    return key
