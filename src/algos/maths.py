"""Pure, keyword-only maths shared by IPPO, Lagrangian IPPO and the shielded trainer.

Arrays follow the `[T, E, A, ...]` layout (time, env copy, agent). Nothing here keeps state,
touches an RNG or normalises behind the caller's back: advantage normalisation is a separate
helper that the trainer calls explicitly.
"""

from __future__ import annotations

import torch

__all__ = [
    "centre",
    "compute_gae",
    "explained_variance",
    "normalise",
    "ppo_clip_loss",
    "value_loss",
]


def compute_gae(
    *,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) with correct bootstrapping.

    Args:
        rewards: `[T, ...]` reward of step t.
        values: `[T, ...]` V(s_t) of the observation acted on at step t.
        next_values: `[T, ...]` V of the observation *reached* by step t, before any auto-reset
            (the env's `final_obs`). On truncation it is the bootstrap value; on termination it
            is ignored (the value of a terminal state is zero).
        terminated: `[T, ...]` bool, step t ended the episode in a terminal state.
        truncated: `[T, ...]` bool, step t ended the episode by the hidden cap.
        gamma: discount factor in [0, 1].
        gae_lambda: GAE lambda in [0, 1].

    Returns:
        `(advantages, returns)`, both `[T, ...]`; `returns = advantages + values`.
        Advantages are *not* normalised.

    >>> r = torch.tensor([1.0, 1.0]); v = torch.zeros(2); f = torch.tensor([False, False])
    >>> adv, ret = compute_gae(rewards=r, values=v, next_values=v, terminated=f,
    ...                        truncated=f, gamma=1.0, gae_lambda=1.0)
    >>> adv.tolist()
    [2.0, 1.0]
    """
    shape = rewards.shape
    for name, tensor in (
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        if tensor.shape != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, rewards {tuple(shape)}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    if not 0.0 <= gae_lambda <= 1.0:
        raise ValueError(f"gae_lambda must lie in [0, 1], got {gae_lambda}")

    not_terminal = (~terminated.bool()).to(rewards.dtype)
    # The recursion must not run across an episode boundary, whichever way the episode ended.
    not_done = (~(terminated.bool() | truncated.bool())).to(rewards.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def ppo_clip_loss(
    *,
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The clipped surrogate objective of PPO (Schulman et al. 2017), as a loss to minimise.

    Returns:
        `(pg_loss, approx_kl, clip_fraction)`: the mean of
        `max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))`, the low-variance KL estimate
        `mean((ratio - 1) - log ratio)` (Schulman's k3) and the fraction of clipped ratios;
        the last two are detached diagnostics.
    """
    if clip_coef <= 0.0:
        raise ValueError(f"clip_coef must be > 0, got {clip_coef}")
    if not new_log_probs.shape == old_log_probs.shape == advantages.shape:
        raise ValueError(
            "new_log_probs, old_log_probs and advantages must share a shape, got "
            f"{tuple(new_log_probs.shape)}, {tuple(old_log_probs.shape)}, "
            f"{tuple(advantages.shape)}"
        )
    log_ratio = new_log_probs - old_log_probs
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = torch.maximum(unclipped, clipped).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).to(ratio.dtype).mean()
    return pg_loss, approx_kl, clip_fraction


def value_loss(
    *,
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip_coef: float | None = None,
) -> torch.Tensor:
    """Half mean squared error of a critic, optionally clipped around the rollout's values.

    With `clip_coef` set (and `old_values` given) the loss is
    `0.5 * mean(max((v - R)^2, (v_old + clip(v - v_old, -c, c) - R)^2))` as in the PPO
    reference implementation; otherwise `0.5 * mean((v - R)^2)`.
    """
    if values.shape != returns.shape:
        raise ValueError(f"values {tuple(values.shape)} and returns {tuple(returns.shape)} differ")
    squared = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * squared.mean()
    if old_values is None:
        raise ValueError("a clipped value loss needs old_values")
    if clip_coef <= 0.0:
        raise ValueError(f"clip_coef must be > 0, got {clip_coef}")
    clipped = old_values + (values - old_values).clamp(-clip_coef, clip_coef)
    return 0.5 * torch.maximum(squared, (clipped - returns) ** 2).mean()


def normalise(x: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """Shift to zero mean and scale to unit (population) standard deviation."""
    if x.numel() < 2:
        return x - x.mean()
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


def centre(x: torch.Tensor) -> torch.Tensor:
    """Shift to zero mean without rescaling (used for cost advantages, as in OmniSafe)."""
    return x - x.mean()


def explained_variance(*, predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """1 - Var(targets - predictions) / Var(targets); NaN when the targets are constant."""
    var_targets = targets.var(unbiased=False)
    if var_targets.item() == 0.0:
        return float("nan")
    return float(1.0 - (targets - predictions).var(unbiased=False) / var_targets)
