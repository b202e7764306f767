"""Hand-computed checks of the shared PPO maths."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algos.maths import (
    centre,
    compute_gae,
    explained_variance,
    normalise,
    ppo_clip_loss,
    value_loss,
)


def test_gae_three_steps_with_truncation_and_termination():
    # step 0 continues, step 1 is truncated (bootstrap from V(final obs) = 4), step 2 terminates
    # (its next value 9 must be ignored). gamma = 0.9, lambda = 0.8.
    #   delta = [1 + 0.9 * 1 - 0.5, 2 + 0.9 * 4 - 1, 3 - 1.5] = [1.4, 4.6, 1.5]
    #   A2 = 1.5; A1 = 4.6 (no recursion across the truncation); A0 = 1.4 + 0.72 * 4.6 = 4.712
    adv, ret = compute_gae(
        rewards=torch.tensor([1.0, 2.0, 3.0]),
        values=torch.tensor([0.5, 1.0, 1.5]),
        next_values=torch.tensor([1.0, 4.0, 9.0]),
        terminated=torch.tensor([False, False, True]),
        truncated=torch.tensor([False, True, False]),
        gamma=0.9,
        gae_lambda=0.8,
    )
    torch.testing.assert_close(adv, torch.tensor([4.712, 4.6, 1.5]))
    torch.testing.assert_close(ret, torch.tensor([5.212, 5.6, 3.0]))


def test_gae_is_elementwise_over_trailing_dims_and_not_normalised():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 5.0]])  # [T=2, E=2]
    zeros = torch.zeros(2, 2)
    flags = torch.zeros(2, 2, dtype=torch.bool)
    adv, _ = compute_gae(
        rewards=rewards,
        values=zeros,
        next_values=zeros,
        terminated=flags,
        truncated=flags,
        gamma=1.0,
        gae_lambda=1.0,
    )
    torch.testing.assert_close(adv, torch.tensor([[2.0, 5.0], [1.0, 5.0]]))


@pytest.mark.parametrize("bad", [{"gamma": 1.5}, {"gae_lambda": -0.1}])
def test_gae_rejects_bad_coefficients(bad):
    x = torch.zeros(3)
    f = torch.zeros(3, dtype=torch.bool)
    kwargs = {"gamma": 0.9, "gae_lambda": 0.9, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        compute_gae(rewards=x, values=x, next_values=x, terminated=f, truncated=f, **kwargs)


def test_gae_rejects_mismatched_shapes():
    x = torch.zeros(3)
    f = torch.zeros(3, dtype=torch.bool)
    with pytest.raises(ValueError, match="next_values"):
        compute_gae(
            rewards=x,
            values=x,
            next_values=torch.zeros(4),
            terminated=f,
            truncated=f,
            gamma=0.9,
            gae_lambda=0.9,
        )


def test_ppo_clip_loss_hand_computed():
    # ratios 1.5, 0.5, 1.1 with advantages 1, 1, -2 and eps 0.2:
    #   per-sample max(-A r, -A clip(r)) = [-1.2, -0.5, 2.2] -> mean 0.5 / 3
    new = torch.log(torch.tensor([1.5, 0.5, 1.1])).requires_grad_()
    old = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -2.0])
    loss, kl, clip_fraction = ppo_clip_loss(
        new_log_probs=new, old_log_probs=old, advantages=adv, clip_coef=0.2
    )
    assert loss.item() == pytest.approx(0.5 / 3)
    assert clip_fraction.item() == pytest.approx(2 / 3)
    expected_kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + (0.1 - math.log(1.1))) / 3
    assert kl.item() == pytest.approx(expected_kl)
    loss.backward()
    # The clipped sample has no gradient; the others have -A * ratio / N.
    torch.testing.assert_close(new.grad, torch.tensor([0.0, -0.5 / 3, 2.2 / 3]))


def test_ppo_clip_loss_rejects_bad_input():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="clip_coef"):
        ppo_clip_loss(new_log_probs=x, old_log_probs=x, advantages=x, clip_coef=0.0)
    with pytest.raises(ValueError, match="share a shape"):
        ppo_clip_loss(new_log_probs=x, old_log_probs=torch.zeros(3), advantages=x, clip_coef=0.2)


def test_value_loss_plain_and_clipped():
    values = torch.tensor([1.0, 3.0])
    returns = torch.tensor([2.0, 0.0])
    assert value_loss(values=values, returns=returns).item() == pytest.approx(0.5 * (1 + 9) / 2)
    # old 0, 2.5 with clip 0.2: clipped predictions 0.2, 2.7 -> squared errors 3.24, 7.29;
    # the elementwise max with the unclipped 1, 9 is 3.24, 9.
    old = torch.tensor([0.0, 2.5])
    clipped = value_loss(values=values, returns=returns, old_values=old, clip_coef=0.2)
    assert clipped.item() == pytest.approx(0.5 * (3.24 + 9.0) / 2)
    with pytest.raises(ValueError, match="old_values"):
        value_loss(values=values, returns=returns, clip_coef=0.2)


def test_normalise_centre_and_explained_variance():
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    n = normalise(x)
    assert n.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert n.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(centre(x), x - 3.0)
    assert explained_variance(predictions=x, targets=x) == pytest.approx(1.0)
    assert math.isnan(explained_variance(predictions=x, targets=torch.ones(4)))


@settings(max_examples=50, deadline=None)
@given(
    rewards=st.lists(st.floats(-5, 5), min_size=1, max_size=12),
    gamma=st.floats(0.0, 1.0),
    data=st.data(),
)
def test_gae_with_lambda_one_is_the_bootstrapped_discounted_return(rewards, gamma, data):
    # With lambda = 1 the GAE return telescopes into the discounted reward sum up to the
    # episode end, plus gamma^k * V(final obs) if that end is a truncation.
    n = len(rewards)
    ends = data.draw(st.lists(st.sampled_from(["none", "term", "trunc"]), min_size=n, max_size=n))
    values = data.draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n))
    next_values = data.draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n))
    # Within an episode the observation reached by step t is the one acted on at t + 1.
    for t in range(n - 1):
        if ends[t] == "none":
            next_values[t] = values[t + 1]
    _, returns = compute_gae(
        rewards=torch.tensor(rewards, dtype=torch.float64),
        values=torch.tensor(values, dtype=torch.float64),
        next_values=torch.tensor(next_values, dtype=torch.float64),
        terminated=torch.tensor([e == "term" for e in ends]),
        truncated=torch.tensor([e == "trunc" for e in ends]),
        gamma=gamma,
        gae_lambda=1.0,
    )
    for t in range(n):
        total, discount, k = 0.0, 1.0, t
        while True:
            total += discount * rewards[k]
            discount *= gamma
            if ends[k] == "term":
                break
            if ends[k] == "trunc" or k == n - 1:
                total += discount * next_values[k]
                break
            k += 1
        assert returns[t].item() == pytest.approx(total, abs=1e-9)
