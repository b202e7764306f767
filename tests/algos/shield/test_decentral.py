"""The decentralised shield (`coordination: decentralised`) against answers worked out by hand.

Its completions of the others' actions (all of them with their probabilities, or a Latin
hypercube sample), each agent's expected risk of its own actions with the exact least
risk-to-go of a small hazard_grid, and its decisions, agent by agent, checked against a direct
computation that uses none of the shield's code; the opponent weight of `shield_opponent_mode`
moves the prediction between the model and uniform.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from src.algos.shield import decentral
from src.algos.shield.budget import BudgetShield
from src.algos.shield.decentral import (
    ROW_TILE,
    _row_keys,
    mixed_probs,
    opponent_completions,
    own_action_risk,
    tile_span,
)
from src.checks import ConfigError
from src.config.run import RunConfig, make_run_config
from tests.algos.shield.shield_toys import shield_config
from tests.algos.shield.test_budget_shield import (
    N_ACTIONS,
    N_AGENTS,
    ExactQ,
    _critic,
    _env,
    model_obs_dim,
)


def _probs(e: int, a: int, n: int, seed: int) -> torch.Tensor:
    return torch.softmax(torch.randn(e, a, n, generator=torch.Generator().manual_seed(seed)), -1)


@pytest.mark.parametrize(("a", "n"), [(2, 5), (3, 5), (3, 2)])
def test_exact_completions_are_every_joint_action_of_the_others_with_its_probability(a, n):
    probs = _probs(2, a, n, seed=a * n)
    completions, weights = opponent_completions(probs, samples=n ** (a - 1), generator=None)
    assert completions.shape == (2, a, n ** (a - 1), a)
    for e, i in itertools.product(range(2), range(a)):
        seen = {}
        for k in range(completions.shape[2]):
            row = completions[e, i, k].tolist()
            assert row[i] == 0  # the judged agent's own slot
            others = tuple(x for j, x in enumerate(row) if j != i)
            p = probs.double() / probs.double().sum(-1, keepdim=True)
            expected = np.prod([float(p[e, j, x]) for j, x in enumerate(row) if j != i])
            seen[others] = float(weights[e, i, k])
            assert seen[others] == pytest.approx(expected, rel=1e-12)
        assert len(seen) == n ** (a - 1)  # every completion once
        assert sum(seen.values()) == pytest.approx(1.0, abs=1e-12)


def test_sampled_completions_are_stratified_per_agent_and_reproducible():
    a, n, k = 4, 5, 40
    probs = _probs(3, a, n, seed=7)
    draw = [
        opponent_completions(probs, samples=k, generator=torch.Generator().manual_seed(s))
        for s in (1, 1, 2)
    ]
    (completions, weights), again, other = draw
    assert torch.equal(completions, again[0]) and not torch.equal(completions, other[0])
    assert completions.shape == (3, a, k, a)
    assert torch.all(weights == 1.0 / k)
    for e, i, j in itertools.product(range(3), range(a), range(a)):
        column = completions[e, i, :, j]
        if j == i:
            assert torch.all(column == 0)
            continue
        # One draw per stratum of the CDF: each action is drawn K p times, up to < 2.
        counts = torch.bincount(column, minlength=n).double()
        assert torch.all((counts - k * probs[e, j].double()).abs() < 2.0)


def test_mixed_probs_moves_from_the_model_to_uniform():
    probs = _probs(1, 2, 4, seed=3)
    assert torch.equal(mixed_probs(probs, 0.0), probs)
    assert torch.allclose(mixed_probs(probs, 1.0), torch.full_like(probs, 0.25))
    assert torch.allclose(mixed_probs(probs, 0.5).sum(-1), torch.ones(1, 2))
    with pytest.raises(ValueError, match="weight"):
        mixed_probs(probs, 1.5)


class FixedOpponents:
    """An opponent model predicting fixed action distributions, whatever the state."""

    def __init__(self, probs: torch.Tensor) -> None:
        self.log_probs = probs.log()  # [A, n]

    def joint_logits(self, joint_obs: torch.Tensor) -> torch.Tensor:
        return self.log_probs.expand(joint_obs.shape[0], *self.log_probs.shape).clone()


def _shield(oracle: ExactQ, opponents: FixedOpponents, **overrides: object) -> BudgetShield:
    settings = {"horizon": 300, "max_risk": 0.1, **overrides}
    config = shield_config(
        ensemble_size=1,
        coordination="decentralised",
        **settings,
    )
    return BudgetShield(
        config=config,
        world_model=oracle,
        critic=_critic(),
        opponent_model=opponents,
        n_agents=N_AGENTS,
        obs_dim=model_obs_dim(),
        n_actions=N_ACTIONS,
    )


def _states(env: object, copies: int, seed: int) -> np.ndarray:
    """Observations [copies, A, D] of random placements of the agents on free cells."""
    rng = np.random.default_rng(seed)
    state = env.get_state()
    free = np.flatnonzero(~state["hazard"][0])
    cells = [rng.choice(free, size=N_AGENTS, replace=False) for _ in range(copies)]
    state["cell"] = np.stack(cells)
    env.set_state(state)
    return env.observe()


def _by_hand(oracle: ExactQ, obs: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """rho[e, i, b] = sum over the other's action x of p(x) Q*(s_e, i takes b, the other x)."""
    e = obs.shape[0]
    joint = torch.from_numpy(obs.reshape(e, -1))
    rho = np.zeros((e, N_AGENTS, N_ACTIONS))
    for i, b, x in itertools.product(range(N_AGENTS), range(N_ACTIONS), range(N_ACTIONS)):
        action = np.zeros((e, N_AGENTS), dtype=np.int64)
        action[:, i], action[:, 1 - i] = b, x
        rho[:, i, b] += probs[1 - i, x] * oracle.q_star(joint, torch.from_numpy(action))
    return rho


