"""benchmarks/shield_scaling.py: the joint actions each search judges per decision."""

from __future__ import annotations

import pytest

from benchmarks.shield_scaling import max_agents, measure


@pytest.mark.parametrize("agents", [2, 3])
def test_work_per_decision_follows_each_search(agents: int):
    coordinate = measure("hazard_grid", agents, "coordinate", copies=4, steps=2)
    exhaustive = measure("hazard_grid", agents, "exhaustive", copies=4, steps=2)
    n = exhaustive["n_actions"]
    one_change = 1 + agents * (n - 1)  # the proposal and its one-agent changes
    # With allowance 0 every decision enumerates every joint action after the one-agent changes.
    assert exhaustive["judged_per_decision"] == one_change + n**agents
    # The descent from the safest one-agent change: at least one step over every agent's
    # n - 1 other actions (a local minimum needs them all), at most 2 x A such steps.
    step = agents * (n - 1)
    assert one_change + step <= coordinate["judged_per_decision"]
    assert coordinate["judged_per_decision"] <= one_change + 2 * agents * step


@pytest.mark.parametrize("agents", [2, 3, 4])
def test_decentralised_work_is_each_agents_actions_against_the_completions(agents: int):
    decentralised = measure("hazard_grid", agents, "decentralised", copies=4, steps=2)
    n = decentralised["n_actions"]
    # Allowance 0 refuses every proposal: each agent judges all n actions, against every
    # completion of the others' actions up to 8 (the default opponent_samples), else 8; a joint
    # action that several agents (or repeated completions) ask for is judged once.
    completions = min(n ** (agents - 1), 8)
    judged = decentralised["judged_per_decision"]
    if agents == 2:
        # The proposals: (p0, b) and (b, p1) for every b, (p0, p1) once: 2n - 1; the refused
        # agents' other actions: every joint action but (p0, p1), once each.
        assert judged == (2 * n - 1) + (n**2 - 1)
    else:
        assert agents * n < judged <= agents * n * completions


def test_team_sizes_stop_where_the_task_does():
    assert max_agents("intersection") == 4  # one car per arm of the crossing
    assert max_agents("hazard_grid") >= 5
