"""World model, opponent model, replay, the opponent mixing weight and the shield's config."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algos.shield.opponent_model import (
    OM_VERSIONS,
    OpponentModel,
    floor_weight,
    make_opponent_model,
    opponent_weight,
)
from src.algos.shield.replay import TransitionReplay
from src.algos.shield.world_model import WM_VERSIONS, WorldModel, make_world_model
from src.checks import ConfigError
from src.config.run import RunConfig, make_run_config
from src.config.shield import RETIRED_KEYS, ShieldConfig
from tests.algos.shield.shield_toys import N_ACTIONS, N_AGENTS, OBS_DIM, TinyGrid, shield_config

CONFIG = shield_config(
    shield_opponent_mode="monotone_floor",
    ensemble_size=3,
    wm_hidden=(64, 64),
    wm_learning_rate=3e-3,
    om_learning_rate=1e-2,
)


def grid_replay(n: int, seed: int, *, opponent_rule: bool = False) -> TransitionReplay:
    """Random transitions of the tiny grid; with opponent_rule agent actions follow obs."""
    grid = TinyGrid()
    rng = np.random.default_rng(seed)
    free = np.argwhere(~grid.hazard)
    pos = free[np.stack([rng.choice(len(free), 2, replace=False) for _ in range(n)])]
    action = rng.integers(0, N_ACTIONS, size=(n, N_AGENTS))
    if opponent_rule:
        # Each agent moves right if x < 2, else up: a function of its own observation.
        action = np.where(pos[..., 0] < 2, 4, 1)
    new = grid.move(pos, action)
    replay = TransitionReplay(
        capacity=2 * n, n_agents=N_AGENTS, obs_dim=OBS_DIM, valid_fraction=0.2, seed=seed
    )
    replay.add(
        obs=torch.from_numpy(grid.observe(pos).reshape(n, -1)),
        action=torch.from_numpy(action),
        next_obs=torch.from_numpy(grid.observe(new).reshape(n, -1)),
        cost=torch.from_numpy(grid.cost(new)),
        done=torch.zeros(n),
    )
    return replay


@pytest.mark.parametrize("version", sorted(WM_VERSIONS))
def test_world_model_learns_the_grid(version):
    replay = grid_replay(3000, 0)
    model = make_world_model(
        version, n_agents=N_AGENTS, obs_dim=OBS_DIM, n_actions=N_ACTIONS, config=CONFIG, seed=0
    )
    assert isinstance(model, WorldModel)
    gen = torch.Generator().manual_seed(0)
    first = model.fit(replay, n_samples=256, batch_size=256, max_valid=4096, generator=gen)
    last = first
    for _ in range(6):
        last = model.fit(replay, n_samples=20_000, batch_size=256, max_valid=4096, generator=gen)
    assert last["valid_loss"] < 0.5 * first["valid_loss"]
    # It predicts the team's risk: some agent's cost > 0.
    columns = model.cost_dim
    costs = replay.valid.cost[: replay.valid.size]
    base_rate = float(costs.amax(dim=1).mean())
    # Better than always predicting "no cost".
    assert last["cost_accuracy"] > 1.0 - base_rate + 0.3 * base_rate
    # Predictions have the protocol's shapes; next positions are close to the truth.
    rows = replay.valid.latest(200)
    with torch.no_grad():
        m = model.ensemble_size
        obs = rows["obs"][: 198 // m * m].reshape(m, -1, N_AGENTS * OBS_DIM)
        act = rows["action"][: 198 // m * m].reshape(m, -1, N_AGENTS)
        nxt, cost, done = model.predict(obs, act)
    assert nxt.shape == obs.shape and cost.shape == (*obs.shape[:2], columns)
    assert done.shape == obs.shape[:2]
    truth = rows["next_obs"][: 198 // m * m].reshape(m, -1, N_AGENTS * OBS_DIM)
    assert float((nxt - truth).abs().mean()) < 0.25


def test_fast_inference_path_matches_the_plain_one_after_every_fit():
    """The dynamics' inference path folds the normalisations into cached weights and reuses
    buffers."""
    replay = grid_replay(600, 2)
    model = make_world_model(
        "v0", n_agents=N_AGENTS, obs_dim=OBS_DIM, n_actions=N_ACTIONS, config=CONFIG, seed=1
    )
    gen = torch.Generator().manual_seed(0)
    rows = replay.train.latest(99)
    obs = rows["obs"].reshape(3, 33, -1)
    act = rows["action"].reshape(3, 33, -1)
    for _ in range(3):
        model.fit(replay, n_samples=512, batch_size=64, max_valid=100, generator=gen)
        with torch.no_grad():
            plain = model.predict(obs, act)
        with torch.inference_mode():
            fast = [t.clone() for t in model.predict(obs, act)]
            # Feeding the prediction back in (the shield's loop) reuses the buffer in place.
            again = model.predict(model.predict(obs, act)[0], act)[0].clone()
        with torch.no_grad():
            twice = model.predict(model.predict(obs, act)[0], act)[0]
        for x, y in zip(plain, fast, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(again, twice, rtol=1e-5, atol=1e-5)


def test_world_model_is_seeded_and_checks_shapes():
    kwargs = {"n_agents": N_AGENTS, "obs_dim": OBS_DIM, "n_actions": N_ACTIONS, "config": CONFIG}
    a = make_world_model("v0", **kwargs, seed=3)
    b = make_world_model("v0", **kwargs, seed=3)
    c = make_world_model("v0", **kwargs, seed=4)
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a.dynamics.weights[0], c.dynamics.weights[0])
    assert not torch.equal(a.costs.weights[0], c.costs.weights[0])
    with pytest.raises(ValueError, match="joint_obs"):
        a.predict(torch.zeros(1, 4, N_AGENTS * OBS_DIM), torch.zeros(1, 4, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="wm_version"):
        make_world_model("v9", **kwargs, seed=0)


def test_world_model_fit_on_empty_replay_reports_nan():
    replay = TransitionReplay(capacity=10, n_agents=2, obs_dim=OBS_DIM, valid_fraction=0.5, seed=0)
    model = make_world_model("v0", n_agents=2, obs_dim=OBS_DIM, n_actions=5, config=CONFIG, seed=0)
    out = model.fit(replay, n_samples=10, batch_size=4, max_valid=10, generator=torch.Generator())
    assert all(math.isnan(v) for v in out.values())


@pytest.mark.parametrize("version", sorted(OM_VERSIONS))
def test_opponent_model_learns_a_rule_of_the_observation(version):
    replay = grid_replay(2000, 1, opponent_rule=True)
    model = make_opponent_model(
        version, n_agents=N_AGENTS, obs_dim=OBS_DIM, n_actions=N_ACTIONS, config=CONFIG, seed=0
    )
    assert isinstance(model, OpponentModel)
    gen = torch.Generator().manual_seed(0)
    first = model.fit(replay, n_samples=64, batch_size=64, max_valid=4096, generator=gen)
    last = model.fit(replay, n_samples=40_000, batch_size=128, max_valid=4096, generator=gen)
    assert last["valid_accuracy"] > 0.95
    assert last["valid_loss"] < first["valid_loss"]
    joint = replay.valid.latest(50)["obs"]
    probs = model.probs(joint)
    assert probs.shape == (50, N_AGENTS, N_ACTIONS)
    torch.testing.assert_close(probs.sum(-1), torch.ones(50, N_AGENTS))
    # The joint evaluation (per-agent bias, strided slices, workspace) equals the plain one.
    per_agent = torch.softmax(
        model.logits(joint.reshape(100, OBS_DIM), torch.arange(2).repeat(50)), -1
    ).reshape(50, N_AGENTS, N_ACTIONS)
    with torch.inference_mode():
        fast = model.probs(joint).clone()
    torch.testing.assert_close(probs, per_agent.detach())
    torch.testing.assert_close(fast, per_agent.detach())
    # monotone_floor lowers its uniform weight as the model earns trust.
    weight = opponent_weight("monotone_floor", 1.0, valid_loss=last["valid_loss"], n_actions=5)
    assert weight < 0.2


def test_opponent_weight_modes():
    assert opponent_weight("model", 0.7, valid_loss=1.0, n_actions=5) == 0.0
    assert opponent_weight("uniform", 0.1, valid_loss=0.0, n_actions=5) == 1.0
    assert floor_weight(1.0, valid_loss=math.log(5), n_actions=5) == 1.0
    assert floor_weight(1.0, valid_loss=0.0, n_actions=5) == 0.0
    assert floor_weight(0.3, valid_loss=float("nan"), n_actions=5) == 0.3
    with pytest.raises(ValueError, match="shield_opponent_mode"):
        opponent_weight("trusting", 1.0, valid_loss=0.1, n_actions=5)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 5.0) | st.just(float("nan")), min_size=1, max_size=30))
def test_monotone_floor_weight_never_increases(losses):
    w = 1.0
    for loss in losses:
        new = floor_weight(w, valid_loss=loss, n_actions=4)
        assert 0.0 <= new <= w
        w = new


def test_replay_split_ring_and_state_roundtrip():
    replay = TransitionReplay(capacity=100, n_agents=2, obs_dim=3, valid_fraction=0.25, seed=0)
    assert replay.valid.capacity == 25 and replay.train.capacity == 75
    for i in range(30):
        e = 10
        value = torch.arange(i * e, (i + 1) * e, dtype=torch.float32)
        replay.add(
            obs=value[:, None].expand(e, 6),
            action=torch.zeros(e, 2, dtype=torch.int64),
            next_obs=value[:, None].expand(e, 6) + 1,
            cost=torch.zeros(e, 2),
            done=torch.zeros(e),
        )
    assert replay.train.size == 75 and replay.valid.size == 25
    # The rings hold the most recent rows: nothing older than the last ~150 of 300.
    assert float(replay.train.obs[:, 0].min()) > 100
    clone = TransitionReplay(capacity=100, n_agents=2, obs_dim=3, valid_fraction=0.25, seed=9)
    clone.load_state_dict(replay.state_dict())
    for name in ("obs", "action", "next_obs", "cost", "done"):
        assert torch.equal(getattr(clone.train, name), getattr(replay.train, name))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(clone.sample_train((4,), g1)["obs"], replay.sample_train((4,), g2)["obs"])
    with pytest.raises(ValueError, match="obs"):
        replay.add(
            obs=torch.zeros(2, 5),
            action=torch.zeros(2, 2, dtype=torch.int64),
            next_obs=torch.zeros(2, 6),
            cost=torch.zeros(2, 2),
            done=torch.zeros(2),
        )


def test_validation_fraction_is_respected():
    replay = TransitionReplay(capacity=10_000, n_agents=1, obs_dim=1, valid_fraction=0.1, seed=0)
    n = 5000
    replay.add(
        obs=torch.zeros(n, 1),
        action=torch.zeros(n, 1, dtype=torch.int64),
        next_obs=torch.zeros(n, 1),
        cost=torch.zeros(n, 1),
        done=torch.zeros(n),
    )
    assert abs(replay.valid.size / n - 0.1) < 0.02


def test_shield_config_rejects_bad_values():
    # Base-config knobs are checked by create_base_config, tunable fields by ShieldConfig, and
    # the versions against their registries: each once, all through RunConfig.from_dict.
    for key, bad in (
        ("max_risk", 1.5),
        ("shield_reward_mode", "median"),
        ("shield_credible_schedule", "geometric"),
        ("shield_opponent_mode", "trusting"),
        ("wm_version", "v9"),
        ("shield_patience", -1),
    ):
        with pytest.raises(ValueError, match=key):
            RunConfig.from_dict(make_run_config(algo="shield", **{key: bad}))
    for key, bad in (
        ("horizon", 0),
        ("wm_hidden", []),
        ("valid_fraction", 1.0),
        ("imitation", -0.5),
    ):
        with pytest.raises(ValueError, match=key):
            ShieldConfig(**{**CONFIG.to_dict(), key: bad})
        with pytest.raises(ValueError, match=key):
            RunConfig.from_dict(make_run_config(algo="shield", algo_params={key: bad}))
    config = RunConfig.from_dict(
        make_run_config(algo="shield", algo_params={"horizon": 7, "gamma": 0.9})
    )
    assert config.shield.horizon == 7
    assert config.ppo.gamma == 0.9


@pytest.mark.parametrize("key", sorted(RETIRED_KEYS))
def test_a_removed_shield_key_is_refused_in_one_line_naming_it(key: str) -> None:
    """The options that lost on measurement are gone with their keys (docs/design.md, 6.3): a
    run config that sets one, even to the behaviour that stayed, is refused naming it as
    removed with what became of it; an algorithm without a shield never had it."""
    kept = {"risk_scope": "receding", "search": "coordinate", "backup": "coordinate"}
    for algo in ("shield", "shield_dec"):
        with pytest.raises(ConfigError) as refused:
            RunConfig.from_dict(make_run_config(algo=algo, algo_params={key: kept.get(key, 1)}))
        assert str(refused.value) == (
            f"algo_params=['{key}']: removed from the shield: {key} ({RETIRED_KEYS[key]})"
        )
    with pytest.raises(ConfigError, match=rf"^algo_params=\['{key}'\]: unknown for ippo;"):
        RunConfig.from_dict(make_run_config(algo="ippo", algo_params={key: kept.get(key, 1)}))
    assert key not in ShieldConfig.tunable_names()


def test_removed_shield_keys_are_named_before_unknown_ones() -> None:
    given = {"lookahead": 1, "search": "coordinate", "horizn": 5}
    with pytest.raises(ConfigError) as refused:
        RunConfig.from_dict(make_run_config(algo="shield", algo_params=given))
    assert str(refused.value) == (
        "algo_params=['lookahead', 'search']: removed from the shield: "
        f"lookahead ({RETIRED_KEYS['lookahead']}); search ({RETIRED_KEYS['search']})"
    )


@pytest.mark.parametrize(
    ("key", "value", "default"),
    [
        ("shield_reward_mode", "frequentist", "bayesian"),
        ("shield_reward_mode", "mean", "bayesian"),
        ("shield_credible_schedule", "constant", "summable"),
    ],
)
def test_a_knob_no_shield_decides_by_takes_its_default_only(
    key: str, value: str, default: str
) -> None:
    """create_base_config still takes the key, with its default; another value is refused in
    one line naming the key and the value, through the API and a recorded run config alike."""
    config = make_run_config(algo="shield")
    assert config[key] == default
    assert RunConfig.from_dict(config).shield.to_dict()[key] == default
    message = f"{key}={value!r}: no shield version decides by another value"
    for build in (
        lambda: make_run_config(algo="shield", **{key: value}),
        lambda: make_run_config(algo="ippo", **{key: value}),
        lambda: RunConfig.from_dict({**config, key: value}),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)) as refused:
            build()
        assert "\n" not in str(refused.value)
        assert f"leave it at {default!r} or remove it" in str(refused.value)


def test_replay_moments_follow_the_rows_held_through_wrap_and_reload():
    gen = torch.Generator().manual_seed(3)
    replay = TransitionReplay(capacity=40, n_agents=2, obs_dim=3, valid_fraction=0.25, seed=0)
    for _ in range(11):  # 77 rows into rings of 30 and 10: both wrap around
        obs = torch.randn(7, 6, generator=gen) * 3 + 1
        next_obs = obs + torch.randn(7, 6, generator=gen)
        replay.add(
            obs=obs,
            action=torch.zeros(7, 2, dtype=torch.int64),
            next_obs=next_obs,
            cost=torch.zeros(7, 2),
            done=torch.zeros(7),
        )
    ring = replay.train
    rows = ring.latest(ring.size)
    assert ring.size == ring.capacity
    for name, values in (
        ("obs", rows["obs"]),
        ("next_obs", rows["next_obs"]),
        ("delta", rows["next_obs"] - rows["obs"]),
    ):
        mean, std = ring.moments(name).mean_std()
        torch.testing.assert_close(mean, values.mean(dim=0), atol=1e-5, rtol=0)
        torch.testing.assert_close(std, values.std(dim=0, unbiased=False), atol=1e-5, rtol=0)
    # Each agent's observation as a row of one agent's: the pooled moments.
    mean, std = ring.moments("obs").pooled(3).mean_std()
    per_agent = rows["obs"].view(-1, 3)
    torch.testing.assert_close(mean, per_agent.mean(dim=0), atol=1e-5, rtol=0)
    torch.testing.assert_close(std, per_agent.std(dim=0, unbiased=False), atol=1e-5, rtol=0)
    # A constant feature keeps scale 1.
    const = ring.moments("obs")
    const = type(const)(
        const.count, torch.full((6,), 2.0 * const.count), torch.full((6,), 4.0 * const.count)
    )
    assert const.mean_std()[1].tolist() == [1.0] * 6
    # A restored replay recounts what it holds.
    again = TransitionReplay(capacity=40, n_agents=2, obs_dim=3, valid_fraction=0.25, seed=0)
    again.load_state_dict(replay.state_dict())
    for name in ("obs", "next_obs", "delta"):
        torch.testing.assert_close(
            again.train.moments(name).total, ring.moments(name).total, atol=1e-9, rtol=0
        )


def test_predict_options_matches_predict_on_repeated_states():
    """The per-state first layers give the numbers the full layers give every (state, option)."""
    from src.algos.shield.world_model import TeamWorldModel, predict_options

    model = TeamWorldModel(
        n_agents=3,
        obs_dim=5,
        n_actions=4,
        ensemble_size=2,
        hidden=(16, 16),
        learning_rate=1e-3,
        seed=0,
    )
    gen = torch.Generator().manual_seed(1)
    # Normalisations away from the identity, so that their folding is exercised too.
    for buffer in (model.dynamics.obs_mean, model.dynamics.delta_mean, model.costs.obs_mean):
        buffer.copy_(torch.randn(buffer.shape, generator=gen))
    for buffer in (model.dynamics.obs_std, model.dynamics.delta_std, model.costs.obs_std):
        buffer.copy_(torch.rand(buffer.shape, generator=gen) + 0.5)
    obs = torch.randn(2, 6, 15, generator=gen)
    options = torch.randint(0, 4, (2, 6, 7, 3), generator=gen)
    with torch.no_grad():
        flat_obs = obs.unsqueeze(2).expand(2, 6, 7, 15).reshape(2, 42, 15)
        next_obs, risk, done = model.predict(flat_obs, options.reshape(2, 42, 3))
        fast = predict_options(model, obs, options)
    torch.testing.assert_close(fast[0], next_obs.view(2, 6, 7, 15), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast[1], risk.view(2, 6, 7), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fast[2], done.view(2, 6, 7), atol=1e-6, rtol=1e-5)
    # A model with `predict` only goes through the same function by repeating the states.

    class PredictOnly:
        ensemble_size = 2

        def predict(self, joint_obs, joint_action):
            return model.predict(joint_obs, joint_action)

    with torch.no_grad():
        generic = predict_options(PredictOnly(), obs, options)
    for a, b in zip(fast, generic, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_option_q_is_the_critic_on_the_predicted_successors():
    """The critic's first layer composed with the world model's output layer gives the numbers
    of predicting s' and valuing it, for the live and the target net, and follows every change
    of either model (no stale cache)."""
    from src.algos.shield.critic import RiskCritic
    from src.algos.shield.world_model import TeamWorldModel, predict_options

    dims = {"n_agents": 3, "obs_dim": 5, "n_actions": 4, "ensemble_size": 2}
    model = TeamWorldModel(**dims, hidden=(16, 16), learning_rate=1e-3, seed=0)
    critic = RiskCritic(**dims, hidden=(8, 8), learning_rate=1e-3, tau=0.1, horizon=10, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in (*model.parameters(), *critic.parameters(), *critic.target.parameters()):
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    for buffer in (model.dynamics.obs_mean, model.dynamics.delta_mean, critic.obs_mean):
        buffer.copy_(torch.randn(buffer.shape, generator=gen))
    for buffer in (model.dynamics.obs_std, model.dynamics.delta_std, critic.obs_std):
        buffer.copy_(torch.rand(buffer.shape, generator=gen) + 0.5)
    obs = torch.randn(2, 6, 15, generator=gen)
    options = torch.randint(0, 4, (2, 6, 7, 3), generator=gen)
    left = torch.randint(-1, 10, (2, 6), generator=gen).float()  # h <= 0 values nothing

    def valued(target: bool) -> torch.Tensor:
        next_obs, risk, done = predict_options(model, obs, options)
        after = left.unsqueeze(2).expand(2, 6, 7).reshape(2, 42)
        net = critic.target if target else critic.members
        value = critic._values(net, next_obs.reshape(2, 42, 15), after).view(2, 6, 7)
        expected = risk + (1.0 - risk) * (1.0 - done) * value
        generic = critic.valued_successors(model, obs, options, left, target=target)
        torch.testing.assert_close(generic, expected, atol=0, rtol=0)
        return expected

    def check() -> torch.Tensor:
        with torch.inference_mode():
            for target in (False, True):
                q = critic.option_q(model, obs, options, left, target=target)
                torch.testing.assert_close(q, valued(target), atol=1e-6, rtol=1e-5)
            return critic.option_q(model, obs, options, left).clone()

    before = check()
    with torch.no_grad():
        model.dynamics.weights[-1].add_(0.5)  # the world model's output layer moves
    moved = check()
    critic.obs_std.mul_(1.5)  # the critic's normalisation moves
    rescaled = check()
    with torch.no_grad():
        model.costs.weights[-1].add_(0.5)  # the cost model moves
    costlier = check()
    model.costs.obs_std.mul_(1.5)  # and its normalisation
    renormalised = check()
    steps = [before, moved, rescaled, costlier, renormalised]
    assert all(not torch.equal(a, b) for a, b in itertools.pairwise(steps))


def test_selected_rows_is_the_one_hot_product():
    from src.algos.shield.ensemble import selected_rows

    gen = torch.Generator().manual_seed(0)
    table = torch.randn(3, 10, 4, generator=gen)
    index = torch.randint(0, 10, (3, 5, 2), generator=gen)
    one_hot = torch.nn.functional.one_hot(index, 10).sum(dim=-2).float()  # [3, 5, 10]
    torch.testing.assert_close(selected_rows(table, index), torch.bmm(one_hot, table))


def test_selected_rows_and_state_adds_the_states_row_in_the_same_pass():
    from src.algos.shield.ensemble import selected_rows, selected_rows_and_state

    gen = torch.Generator().manual_seed(0)
    table = torch.randn(3, 10, 4, generator=gen)
    states = torch.randn(3, 6, 4, generator=gen)
    index = torch.randint(0, 10, (3, 5, 2, 3), generator=gen)
    state_row = torch.randint(0, 6, (3, 5, 1), generator=gen)  # one state per row of options
    fused = selected_rows_and_state(table, index, states, state_row)
    picked = states[torch.arange(3).view(3, 1, 1), state_row.expand(3, 5, 2)]
    # The same sums as adding the state's row afterwards, to the last bit.
    assert torch.equal(fused, selected_rows(table, index) + picked)
    # The same rows for every member: given once (a member dimension of 1), as for all.
    shared, row = index[:1], state_row[:1]
    once = selected_rows_and_state(table, shared, states, row)
    every = selected_rows_and_state(
        table, shared.expand(3, -1, -1, -1), states, row.expand(3, -1, -1)
    )
    assert torch.equal(once, every)


def _perturbed_models(seed: int) -> tuple[Any, Any, torch.Generator]:
    """A 3-agent TeamWorldModel and RiskCritic with every weight, the target net's too, moved
    off its start by draws from a generator seeded `seed`; the generator is returned for the
    test's further draws."""
    from src.algos.shield.critic import RiskCritic
    from src.algos.shield.world_model import TeamWorldModel

    dims = {"n_agents": 3, "obs_dim": 5, "n_actions": 4, "ensemble_size": 2}
    model = TeamWorldModel(**dims, hidden=(16, 16), learning_rate=1e-3, seed=0)
    critic = RiskCritic(**dims, hidden=(8, 8), learning_rate=1e-3, tau=0.1, horizon=10, seed=1)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in (*model.parameters(), *critic.parameters(), *critic.target.parameters()):
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model, critic, gen


