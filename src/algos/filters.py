"""The action-filter interface: what stands between a policy's proposal and the env.

A filter sees the observations, the policy's proposed actions and logits and the step of the
episode the actions take, and returns the executed actions with a per-agent flag of where it
changed them. The trainer (`IPPO.action_filter`) and the deployed policy (`Actor`) call it the
same way; the shield (`src.algos.shield.shield.Shield`) is one.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["ActionFilter", "Unfiltered"]


@runtime_checkable
class ActionFilter(Protocol):
    """Chooses the executed actions from the policy's proposals."""

    def filter(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """obs [E, A, D], proposed [E, A] int64, logits [E, A, n_actions] (the policy's),
        episode_step [E] (1-based index, within its episode, of the step these actions take)
        -> executed [E, A] int64, intervened [E, A] bool."""
        ...

    def reset(self, num_envs: int, seed: int) -> None:
        """Start a new sequence of episodes over `num_envs` copies (reseeds any sampling)."""
        ...


class Unfiltered:
    """The identity filter: every proposal is executed."""

    def __init__(self) -> None:
        """No state beyond a cached all-False intervention array."""
        self._none = np.zeros((0, 0), dtype=bool)

    def filter(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The proposals themselves, no intervention."""
        if self._none.shape != proposed.shape:
            self._none = np.zeros(proposed.shape, dtype=bool)
        return proposed, self._none

    def reset(self, num_envs: int, seed: int) -> None:
        """Nothing to reseed."""