@pytest.mark.parametrize("weight", [0.0, 0.4, 1.0])
def test_each_agent_keeps_a_proposal_within_the_allowance_else_its_likeliest_allowed_action(
    weight,
):
    copies = 300
    env = _env(copies)
    oracle = ExactQ(env)
    model = _probs(1, N_AGENTS, N_ACTIONS, seed=11)[0]
    shield = _shield(oracle, FixedOpponents(model))
    shield.opponent_weight = weight
    shield.reset(copies, 0)
    obs = _states(env, copies, seed=5)
    rng = np.random.default_rng(6)
    proposed = rng.integers(0, N_ACTIONS, size=(copies, N_AGENTS))
    logits = torch.randn(copies, N_AGENTS, N_ACTIONS, generator=torch.Generator().manual_seed(4))
    executed, intervened = shield.filter(obs, proposed, logits, np.ones(copies, dtype=np.int64))

    p = (1 - weight) * model.double().numpy() + weight / N_ACTIONS
    rho = _by_hand(oracle, obs, p)
    allowance = shield.allowance
    expected = proposed.copy()
    fallback = np.zeros(copies, dtype=bool)
    for e, i in itertools.product(range(copies), range(N_AGENTS)):
        own, mine = rho[e, i], proposed[e, i]
        if own[mine] <= allowance:
            continue
        # Allowed: the risk added over the agent's safest action is within the allowance.
        allowed = [b for b in range(N_ACTIONS) if own[b] - own.min() <= allowance]
        if mine not in allowed:
            expected[e, i] = max(allowed, key=lambda b: float(logits[e, i, b]))
            fallback[e] |= len(allowed) == 1
    np.testing.assert_array_equal(executed, expected)
    np.testing.assert_array_equal(intervened, expected != proposed)
    taken = np.take_along_axis(rho, executed[:, :, None], axis=2)[:, :, 0]
    np.testing.assert_allclose(shield.last.raw, taken.max(axis=1), atol=1e-6)
    assert 0 < intervened.sum() < intervened.size  # some proposals kept, some changed
    np.testing.assert_array_equal(shield.last.fallback, fallback)
    # The others' share of the risk is not the agent's to offset: proposals whose own risk is
    # over the allowance but whose added risk is within it are kept (the case is exercised).
    assert ((taken > allowance) & (executed == proposed)).any()


