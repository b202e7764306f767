"""The shield's hyperparameters: the one place each of them is declared.

The knobs of `create_base_config` (`max_risk`, `shield_patience`, the modes, `delta`, the
versions) are required fields taken from the top level of the resolved run config; the rest
(rollout count, lookahead, model sizes and training) have defaults and may be set through the
run config's `algo_params`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CREDIBLE_SCHEDULES",
    "OPPONENT_MODES",
    "REWARD_MODES",
    "RUN_CONFIG_KEYS",
    "ShieldConfig",
]

OPPONENT_MODES = ("model", "uniform", "monotone_floor")
REWARD_MODES = ("bayesian", "frequentist", "mean")
CREDIBLE_SCHEDULES = ("summable", "constant")

# Fields read from the top level of the resolved run config (create_base_config's knobs).
RUN_CONFIG_KEYS = (
    "max_risk",
    "shield_patience",
    "shield_opponent_mode",
    "shield_reward_mode",
    "shield_credible_delta",
    "shield_credible_schedule",
    "wm_version",
    "om_version",
    "shield_version",
)


@dataclass(frozen=True, kw_only=True)
class ShieldConfig:
    """Configuration of the shield, its world model and its opponent model."""

    max_risk: float
    """Largest acceptable bound on the probability of a violation within the lookahead."""
    shield_patience: int
    """Policy updates during which the shield only watches and trains its models."""
    shield_opponent_mode: str
    """How other agents act inside the imagination: `model`, `uniform` or `monotone_floor`."""
    shield_reward_mode: str
    """Risk bound from k violations in K rollouts: `bayesian`, `frequentist` or `mean`."""
    shield_credible_delta: float
    """Failure probability delta of the bounds (of all of an episode's bounds if summable)."""
    shield_credible_schedule: str
    """delta_t per episode step: `summable` (6 delta / (pi^2 t^2)) or `constant` (delta)."""
    wm_version: str
    """World-model implementation, a key of `WM_VERSIONS`."""
    om_version: str
    """Opponent-model implementation, a key of `OM_VERSIONS`."""
    shield_version: str
    """Shield implementation, a key of `SHIELD_VERSIONS`."""

    rollout_count: int = 32
    """Base rollout count K per candidate action (grown with the episode step, see bounds.py)."""
    lookahead: int = 1
    """Lookahead L: imagined steps per rollout, the first one taking the candidate action.

    1 by default. After the first step a rollout follows the *unshielded* policy, whose risky
    moves the shield filters anyway when they come; with L > 1 every candidate is charged with
    them. On the default workflow tasks (max_risk 0.1) the true 3-step risk of the best
    candidate has a median of 2-15% during training, and with L = 3 (and c = 1) the shield
    found no safe action in 83-100% of its decisions, while the true next-step risk of the best
    candidate is below 2% in 80-100% of them (see `src.algos.shield.diagnostics`)."""
    rollout_growth: float = 2.0
    """c in K_t = max(K, ceil(c ln(1/delta_t) / max_risk)); c >= 1 lets k = 0 certify.

    2 by default. At c = 1 only k = 0 certifies, so a candidate of true risk 1% passes with
    probability (0.99)^K_t, 0.28 late in a 100-step episode at max_risk 0.1; at c = 2 a few
    imagined violations still certify and it passes with probability >= 0.92 at every step."""
    screen_fraction: float = 0.25
    """Share of K spent first on every candidate; one that is already certain to fail its bound
    stops there (decisions are unchanged, see Shield._judge). 1 disables screening."""
    ensemble_size: int = 4
    """World-model ensemble members; each rollout uses one (rollout j -> member j mod size)."""
    wm_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of each world-model member."""
    om_hidden: tuple[int, ...] = (64,)
    """Hidden layer widths of the opponent model."""
    wm_learning_rate: float = 3e-3
    """Adam learning rate of the world model."""
    om_learning_rate: float = 3e-3
    """Adam learning rate of the opponent model."""
    replay_size: int = 50_000
    """Capacity of the replay of real transitions (training and validation parts together)."""
    valid_fraction: float = 0.1
    """Probability that a real transition is held out for validation instead of training."""
    model_epochs: float = 16.0
    """Model samples per update, in multiples of the transitions collected since the last one."""
    model_batch_size: int = 256
    """Minibatch size of model training (per ensemble member)."""
    max_valid_batch: int = 4096
    """Most recent validation transitions scored per update (bounds the cost of validation)."""

    def __post_init__(self) -> None:
        """Reject every bad value with an error naming the field."""
        # Imported lazily: the version registries import the model modules, which import this.
        from src.algos.shield import OM_VERSIONS, SHIELD_VERSIONS, WM_VERSIONS

        if isinstance(self.wm_hidden, list):
            object.__setattr__(self, "wm_hidden", tuple(self.wm_hidden))
        if isinstance(self.om_hidden, list):
            object.__setattr__(self, "om_hidden", tuple(self.om_hidden))
        _check_float("max_risk", self.max_risk, low=0.0, high=1.0)
        _check_int("shield_patience", self.shield_patience, low=0)
        _check_choice("shield_opponent_mode", self.shield_opponent_mode, OPPONENT_MODES)
        _check_choice("shield_reward_mode", self.shield_reward_mode, REWARD_MODES)
        _check_float("shield_credible_delta", self.shield_credible_delta, low=0.0, high=1.0)
        _check_choice("shield_credible_schedule", self.shield_credible_schedule, CREDIBLE_SCHEDULES)
        _check_choice("wm_version", self.wm_version, tuple(WM_VERSIONS))
        _check_choice("om_version", self.om_version, tuple(OM_VERSIONS))
        _check_choice("shield_version", self.shield_version, tuple(SHIELD_VERSIONS))
        _check_int("rollout_count", self.rollout_count, low=1)
        _check_int("lookahead", self.lookahead, low=1)
        if not isinstance(self.rollout_growth, int | float) or isinstance(
            self.rollout_growth, bool
        ):
            raise ValueError(f"rollout_growth must be a number, got {self.rollout_growth!r}")
        if not math.isfinite(self.rollout_growth) or self.rollout_growth < 1.0:
            raise ValueError(
                f"rollout_growth must be >= 1 so that zero violations certify, "
                f"got {self.rollout_growth!r}"
            )
        if not isinstance(self.screen_fraction, int | float) or not 0 < self.screen_fraction <= 1:
            raise ValueError(f"screen_fraction must lie in (0, 1], got {self.screen_fraction!r}")
        _check_int("ensemble_size", self.ensemble_size, low=1)
        _check_widths("wm_hidden", self.wm_hidden)
        _check_widths("om_hidden", self.om_hidden)
        _check_float("wm_learning_rate", self.wm_learning_rate, low=0.0, high=math.inf)
        _check_float("om_learning_rate", self.om_learning_rate, low=0.0, high=math.inf)
        _check_int("replay_size", self.replay_size, low=2)
        _check_float("valid_fraction", self.valid_fraction, low=0.0, high=1.0)
        _check_float("model_epochs", self.model_epochs, low=0.0, high=math.inf)
        _check_int("model_batch_size", self.model_batch_size, low=1)
        _check_int("max_valid_batch", self.max_valid_batch, low=1)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of every field."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def tunable_names(cls) -> tuple[str, ...]:
        """Names of the fields that `algo_params` may set (those not from the base config)."""
        return tuple(n for n in cls.field_names() if n not in RUN_CONFIG_KEYS)

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> ShieldConfig:
        """Build from a resolved run config: base knobs at the top level, the rest in algo_params.

        Keys of `algo_params` that are not shield fields are left to the IPPO trainer's config.
        """
        missing = [k for k in RUN_CONFIG_KEYS if k not in config]
        if missing:
            raise ValueError(f"run config lacks the shield keys {missing}")
        algo_params = config.get("algo_params") or {}
        if not isinstance(algo_params, Mapping):
            raise ValueError(f"algo_params must be a mapping, got {type(algo_params).__name__}")
        values = {k: config[k] for k in RUN_CONFIG_KEYS}
        values.update({k: v for k, v in algo_params.items() if k in cls.tunable_names()})
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (tuples as lists), for policy.pt and config.json."""
        out = dataclasses.asdict(self)
        out["wm_hidden"] = list(self.wm_hidden)
        out["om_hidden"] = list(self.om_hidden)
        return out


def _check_int(name: str, value: Any, *, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_float(name: str, value: Any, *, low: float, high: float) -> None:
    """Open interval (low, high), except that high = inf means unbounded."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low < value or (high != math.inf and not value < high):
        bounds = f"({low}, {high})" if high != math.inf else f"> {low}"
        raise ValueError(f"{name} must lie in {bounds}, got {value!r}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _check_widths(name: str, value: Any) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in value)
    ):
        raise ValueError(f"{name} must be a non-empty sequence of positive ints, got {value!r}")
