"""The `ppo` section of the run config: the PPO loop's sizes and IPPO's hyperparameters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from src.checks import check_bool, check_float, check_int_tuple, check_probability
from src.config.section import Section

__all__ = ["PPOConfig"]

_unit = partial(check_probability, open_interval=False)
_positive = partial(check_float, low=0.0)
_non_negative = partial(check_float, low=0.0, open_low=False)


@dataclass(frozen=True, kw_only=True)
class PPOConfig(Section):
    """Clipped PPO with GAE on a parameter-shared actor-critic (ippo, and the base of the rest)."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = (
        "num_envs",
        "timesteps",
        "rollouts",
        "learning_epochs",
        "mini_batches",
        "learning_rate",
    )
    RULES: ClassVar[Mapping[str, Callable[[str, Any], Any]]] = {
        "gamma": _unit,
        "gae_lambda": _unit,
        "clip_coef": _positive,
        "clip_value_loss": check_bool,
        "ent_coef": _non_negative,
        "vf_coef": _non_negative,
        "max_grad_norm": _positive,
        "hidden_sizes": check_int_tuple,
        "normalise_advantages": check_bool,
        "anneal_lr": check_bool,
        "adam_eps": _positive,
    }

    num_envs: int
    """Env copies stepped together (E)."""
    timesteps: int
    """Total env steps of the run, over all copies."""
    rollouts: int
    """Steps per env copy between policy updates (T)."""
    learning_epochs: int
    """Passes over the rollout per update."""
    mini_batches: int
    """Minibatches per pass; divides the batch T * E * A."""
    learning_rate: float
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor of the reward."""
    gae_lambda: float = 0.95
    """GAE lambda: bias-variance trade-off of the advantage estimate."""
    clip_coef: float = 0.2
    """PPO ratio clip epsilon."""
    clip_value_loss: bool = False
    """Clip the value loss around the rollout's values with `clip_coef` (PPO2 style)."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss (and of the cost value loss in ippo_lag)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and each critic."""
    normalise_advantages: bool = True
    """Standardise the reward advantages over the whole rollout before the update."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the run."""
    adam_eps: float = 1e-5
    """Adam epsilon."""

    @property
    def steps_per_update(self) -> int:
        """Env steps collected between two updates, `rollouts * num_envs`."""
        return self.rollouts * self.num_envs

    @property
    def num_updates(self) -> int:
        """Policy updates of the run (the remainder of `timesteps` is not collected)."""
        return self.timesteps // self.steps_per_update
