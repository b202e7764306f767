"""search: the cyclic and the best-change descents, one agent at a time to a one-agent local
minimum."""

from __future__ import annotations

import itertools

import torch

from src.algos.shield.search import best_change_descent, coordinate_descent


def _table_risk(table: torch.Tensor):
    """risk(rows, options) of a lookup table [R, n, n, ...] indexed by the joint action."""
    calls = []

    def risk(rows: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
        calls.append(len(rows))
        index = (rows.unsqueeze(1).expand(-1, options.shape[1]), *options.unbind(-1))
        return table[index]

    return risk, calls


def test_a_separable_risk_is_minimised_exactly_in_one_sweep():
    generator = torch.Generator().manual_seed(0)
    rows, agents, n = 6, 3, 5
    parts = torch.rand(rows, agents, n, generator=generator, dtype=torch.float64)
    table = parts[:, 0, :, None, None] + parts[:, 1, None, :, None] + parts[:, 2, None, None, :]
    risk, calls = _table_risk(table)
    start = torch.zeros(rows, agents, dtype=torch.int64)
    start_risk = table[torch.arange(rows), 0, 0, 0]
    actions, best = coordinate_descent(risk, start, start_risk, n_actions=n, sweeps=2)
    expected = table.reshape(rows, -1).min(dim=1).values
    torch.testing.assert_close(best, expected)
    torch.testing.assert_close(table[torch.arange(rows), *actions.unbind(-1)], expected)
    # One sweep finds it, the next A - 1 turns confirm it; then every row has settled.
    assert calls == [rows] * (2 * agents - 1) and len(calls) < 2 * agents


def test_it_stops_at_a_one_agent_local_minimum_and_never_raises_the_risk():
    # Two agents, two actions: (0, 0) is a local minimum (each single change is worse) while
    # (1, 1) is the global one: the descent from (0, 0) stays, from (0, 1) reaches (1, 1).
    table = torch.tensor([[[0.3, 0.5], [0.6, 0.1]]] * 2, dtype=torch.float64)
    risk, _ = _table_risk(table)
    start = torch.tensor([[0, 0], [0, 1]])
    actions, best = coordinate_descent(
        risk, start, table[torch.arange(2), *start.unbind(-1)], n_actions=2, sweeps=3
    )
    assert actions.tolist() == [[0, 0], [1, 1]]
    assert best.tolist() == [0.3, 0.1]


def test_every_row_takes_every_turn_until_all_have_settled():
    table = torch.rand(4, 3, 3, 3, generator=torch.Generator().manual_seed(1))
    risk, calls = _table_risk(table)
    start = torch.zeros(4, 3, dtype=torch.int64)
    actions, best = coordinate_descent(risk, start, table[:, 0, 0, 0], n_actions=3, sweeps=4)
    assert set(calls) == {4} and 3 <= len(calls) < 12  # stopped before the sweeps ran out
    # Never above the start, never below the true minimum, and at a one-agent local minimum.
    assert torch.all(best <= table[:, 0, 0, 0].double())
    every = torch.tensor(list(itertools.product(range(3), repeat=3)))
    assert torch.all(best >= table[:, every[:, 0], every[:, 1], every[:, 2]].min(dim=1).values)
    for row, joint in enumerate(actions.tolist()):
        for agent, other in itertools.product(range(3), range(3)):
            changed = list(joint)
            changed[agent] = other
            assert table[row, *changed] >= best[row]
    # More sweeps change nothing once every row has settled.
    again, _ = coordinate_descent(risk, start, table[:, 0, 0, 0], n_actions=3, sweeps=8)
    assert torch.equal(again, actions)


def test_best_change_takes_the_largest_improvement_first():
    # One row, two agents, three actions; from (0, 0) agent 1's change to 2 lowers the risk
    # most, then agent 0's change to 1.
    table = torch.tensor(
        [[[0.9, 0.8, 0.5], [0.7, 0.6, 0.2], [0.95, 0.95, 0.95]]], dtype=torch.float64
    )
    risk, calls = _table_risk(table)
    start = torch.tensor([[0, 0]])
    actions, best = best_change_descent(risk, start, table[0, 0, 0].view(1), n_actions=3, moves=5)
    assert actions.tolist() == [[1, 2]] and best.tolist() == [0.2]
    # Two moves and the call that found no lower change: each call judges A (n - 1) = 4.
    assert calls == [1, 1, 1]


def test_best_change_stops_each_row_at_its_local_minimum_within_its_moves():
    generator = torch.Generator().manual_seed(2)
    rows, agents, n = 8, 3, 4
    table = torch.rand(rows, *[n] * agents, generator=generator, dtype=torch.float64)
    risk, calls = _table_risk(table)
    start = torch.zeros(rows, agents, dtype=torch.int64)
    start_risk = table[torch.arange(rows), 0, 0, 0]
    actions, best = best_change_descent(risk, start, start_risk, n_actions=n, moves=20)
    torch.testing.assert_close(best, table[torch.arange(rows), *actions.unbind(-1)])
    assert torch.all(best <= start_risk)
    # A row leaves at its first step without a lower change: the judged rows only shrink.
    assert calls[0] == rows and all(b <= a for a, b in itertools.pairwise(calls))
    for row, joint in enumerate(actions.tolist()):
        for agent, other in itertools.product(range(agents), range(n)):
            changed = list(joint)
            changed[agent] = other
            assert table[row, *changed] >= best[row]
    # A budget of one move: one call, each row one change at most from its start.
    risk, calls = _table_risk(table)
    one, _ = best_change_descent(risk, start, start_risk, n_actions=n, moves=1)
    assert calls == [rows] and torch.all((one != start).sum(dim=1) <= 1)


def test_a_separable_risk_is_minimised_by_best_changes_in_at_most_one_move_per_agent():
    generator = torch.Generator().manual_seed(3)
    rows, agents, n = 6, 3, 5
    parts = torch.rand(rows, agents, n, generator=generator, dtype=torch.float64)
    table = parts[:, 0, :, None, None] + parts[:, 1, None, :, None] + parts[:, 2, None, None, :]
    risk, calls = _table_risk(table)
    start = torch.zeros(rows, agents, dtype=torch.int64)
    _, best = best_change_descent(
        risk, start, table[torch.arange(rows), 0, 0, 0], n_actions=n, moves=10
    )
    torch.testing.assert_close(best, table.reshape(rows, -1).min(dim=1).values)
    assert len(calls) <= agents + 1


def test_best_change_with_a_target_stops_each_row_once_its_risk_is_within_it():
    # From (0, 0): (1, 2) of risk 0.2 is two moves away, (0, 2) of risk 0.5 one move.
    table = torch.tensor(
        [[[0.9, 0.8, 0.5], [0.7, 0.6, 0.2], [0.95, 0.95, 0.95]]] * 2, dtype=torch.float64
    )
    start = torch.tensor([[0, 2], [0, 0]])
    start_risk = table[torch.arange(2), *start.unbind(-1)]
    # Target 0.55: row 0 starts within it and is never judged; row 1 stops after one move,
    # at (0, 2), not at the minimum two moves away.
    risk, calls = _table_risk(table)
    actions, best = best_change_descent(risk, start, start_risk, n_actions=3, moves=5, target=0.55)
    assert actions.tolist() == [[0, 2], [0, 2]] and best.tolist() == [0.5, 0.5]
    assert calls == [1]
    # Target 0.1, below every risk: both rows descend to (1, 2) as with no target.
    risk, calls = _table_risk(table)
    actions, best = best_change_descent(risk, start, start_risk, n_actions=3, moves=5, target=0.1)
    untargeted, _ = best_change_descent(risk, start, start_risk, n_actions=3, moves=5)
    assert actions.tolist() == untargeted.tolist() == [[1, 2], [1, 2]]
    assert best.tolist() == [0.2, 0.2]


def test_best_change_never_judges_again_the_agent_that_just_moved():
    """Each move after the first judges only the other agents' changes, and the descent ends
    where a descent that judges every change each move ends."""
    generator = torch.Generator().manual_seed(4)
    rows, agents, n = 16, 3, 4
    table = torch.rand(rows, *[n] * agents, generator=generator, dtype=torch.float64)
    start = torch.zeros(rows, agents, dtype=torch.int64)
    start_risk = table[torch.arange(rows), 0, 0, 0]
    widths = []

    def risk(rows_: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
        widths.append(options.shape[1])
        index = (rows_.unsqueeze(1).expand(-1, options.shape[1]), *options.unbind(-1))
        return table[index]

    actions, best = best_change_descent(risk, start, start_risk, n_actions=n, moves=20)
    assert widths[0] == agents * (n - 1) and len(widths) > 2
    assert set(widths[1:]) == {(agents - 1) * (n - 1)}
    # The reference: every one-agent change judged at every move, the least taken if lower.
    current, low = start.clone(), start_risk.clone()
    for _ in range(20):
        for row in range(rows):
            changes = []
            for agent, shift in itertools.product(range(agents), range(1, n)):
                changed = current[row].clone()
                changed[agent] = (changed[agent] + shift) % n
                changes.append(changed)
            values = torch.stack([table[row, *c] for c in changes])
            if values.min() < low[row]:
                current[row], low[row] = changes[int(values.argmin())], values.min()
    assert torch.equal(actions, current) and torch.equal(best, low)
    # One agent: its move judged all its other actions; nothing is left to judge.
    single = torch.rand(3, n, generator=generator, dtype=torch.float64)
    _, lone_best = best_change_descent(
        lambda r, o: single[r.unsqueeze(1), o[..., 0]],
        torch.zeros(3, 1, dtype=torch.int64),
        single[:, 0],
        n_actions=n,
        moves=5,
    )
    torch.testing.assert_close(
        lone_best, torch.minimum(single[:, 0], single[:, 1:].min(dim=1).values)
    )