def test_the_common_plan_is_the_predicted_joint_action_or_the_descent_from_it():
    copies = 300
    env = _env(copies)
    oracle = ExactQ(env)
    model = _probs(1, N_AGENTS, N_ACTIONS, seed=11)[0]
    obs = _states(env, copies, seed=5)
    rng = np.random.default_rng(6)
    logits = torch.randn(copies, N_AGENTS, N_ACTIONS, generator=torch.Generator().manual_seed(4))
    steps = np.ones(copies, dtype=np.int64)
    joint = torch.from_numpy(obs.reshape(copies, -1))
    alone = _shield(oracle, FixedOpponents(model))
    plan = _shield(oracle, FixedOpponents(model), common_plan=True)
    start = np.broadcast_to(model.argmax(dim=-1).numpy(), (copies, N_AGENTS))
    risky = oracle.q_star(joint, torch.from_numpy(np.ascontiguousarray(start))) > plan.allowance
    assert 0 < risky.sum() < copies  # both cases are exercised
    runs = []
    for proposed in (rng.integers(0, N_ACTIONS, size=(copies, N_AGENTS)) for _ in range(2)):
        alone.reset(copies, 0)
        plan.reset(copies, 0)
        without, _ = alone.filter(obs, proposed, logits, steps)
        executed, _ = plan.filter(obs, proposed, logits, steps)
        # Elsewhere, where the predicted joint action is within the allowance, an agent keeps
        # a proposal whose expected risk is within it and otherwise executes its part of the
        # predicted joint action, not its likeliest action of acceptable excess risk.
        p = (1 - plan.opponent_weight) * model.double().numpy() + plan.opponent_weight / N_ACTIONS
        rho = _by_hand(oracle, obs, p)
        own = np.take_along_axis(rho, proposed[:, :, None], axis=2)[:, :, 0]
        expected = np.where(own <= plan.allowance, proposed, start)
        np.testing.assert_array_equal(executed[~risky], expected[~risky])
        taken = np.take_along_axis(rho, expected[:, :, None], axis=2)[:, :, 0].max(axis=1)
        np.testing.assert_allclose(plan.last.raw[~risky], taken[~risky], atol=1e-6)
        kept = own <= plan.allowance
        assert (~kept[~risky]).any() and kept[~risky].any()  # both cases are exercised
        assert (executed[~risky] != without[~risky]).any()  # the rule differs from deciding alone
        runs.append((executed, plan.last))
    (first, last), (second, _) = runs
    # The plan is the agents' common knowledge: whatever they propose, the same joint action.
    np.testing.assert_array_equal(first[risky], second[risky])
    q = oracle.q_star(joint, torch.from_numpy(first))
    start_q = oracle.q_star(joint, torch.from_numpy(np.ascontiguousarray(start)))
    np.testing.assert_allclose(last.raw[risky], q[risky], atol=1e-6)
    assert (q[risky] <= start_q[risky] + 1e-9).all()
    np.testing.assert_array_equal(last.fallback[risky], q[risky] > plan.allowance)
    assert (q[risky] <= plan.allowance).any()  # the plan finds a joint action within it


