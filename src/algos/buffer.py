"""Preallocated rollout storage in the `[T, E, A, ...]` layout.

One rollout (`T` vector steps of `E` env copies with `A` agents) is written in place step by
step, then read as flat minibatches of `T * E * A` per-agent samples. Subclasses of the
trainer may attach more `[T, E, A, ...]` tensors to the flat batch through `extra`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

__all__ = ["RolloutBuffer"]


class RolloutBuffer:
    """Tensors of one rollout; the trainer fills row `t` after each vector step."""

    def __init__(
        self,
        *,
        steps: int,
        num_envs: int,
        n_agents: int,
        obs_dim: int,
        action_dim: int | None = None,
    ) -> None:
        """Allocate every tensor once; they are overwritten in place each rollout.

        `action_dim`: Box actions of that many entries (float `[T, E, A, action_dim]`, the
        policy's raw samples); None: Discrete actions (int64 `[T, E, A]`).
        """
        if min(steps, num_envs, n_agents, obs_dim) < 1:
            raise ValueError(
                "steps, num_envs, n_agents and obs_dim must be >= 1, got "
                f"{steps}, {num_envs}, {n_agents}, {obs_dim}"
            )
        if action_dim is not None and action_dim < 1:
            raise ValueError(f"action_dim must be >= 1 (or None: Discrete), got {action_dim}")
        t, e, a, d = steps, num_envs, n_agents, obs_dim
        self.steps, self.num_envs, self.n_agents, self.obs_dim = t, e, a, d
        # Observations carry the agent one-hot already: [T, E, A, D + A].
        self.inputs = torch.zeros(t, e, a, d + a)
        self.final_inputs = torch.zeros(t, e, a, d + a)  # obs reached by step t, before reset
        if action_dim is None:
            self.actions = torch.zeros(t, e, a, dtype=torch.int64)  # executed actions
        else:
            self.actions = torch.zeros(t, e, a, action_dim)  # raw Gaussian samples
        self.log_probs = torch.zeros(t, e, a)  # of the executed action under the policy
        self.rewards = torch.zeros(t, e, a)
        self.costs = torch.zeros(t, e, a)  # the env's per-agent cost
        self.terminated = torch.zeros(t, e, a, dtype=torch.bool)
        self.truncated = torch.zeros(t, e, a, dtype=torch.bool)
        self.first_violation = torch.zeros(t, e, dtype=torch.bool)  # episode's first violation
        self.intervened = torch.zeros(t, e, a, dtype=torch.bool)
        # Per-sample targets filled at update time (shape [T, E, A]).
        self.extra: dict[str, torch.Tensor] = {}

    @property
    def size(self) -> int:
        """Number of per-agent samples, `T * E * A`."""
        return self.steps * self.num_envs * self.n_agents

    def flat(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Flatten `[T, E, A, ...]` tensors to `[T * E * A, ...]` views."""
        flat: dict[str, torch.Tensor] = {}
        for name, tensor in tensors.items():
            if tuple(tensor.shape[:3]) != (self.steps, self.num_envs, self.n_agents):
                raise ValueError(
                    f"batch tensor {name!r} has shape {tuple(tensor.shape)}, expected "
                    f"[{self.steps}, {self.num_envs}, {self.n_agents}, ...]"
                )
            flat[name] = tensor.reshape(self.size, *tensor.shape[3:])
        return flat

    def minibatches(
        self,
        batch: dict[str, torch.Tensor],
        *,
        mini_batches: int,
        generator: torch.Generator,
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Yield `mini_batches` disjoint random minibatches covering the flat batch once."""
        if self.size % mini_batches:
            raise ValueError(f"{self.size} samples do not split into {mini_batches} minibatches")
        order = torch.randperm(self.size, generator=generator)
        for chunk in order.view(mini_batches, -1):
            yield {name: tensor[chunk] for name, tensor in batch.items()}
