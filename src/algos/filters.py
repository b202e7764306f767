"""The action-filter interface: what stands between a policy's proposal and the env.

A filter sees the observations, the policy's proposed actions and logits and the step of the
episode the actions take, and returns the executed actions with a per-agent flag of where it
changed them. The trainer (`IPPO.action_filter`) and the deployed policy (`Actor`) call it the
same way; the shield (`src.algos.shield.budget.BudgetShield`) is a `RiskFilter`: it shares
its argument checks (`check_filter_inputs`), timing and counters.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["ActionFilter", "FilterCounters", "RiskFilter", "Unfiltered", "check_filter_inputs"]


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
        -> executed [E, A] int64, intervened [E, A] bool. Box actions: proposed [E, A, k] the
        policy's raw samples and, in place of the logits, the policy (mean [E, A, k], log-std
        [k]) -> executed raw actions [E, A, k] (the env clips them)."""
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


def check_filter_inputs(
    obs: np.ndarray,
    proposed: np.ndarray,
    logits: torch.Tensor,
    episode_step: np.ndarray,
    *,
    n_agents: int,
    obs_dim: int,
    n_actions: int,
) -> tuple[torch.Tensor, np.ndarray, torch.Tensor, np.ndarray]:
    """Check the arguments of `ActionFilter.filter` against the filter's dimensions.

    Returns obs as a float32 tensor [E, A, D], the proposals as int64 [E, A], the logits as a
    detached float tensor [E, A, n_actions] and the steps as int64 [E]; raises `ValueError`
    naming the first argument of the wrong shape, type or range.
    """
    a, d, n = n_agents, obs_dim, n_actions
    obs = np.asarray(obs, dtype=np.float32)
    if obs.ndim != 3 or obs.shape[1:] != (a, d):
        raise ValueError(f"obs must have shape [E, {a}, {d}], got {obs.shape}")
    e = obs.shape[0]
    proposed = np.asarray(proposed)
    if proposed.shape != (e, a) or not np.issubdtype(proposed.dtype, np.integer):
        raise ValueError(f"proposed must be an int array [{e}, {a}], got {proposed.shape}")
    if proposed.min() < 0 or proposed.max() >= n:
        raise ValueError(f"proposed actions must lie in [0, {n}), got {proposed}")
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (e, a, n):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
        raise ValueError(f"logits must be a tensor [{e}, {a}, {n}], got {shape}")
    step = np.asarray(episode_step)
    if step.shape != (e,) or not np.issubdtype(step.dtype, np.integer) or step.min() < 1:
        raise ValueError(f"episode_step must be ints >= 1 of shape [{e}], got {episode_step}")
    return (
        torch.from_numpy(obs),
        proposed.astype(np.int64),
        logits.detach().float(),
        step.astype(np.int64),
    )


class FilterCounters(Protocol):
    """The counters a `RiskFilter` accumulates over its calls."""

    decisions: int
    interventions: int
    no_safe_action: int
    bound_sum: float
    seconds: float


class RiskFilter(ABC):
    """An action filter that judges each of its decisions by a risk bound (the shields).

    `filter` checks its arguments (`_checked`: `check_filter_inputs`), lets `_decide` choose
    the executed actions and adds the outcome to `stats`. Subclasses set `n_agents`,
    `obs_dim`, `n_actions` and `stats`, and implement `_decide` and `reset`; a filter of other
    actions (Box: `src.algos.shield.box`) also `_checked` and `_changed`.
    """

    n_agents: int
    obs_dim: int
    n_actions: int
    stats: FilterCounters

    def filter(
        self,
        obs: np.ndarray,
        proposed: np.ndarray,
        logits: torch.Tensor,
        episode_step: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """obs [E, A, D], proposed [E, A] int, logits [E, A, n_actions] (the policy's),
        episode_step [E] (1-based index, within its episode, of the step these actions take)
        -> executed [E, A] int64, intervened [E, A] bool (see `_decide`)."""
        start = time.perf_counter()
        obs_t, proposed_np, logits_t, step = self._checked(obs, proposed, logits, episode_step)
        executed, bound, no_safe = self._decide(obs_t, proposed_np, logits_t, step)
        intervened = self._changed(executed, proposed_np)
        s = self.stats
        s.decisions += bound.size
        s.interventions += int(intervened.sum())
        s.no_safe_action += no_safe
        s.bound_sum += float(bound.sum())
        s.seconds += time.perf_counter() - start
        return executed, intervened

    def _checked(
        self, obs: np.ndarray, proposed: np.ndarray, logits: Any, episode_step: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray, Any, np.ndarray]:
        """The arguments of `filter` checked and converted (`check_filter_inputs`)."""
        return check_filter_inputs(
            obs,
            proposed,
            logits,
            episode_step,
            n_agents=self.n_agents,
            obs_dim=self.obs_dim,
            n_actions=self.n_actions,
        )

    def _changed(self, executed: np.ndarray, proposed: np.ndarray) -> np.ndarray:
        """[E, A] bool: where the executed action differs from the proposal."""
        return executed != proposed

    @abstractmethod
    def _decide(
        self, obs: torch.Tensor, proposed: np.ndarray, logits: torch.Tensor, step: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The checked arguments of `filter` -> executed actions [E, A] int64, the bound of
        the executed action of each decision (one entry per decision) and the number of
        decisions for which no action was within the allowed risk."""

    @abstractmethod
    def reset(self, num_envs: int, seed: int) -> None:
        """Start a new sequence of episodes over `num_envs` copies (reseeds any sampling)."""
