"""Coordinate descent over joint actions: a joint action of low risk without judging all of them.

The least risk over the n ** A joint actions of A agents is searched one agent at a time: each
agent in turn (0, 1, ..., A - 1, 0, ...) takes, of its n - 1 other actions with the others'
fixed, the one of least risk when that is lower than the current one, for at most `sweeps`
sweeps over the team. A row whose last A turns changed nothing is at a one-agent local minimum
(no single agent's change lowers its risk) and stops there. Work per row: at most
sweeps * A * (n - 1) joint actions judged, linear in the team; the result is the least risk
found, an upper bound on the least risk of all joint actions.

Used by the v1 shield's search for an action within the allowance (`BudgetShield`) and by its
safety critic's backup (`RiskCritic`, `backup: coordinate`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["coordinate_descent"]


def coordinate_descent(
    risk: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    start_risk: torch.Tensor,
    *,
    n_actions: int,
    sweeps: int,
    settle: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Descend from `start` [R, A] (int64, of risk `start_risk` [R]); returns the joint actions
    [R, A] and their risks [R] (float64).

    `risk(rows, options)` judges the joint actions `options` [R', K, A] of the rows `rows` [R']
    (int64 indices into the R rows) and returns their risks [R', K]. With `settle` a row leaves
    the search at its one-agent local minimum; without it every row takes every turn (for a
    caller that can only judge all rows together).
    """
    rows_total, a = start.shape
    current = start.clone()
    best = start_risk.to(torch.float64).clone()
    unchanged = torch.zeros(rows_total, dtype=torch.int64)  # agents in a row without a change
    shift = torch.arange(1, n_actions)
    every = torch.arange(rows_total)
    for turn in range(sweeps * a):
        active = every[unchanged < a] if settle else every
        if not len(active):
            break
        agent = turn % a
        # The agent's other actions: n - 1 options per row (its current one is `best`).
        options = current[active].unsqueeze(1).repeat(1, n_actions - 1, 1)  # [R', n - 1, A]
        options[:, :, agent] = (current[active, agent].unsqueeze(1) + shift) % n_actions
        low = risk(active, options).to(torch.float64).min(dim=1)
        lower = low.values < best[active]
        moved = active[lower]
        current[moved] = options[lower, low.indices[lower]]
        best[moved] = low.values[lower]
        unchanged[active] += 1
        unchanged[moved] = 1  # the agent that moved is at its best for the others' actions
    return current, best
