"""Registries of the algorithms and of their implementation versions.

`ALGORITHMS` maps an `algo` name to its trainer; the version registries map a run config's
`ippo_version` / `lag_version` to an implementation. The shield's own registries
(`SHIELD_VERSIONS`, `WM_VERSIONS`, `OM_VERSIONS`) live in `src.algos.shield` and are
re-exported here lazily, so that IPPO works even where the shield package cannot be imported.
Tests loop over these dicts, so a new entry is exercised as soon as it is registered.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from src.algos.lagrange import GradientLagrange, PIDLagrange

if TYPE_CHECKING:
    from src.algos.ippo import IPPO

__all__ = [
    "ALGORITHMS",
    "IPPO_VERSIONS",
    "LAG_VERSIONS",
    "AlgorithmSpec",
    "get_algorithm",
    "lookup",
]

T = TypeVar("T")


def lookup(registry: Mapping[str, T], name: Any, kind: str) -> T:
    """`registry[name]`, or a `ValueError` naming `kind`, the bad name and the known ones."""
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; known: {sorted(registry)}")
    return registry[name]


@dataclass(frozen=True, kw_only=True)
class AlgorithmSpec:
    """One trainable algorithm: how to get its trainer class and what it needs."""

    name: str
    """The `algo` value of the run config."""
    description: str
    """One line for listings."""
    module: str
    """Module holding the trainer class (imported on first use)."""
    class_name: str
    """Name of the trainer class, a subclass of `src.algos.ippo.IPPO`."""
    constrained: bool
    """Whether the algorithm uses `max_risk` in training (cost critic or shield)."""
    shielded: bool
    """Whether actions pass through a shield (evaluated with the shield on and off)."""

    def trainer(self) -> type[IPPO]:
        """Import and return the trainer class."""
        return getattr(importlib.import_module(self.module), self.class_name)


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ippo": AlgorithmSpec(
        name="ippo",
        description="independent PPO, parameter-shared actor-critic",
        module="src.algos.ippo",
        class_name="IPPO",
        constrained=False,
        shielded=False,
    ),
    "ippo_lag": AlgorithmSpec(
        name="ippo_lag",
        description="IPPO with a cost critic and a Lagrange multiplier on P(violation)",
        module="src.algos.ippo_lag",
        class_name="IPPOLag",
        constrained=True,
        shielded=False,
    ),
    "shield": AlgorithmSpec(
        name="shield",
        description="IPPO whose actions pass a world-model and opponent-model shield",
        module="src.algos.shield.trainer",
        class_name="ShieldedIPPO",
        constrained=True,
        shielded=True,
    ),
}


def get_algorithm(name: Any) -> AlgorithmSpec:
    """The spec of `name`, or a `ValueError` listing the known algorithms."""
    return lookup(ALGORITHMS, name, "algo")


def _ippo_v0() -> type[IPPO]:
    from src.algos.ippo import IPPO

    return IPPO


# ippo_version -> the base trainer class; v0 is the implementation in ippo.py.
IPPO_VERSIONS: dict[str, Callable[[], type[IPPO]]] = {"v0": _ippo_v0}


def _gradient_multiplier(cfg: Any, *, limit: float) -> GradientLagrange:
    return GradientLagrange(limit=limit, lr=cfg.lagrangian_lr, init=cfg.lambda_init)


def _pid_multiplier(cfg: Any, *, limit: float) -> PIDLagrange:
    return PIDLagrange(
        limit=limit,
        kp=cfg.pid_kp,
        ki=cfg.pid_ki,
        kd=cfg.pid_kd,
        d_delay=cfg.pid_d_delay,
        ema_p=cfg.pid_ema_p,
        ema_d=cfg.pid_ema_d,
        max_value=cfg.pid_max_lambda,
    )


# lag_version -> factory(IPPOLagConfig, limit=max_risk) -> multiplier.
LAG_VERSIONS: dict[str, Callable[..., GradientLagrange | PIDLagrange]] = {
    "v0": _gradient_multiplier,
    "pid": _pid_multiplier,
}

_SHIELD_REGISTRIES = ("SHIELD_VERSIONS", "WM_VERSIONS", "OM_VERSIONS")


def __getattr__(name: str) -> Any:
    """Re-export the shield's registries without importing the shield at import time."""
    if name in _SHIELD_REGISTRIES:
        return getattr(importlib.import_module("src.algos.shield"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
