"""Registry of the algorithms, their capabilities, and the names of every implementation version.

`ALGORITHMS` maps an `algo` name to an `AlgorithmSpec`: what the rest of the pipeline may
expect of it (capabilities). Code outside this module asks the spec (`shielded`,
`eval_modes`, `multiplier`, `sections`, `version_keys`) instead of comparing algorithm names.
`versions_of(key)` returns the known values of one `*_version` key of the run config.

This module is a leaf: it imports no algorithm, so the config layer and the analysis code
read capabilities without torch and without an import circle. The implementations live next
to their code (`IPPO_VERSIONS`, `LAG_VERSIONS`, `SHIELD_VERSIONS`, `WM_VERSIONS`,
`OM_VERSIONS`) and `src.algos.train.trainer_class` maps an algorithm to its trainer class; a
test checks that every name here has an implementation and every implementation a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from src.checks import lookup

__all__ = [
    "ALGORITHMS",
    "VERSIONS",
    "AlgorithmSpec",
    "get_algorithm",
    "shielded_algos",
    "versions_of",
]

# Run-config key of an implementation version -> the versions it may name.
VERSIONS: dict[str, tuple[str, ...]] = {
    "ippo_version": ("v0",),
    "lag_version": ("v0", "pid"),
    "shield_version": ("v0", "v1"),
    "wm_version": ("v0", "v1"),
    "om_version": ("v0",),
}


def versions_of(key: str) -> tuple[str, ...]:
    """The known values of the implementation-version key `key` (e.g. `lag_version`)."""
    return lookup(VERSIONS, key, "version key")


@dataclass(frozen=True, kw_only=True)
class AlgorithmSpec:
    """One trainable algorithm and its capabilities."""

    name: str
    """The `algo` value of the run config."""
    description: str
    """One line for listings."""
    constrained: bool
    """Whether the algorithm uses `max_risk` in training (cost critic or shield)."""
    shielded: bool
    """Whether actions pass through a shield (evaluated with the shield on and off)."""
    multiplier: bool
    """Whether it learns a Lagrange multiplier (logs `safety/lambda`)."""
    sections: tuple[str, ...]
    """Run-config sections whose tunable fields its `algo_params` may set."""
    version_keys: tuple[str, ...]
    """Implementation-version keys of the base config that select its code."""

    @property
    def eval_modes(self) -> tuple[bool, ...]:
        """Shield settings its final policy is evaluated with: on and off, or just off."""
        return (True, False) if self.shielded else (False,)


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ippo": AlgorithmSpec(
        name="ippo",
        description="independent PPO, parameter-shared actor-critic",
        constrained=False,
        shielded=False,
        multiplier=False,
        sections=("ppo",),
        version_keys=("ippo_version",),
    ),
    "ippo_lag": AlgorithmSpec(
        name="ippo_lag",
        description="IPPO with a cost critic and a Lagrange multiplier on P(violation)",
        constrained=True,
        shielded=False,
        multiplier=True,
        sections=("ppo", "lagrange"),
        version_keys=("lag_version",),
    ),
    "shield": AlgorithmSpec(
        name="shield",
        description="IPPO whose actions pass a world-model and opponent-model shield",
        constrained=True,
        shielded=True,
        multiplier=False,
        sections=("ppo", "shield"),
        version_keys=("wm_version", "om_version", "shield_version"),
    ),
}


def get_algorithm(name: Any) -> AlgorithmSpec:
    """The spec of `name`, or a `ValueError` listing the known algorithms."""
    return lookup(ALGORITHMS, name, "algo")


def shielded_algos() -> tuple[str, ...]:
    """Names of the algorithms whose actions pass through a shield."""
    return tuple(name for name, spec in ALGORITHMS.items() if spec.shielded)
