"""Descents over joint actions: a joint action of low risk without judging all of them.

Both change one agent's action at a time and end at a one-agent local minimum (no single
agent's change lowers the risk) or when their budget is spent; the result is the least risk
found, an upper bound on the least risk of all n ** A joint actions of A agents.
`best_change_descent` can also stop a row as soon as its risk is within a target.

- `coordinate_descent` (cyclic): each agent in turn (0, 1, ..., A - 1, 0, ...) takes, of its
  n - 1 other actions with the others' fixed, the one of least risk when that is lower than
  the current one, for at most `sweeps` sweeps over the team. A row whose last A turns
  changed nothing has settled. Work per row: at most sweeps * A * (n - 1) joint actions
  judged, linear in the team, in up to sweeps * A calls of `risk`. Used by the safety
  critic's backup (`RiskCritic`), which judges all its rows together.
- `best_change_descent` (greedy, the Gauss-Southwell rule): each step judges every one-agent
  change of a row (A * (n - 1) joint actions; after the first move, the (A - 1) (n - 1) of
  the agents that did not just move) and takes the least when it is lower. A row stops at its
  first step without a lower change, so a row at a local minimum costs one call, not A. Work
  per row: at most (1 + (`moves` - 1) (A - 1) / A) A (n - 1) joint actions judged in `moves`
  calls.
  Used by the shield's search for an action within the allowance (`BudgetShield`, the
  allowance as the target), whose few undecided rows make each call's fixed cost count more
  than its rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

__all__ = ["best_change_descent", "coordinate_descent", "joint_actions"]


def joint_actions(n_agents: int, n_actions: int) -> torch.Tensor:
    """Every joint action, [n_actions ** n_agents, n_agents] int64, agent 0 slowest-varying.

    >>> joint_actions(2, 2).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1]]
    """
    grid = itertools.product(range(n_actions), repeat=n_agents)
    return torch.tensor(list(grid), dtype=torch.int64).reshape(-1, n_agents)


def coordinate_descent(
    risk: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    start_risk: torch.Tensor,
    *,
    n_actions: int,
    sweeps: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Descend from `start` [R, A] (int64, of risk `start_risk` [R]); returns the joint actions
    [R, A] and their risks [R] (float64).

    `risk(rows, options)` judges the joint actions `options` [R', K, A] of the rows `rows` [R']
    (int64 indices into the R rows) and returns their risks [R', K]. Every row takes every
    turn (for a caller that judges all its rows together, as the critic's member-major
    batches) until every row has settled.
    """
    rows_total, a = start.shape
    current = start.clone()
    best = start_risk.to(torch.float64).clone()
    unchanged = torch.zeros(rows_total, dtype=torch.int64)  # agents in a row without a change
    shift = torch.arange(1, n_actions)
    every = torch.arange(rows_total)
    for turn in range(sweeps * a):
        if bool((unchanged >= a).all()):
            break  # every row is at a one-agent local minimum: no turn would change it
        agent = turn % a
        # The agent's other actions: n - 1 options per row (its current one is `best`).
        options = current.unsqueeze(1).repeat(1, n_actions - 1, 1)  # [R, n - 1, A]
        options[:, :, agent] = (current[:, agent].unsqueeze(1) + shift) % n_actions
        low = risk(every, options).to(torch.float64).min(dim=1)
        lower = low.values < best
        current[lower] = options[lower, low.indices[lower]]
        best[lower] = low.values[lower]
        unchanged += 1
        unchanged[lower] = 1  # the agent that moved is at its best for the others' actions
    return current, best


def best_change_descent(
    risk: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    start_risk: torch.Tensor,
    *,
    n_actions: int,
    moves: int,
    target: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Descend from `start` [R, A] (int64, of risk `start_risk` [R]) by the best one-agent
    change, at most `moves` changes per row; returns the joint actions [R, A] and their risks
    [R] (float64). `risk(rows, options)` as for `coordinate_descent`.

    With a `target`, a row also stops as soon as its risk is at most `target` (a search for an
    acceptable joint action, not for the least risk: only the rows that find none descend to
    their local minimum). Ties between changes of equal risk go to the first in (agent, action
    shift) order.

    After a row's first move, the agent that just moved is not judged again: its other
    actions, with the others' as they are, are the joint actions the move chose among, none
    of lower risk than the one it took. From then on a row judges (A - 1) (n - 1) changes per
    move, not A (n - 1).
    """
    rows_total, a = start.shape
    current = start.clone()
    best = start_risk.to(torch.float64).clone()
    # Every (agent, other action) pair: option o changes agent[o] by shift[o].
    agent = torch.arange(a).repeat_interleave(n_actions - 1)
    shift = torch.arange(1, n_actions).repeat(a)
    # After a move of agent i: the pairs of the other agents (row i of these tables).
    others = torch.tensor(
        [[j for j in range(a) if j != i] for i in range(a)], dtype=torch.int64
    ).view(a, a - 1)
    other_agent = others.repeat_interleave(n_actions - 1, dim=1)  # [A, (A - 1) (n - 1)]
    other_shift = torch.arange(1, n_actions).repeat(a - 1)
    moved = torch.zeros(rows_total, dtype=torch.int64)  # the agent of each row's last move
    active = torch.arange(rows_total)
    if target is not None:
        active = active[best > target]
    for step in range(moves):
        if not len(active) or (step > 0 and a == 1):
            break  # a lone agent's other actions were all judged by its move
        now = current[active]
        if step == 0:
            changed = agent.expand(len(active), -1)  # [R', A (n - 1)]
            by = shift
        else:
            changed = other_agent[moved[active]]  # [R', (A - 1) (n - 1)]
            by = other_shift
        options = now.unsqueeze(1).repeat(1, changed.shape[1], 1)  # [R', O, A]
        options.scatter_(
            2, changed.unsqueeze(2), ((now.gather(1, changed) + by) % n_actions).unsqueeze(2)
        )
        low = risk(active, options).to(torch.float64).min(dim=1)
        lower = low.values < best[active]
        taken = low.indices[lower]
        active = active[lower]  # the rows that moved go on; the others have settled
        current[active] = options[lower, taken]
        best[active] = low.values[lower]
        moved[active] = changed[lower, taken]
        if target is not None:
            active = active[best[active] > target]  # the rows that found one are done
    return current, best