def test_option_q_of_rows_that_share_states_is_option_q_of_those_states():
    """`state_index`: rows of options whose states are computed once give the numbers of the
    same rows with their states repeated, each row with its own steps left; also through a
    world model without the composed layers (the gathered definition)."""
    model, critic, gen = _perturbed_models(3)
    obs = torch.randn(2, 4, 15, generator=gen)
    state_index = torch.tensor([2, 0, 2, 3, 3, 3, 1])  # state 2 twice, 3 three times
    options = torch.randint(0, 4, (2, 7, 5, 3), generator=gen)
    left = torch.randint(0, 10, (2, 7), generator=gen).float()

    class PredictOnly:  # the world model's interface without its layers
        ensemble_size = 2

        def predict(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return model.predict(*args)

    with torch.inference_mode():
        repeated = critic.option_q(model, obs[:, state_index], options, left)
        shared = critic.option_q(model, obs, options, left, state_index=state_index)
        torch.testing.assert_close(shared, repeated, atol=1e-6, rtol=1e-5)
        generic = critic.option_q(PredictOnly(), obs, options, left, state_index=state_index)
        torch.testing.assert_close(generic, repeated, atol=1e-6, rtol=1e-5)
        elsewhere = critic.option_q(model, obs[:, state_index - 1], options, left)
        assert not torch.allclose(shared, elsewhere)  # the states matter
