"""Registry of the algorithms, their capabilities, and every implementation-version registry.

`ALGORITHMS` maps an `algo` name to an `AlgorithmSpec`: how to get its trainer class and what
the rest of the pipeline may expect of it (capabilities). Code outside this module asks the
spec (`shielded`, `eval_modes`, `multiplier`, `sections`, `version_keys`) instead of comparing
algorithm names. `versions_of(key)` returns the registry of one `*_version` key of the run
config (each lives next to its implementations).

Nothing of the algorithms is imported when this module is: trainer classes and version
registries are imported by the loader functions below on first use, so the capabilities are
available to analysis code without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from src.checks import lookup

if TYPE_CHECKING:
    from src.algos.ippo import IPPO

__all__ = ["ALGORITHMS", "AlgorithmSpec", "get_algorithm", "shielded_algos", "versions_of"]


def _ippo_versions() -> Mapping[str, Any]:
    from src.algos.ippo import IPPO_VERSIONS

    return IPPO_VERSIONS


def _lag_versions() -> Mapping[str, Any]:
    from src.algos.lagrange import LAG_VERSIONS

    return LAG_VERSIONS


def _shield_versions() -> Mapping[str, Any]:
    from src.algos.shield.assemble import SHIELD_VERSIONS

    return SHIELD_VERSIONS


def _wm_versions() -> Mapping[str, Any]:
    from src.algos.shield.world_model import WM_VERSIONS

    return WM_VERSIONS


def _om_versions() -> Mapping[str, Any]:
    from src.algos.shield.opponent_model import OM_VERSIONS

    return OM_VERSIONS


# Run-config key of an implementation version -> loader of its registry.
_VERSION_REGISTRIES: dict[str, Callable[[], Mapping[str, Any]]] = {
    "ippo_version": _ippo_versions,
    "lag_version": _lag_versions,
    "shield_version": _shield_versions,
    "wm_version": _wm_versions,
    "om_version": _om_versions,
}


def versions_of(key: str) -> Mapping[str, Any]:
    """The registry of the implementation-version key `key` (e.g. `lag_version`)."""
    return lookup(_VERSION_REGISTRIES, key, "version key")()


def _ippo_trainer(versions: Mapping[str, Any]) -> type[IPPO]:
    return lookup(versions_of("ippo_version"), versions["ippo_version"], "ippo_version")


def _ippo_lag_trainer(versions: Mapping[str, Any]) -> type[IPPO]:
    from src.algos.ippo_lag import IPPOLag

    return IPPOLag


def _shield_trainer(versions: Mapping[str, Any]) -> type[IPPO]:
    from src.algos.shield.trainer import ShieldedIPPO

    return ShieldedIPPO


@dataclass(frozen=True, kw_only=True)
class AlgorithmSpec:
    """One trainable algorithm: its trainer and its capabilities."""

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
    load: Callable[[Mapping[str, Any]], type[IPPO]]
    """Trainer class for the run config's version keys (imported on first use)."""

    @property
    def eval_modes(self) -> tuple[bool, ...]:
        """Shield settings its final policy is evaluated with: on and off, or just off."""
        return (True, False) if self.shielded else (False,)

    def trainer(self, versions: Mapping[str, Any]) -> type[IPPO]:
        """The trainer class selected by `versions` (a run config or its version keys)."""
        return self.load(versions)


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ippo": AlgorithmSpec(
        name="ippo",
        description="independent PPO, parameter-shared actor-critic",
        constrained=False,
        shielded=False,
        multiplier=False,
        sections=("ppo",),
        version_keys=("ippo_version",),
        load=_ippo_trainer,
    ),
    "ippo_lag": AlgorithmSpec(
        name="ippo_lag",
        description="IPPO with a cost critic and a Lagrange multiplier on P(violation)",
        constrained=True,
        shielded=False,
        multiplier=True,
        sections=("ppo", "lagrange"),
        version_keys=("lag_version",),
        load=_ippo_lag_trainer,
    ),
    "shield": AlgorithmSpec(
        name="shield",
        description="IPPO whose actions pass a world-model and opponent-model shield",
        constrained=True,
        shielded=True,
        multiplier=False,
        sections=("ppo", "shield"),
        version_keys=("wm_version", "om_version", "shield_version"),
        load=_shield_trainer,
    ),
}


def get_algorithm(name: Any) -> AlgorithmSpec:
    """The spec of `name`, or a `ValueError` listing the known algorithms."""
    return lookup(ALGORITHMS, name, "algo")


def shielded_algos() -> tuple[str, ...]:
    """Names of the algorithms whose actions pass through a shield."""
    return tuple(name for name, spec in ALGORITHMS.items() if spec.shielded)