def test_own_action_risk_is_the_weighted_mean_of_the_judged_risks() -> None:
    completions = torch.tensor([[[[0, 1], [0, 2]], [[3, 0], [4, 0]]]])  # [1, 2, 2, 2]
    weights = torch.tensor([[[0.25, 0.75], [0.5, 0.5]]], dtype=torch.float64)

    def risk(copies: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
        return (options[:, 0] * 10 + options[:, 1]).double() / 100  # any function of a

    rho = own_action_risk(
        risk,
        completions,
        weights,
        torch.tensor([0, 0]),
        torch.tensor([0, 1]),
        torch.tensor([[1, 2], [0, 1]]),
    )
    expected = [
        [0.25 * 0.11 + 0.75 * 0.12, 0.25 * 0.21 + 0.75 * 0.22],  # agent 0 takes 1, 2
        [0.5 * 0.30 + 0.5 * 0.40, 0.5 * 0.31 + 0.5 * 0.41],  # agent 1 takes 0, 1
    ]
    np.testing.assert_allclose(rho.numpy(), expected, atol=1e-12)


def test_own_action_risk_judges_each_distinct_joint_action_of_a_copy_once() -> None:
    # Copy 0: both agents' completions repeat, and agent 0 taking 1 against agent 1's 2 is the
    # joint action (1, 2) that agent 1 judges too; copy 1 asks for the same joint actions.
    completions = torch.tensor([[[[0, 2], [0, 2], [0, 0]], [[1, 0], [1, 0], [1, 0]]]] * 2)
    weights = torch.tensor([[[0.25, 0.25, 0.5], [0.2, 0.3, 0.5]]] * 2, dtype=torch.float64)
    judged: list[tuple[int, tuple[int, ...]]] = []

    def risk(copies: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
        judged.extend((int(c), tuple(o.tolist())) for c, o in zip(copies, options, strict=True))
        return (options[:, 0] * 10 + options[:, 1] + copies * 100).double() / 1000

    copies, agents = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
    own = torch.tensor([[1], [2], [1], [2]])
    rho = own_action_risk(risk, completions, weights, copies, agents, own)
    # Every (copy, agent) row asks for (own, 2), (own, 2), (own, 0) or (1, own) three times;
    # a joint action's q does not depend on which agent asks.
    assert len(judged) == len(set(judged))  # nothing judged twice
    assert set(judged) == {(c, a) for c in (0, 1) for a in ((1, 2), (1, 0))}
    for row, (c, i) in enumerate(zip(copies.tolist(), agents.tolist(), strict=True)):
        options = [((1, j) if i == 0 else (j, 2)) for j in completions[c, i, :, 1 - i].tolist()]
        q = [(10 * x + y + 100 * c) / 1000 for x, y in options]
        assert rho[row, 0].item() == pytest.approx(float(np.dot(q, weights[c, i].numpy())))


def test_own_action_risk_judges_blocks_of_consecutive_copies_with_the_numbers_of_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(7, 3, 4, generator=gen)
    completions, weights = opponent_completions(probs, samples=5, generator=gen)  # sampled
    copies = torch.arange(7).repeat_interleave(3)
    agents = torch.arange(3).repeat(7)
    own = torch.randint(0, 4, (21, 4), generator=gen)
    calls: list[torch.Tensor] = []

    def risk(c: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
        calls.append(c)
        return torch.sin(c * 7.0 + (options * torch.tensor([16, 4, 1])).sum(dim=1)).double()

    rho = {}
    for block in (10**6, 12):
        monkeypatch.setattr(decentral, "JUDGED_BLOCK", block)
        calls.clear()
        rho[block] = own_action_risk(risk, completions, weights, copies, agents, own)
    assert torch.equal(rho[12], rho[10**6])
    sizes = [len(c) for c in calls]
    assert len(sizes) > 2 and set(sizes[:-1]) == {12} and 12 <= sizes[-1] < 24
    # Each block's copies are consecutive: in order, so that their states form a span.
    assert all(bool((c[1:] >= c[:-1]).all()) for c in calls)
    assert torch.equal(torch.cat(calls), torch.sort(torch.cat(calls)).values)


def test_tile_span_widens_rows_to_the_kernels_tiles_and_to_two_rows() -> None:
    assert ROW_TILE == 12
    assert tile_span(0, 5, 100) == (0, 12)
    assert tile_span(13, 30, 100) == (12, 36)
    assert tile_span(95, 99, 100) == (84, 100)
    assert tile_span(96, 97, 97) == (84, 97)  # one row: the tile before it too
    assert tile_span(0, 1, 1) == (0, 1)
    rng = np.random.default_rng(0)
    for _ in range(200):
        total = int(rng.integers(1, 60))
        low = int(rng.integers(0, total))
        high = int(rng.integers(low + 1, total + 1))
        start, stop = tile_span(low, high, total)
        assert start <= low < high <= stop <= total and start % ROW_TILE == 0
        assert stop % ROW_TILE == 0 or stop == total
        assert stop - start >= min(2, total)


def test_row_keys_are_equal_exactly_for_equal_rows_also_beyond_an_int64() -> None:
    rows = torch.tensor([[3, 1, 2], [0, 4, 4], [3, 1, 2], [0, 4, 3]])
    for wide in (rows, torch.cat([rows, rows * 10**6, rows * 10**7], dim=1)):
        keys = _row_keys(wide).tolist()
        for x in range(len(wide)):
            for y in range(len(wide)):
                assert (keys[x] == keys[y]) == bool((wide[x] == wide[y]).all())


def test_decentralised_coordination_needs_an_opponent_model_and_two_agents():
    env = _env(1)
    config = shield_config(coordination="decentralised")
    with pytest.raises(ValueError, match="opponent model"):
        BudgetShield(
            config=config,
            world_model=ExactQ(env),
            critic=_critic(),
            n_agents=N_AGENTS,
            obs_dim=model_obs_dim(),
            n_actions=N_ACTIONS,
        )
    config.check_against(n_agents=2, max_steps=100)
    with pytest.raises(ValueError, match="n_agents=1: must be at least 2 for coordination"):
        config.check_against(n_agents=1, max_steps=100)
    with pytest.raises(ValueError, match="coordination"):
        shield_config(coordination="anarchic")


def test_the_common_plan_is_read_by_the_decentralised_shield_on_discrete_actions_only():
    plan = shield_config(coordination="decentralised", common_plan=True)
    plan.check_against(n_agents=2, max_steps=100)
    assert plan.to_dict()["common_plan"] is True
    for config, box in ((shield_config(common_plan=True), False), (plan, True)):
        with pytest.raises(ValueError, match="common_plan=True: must be false unless"):
            config.check_against(n_agents=2, max_steps=100, box=box)
    # Off, it is not recorded: a run config is what it was before the option, and a record
    # without it reads it off.
    off = shield_config(coordination="decentralised")
    assert "common_plan" not in off.to_dict() and "common_plan" not in off.tunables()
    assert plan.tunables()["common_plan"] is True
    for params in ({}, {"common_plan": True}, {"common_plan": False}):
        run = RunConfig.from_dict(make_run_config(algo="shield_dec", algo_params=params))
        record = run.to_dict()
        assert ("common_plan" in record["sections"]["shield"]) == bool(params.get("common_plan"))
        again = RunConfig.from_dict(record)
        assert again.shield.common_plan == bool(params.get("common_plan"))
        assert again.to_dict() == record


def test_shield_dec_is_the_shield_with_decentralised_coordination_fixed():
    def config(**params: object) -> RunConfig:
        return RunConfig.from_dict(make_run_config(algo="shield_dec", algo_params=params))

    assert config().shield.coordination == "decentralised"
    assert config(opponent_samples=8).shield.opponent_samples == 8
    with pytest.raises(ConfigError, match="shield_dec fixes coordination='decentralised'"):
        config(coordination="central")
    # The critic continues with the team's safest actions: there is no other continuation.
    with pytest.raises(ConfigError, match=r"\['continuation'\]: unknown for shield_dec"):
        config(continuation="team")
    central = RunConfig.from_dict(make_run_config(algo="shield"))
    assert central.shield.coordination == "central"
