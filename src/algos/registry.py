"""Registry of the algorithms, their capabilities, and the names of every implementation version.

`ALGORITHMS` maps an `algo` name to an `AlgorithmSpec`: what the rest of the pipeline may
expect of it (capabilities). Code outside this module asks the spec (`shielded`,
`multiplier`, `sections`, `version_keys`) instead of comparing algorithm names; a run config
records `shielded`, and the shield modes its final policy is evaluated in are
`RunConfig.eval_modes`.
`versions_of(key)` returns the known values of one `*_version` key of the run config.

This module is a leaf: it imports no algorithm, so the config layer and the analysis code
read capabilities without torch and without an import circle. The implementations live next
to their code (`IPPO_VERSIONS`, `LAG_VERSIONS`, `SHIELD_VERSIONS`, `WM_VERSIONS`,
`OM_VERSIONS`) and `src.algos.train.trainer_class` maps an algorithm to its trainer class; a
test checks that every name here has an implementation and every implementation a name. A
built-in algorithm's own modules (`AlgorithmSpec.trainer`, `shield_loader`) are imported by
their import path when a run of it needs them, so that the code of an `ippo` job does not
include the shield's (`builtin_entries`, `src.code_inputs.job_code`).

An algorithm given by import path (`src.custom.register_algorithm`, or a config's
`custom_algos`) is a class whose capabilities are class attributes (`CAPABILITY_DEFAULTS`) and
which has the methods of `REQUIRED_METHODS`; `get_algorithm` imports it on first use, checks
it and builds its spec, so the rest of the pipeline treats it like the built-in ones
(docs/architecture.md, "Your own task and algorithm").
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from src.checks import lookup
from src.custom import CUSTOM_ALGOS, ComponentError, load_entry

__all__ = [
    "ACTION_KINDS",
    "ALGORITHMS",
    "CAPABILITY_DEFAULTS",
    "REQUIRED_METHODS",
    "RETIRED_VERSIONS",
    "SECTION_NAMES",
    "SHIELD_LOADER",
    "VERSIONS",
    "AlgorithmSpec",
    "algorithm_class",
    "algorithm_names",
    "builtin_entries",
    "get_algorithm",
    "shielded_algos",
    "versions_of",
]

SECTION_NAMES: tuple[str, ...] = ("ppo", "lagrange", "shield")
"""Run-config sections an algorithm may use (`src.config.run.SECTIONS` holds their classes)."""
ACTION_KINDS: tuple[str, ...] = ("discrete", "box")
"""Action spaces an algorithm may take: Discrete(n), or a Box (every built-in algorithm takes
both, with a Gaussian policy over a Box, the shields judging sampled candidate actions)."""

# Run-config key of an implementation version -> the versions it may name.
VERSIONS: dict[str, tuple[str, ...]] = {
    "ippo_version": ("v0",),
    "lag_version": ("v0", "pid"),
    "shield_version": ("v0",),
    "wm_version": ("v0",),
    "om_version": ("v0",),
}


# Version names that earlier code recorded and that name nothing now: key -> {name: why}. A
# run config or a workflow config with one is refused with the reason (`src.config.run`).
RETIRED_VERSIONS: dict[str, dict[str, str]] = {
    "shield_version": {
        "v1": "v1 named the certified shield until it became v0 and the old v0 shield was "
        "removed: a config or run folder with v1 is from an older code version",
    },
    "wm_version": {
        "v1": "v1 named the certified shield's world model until it became v0 and the old v0 "
        "world model was retired: a config or run folder with v1 is from an older code version",
    },
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
    action_kinds: tuple[str, ...] = ("discrete",)
    """Action spaces it takes (`ACTION_KINDS`); a task with other actions is refused."""
    entry: str | None = None
    """Import path `module:Class` of an algorithm given by a config (None: built in)."""
    trainer: str | None = None
    """Built in: import path `module:Class` of its trainer, imported when a run of it needs it
    (None: `ippo`, whose class `ippo_version` picks in `src.algos.ippo`, the module every
    trainer extends)."""
    shield_loader: str | None = None
    """Built in and shielded: import path of the function that rebuilds its shield from a
    policy.pt (`src.algos.policy.actor_from_state` imports it when it needs it)."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Section fields the algorithm fixes (what sets it apart from another algorithm with the
    same trainer); its `algo_params` may not set them."""


SHIELD_LOADER = "src.algos.shield.assemble:load_shield"
"""Import path of the function that rebuilds the built-in shield from a policy.pt: the shielded
built-in algorithms' `shield_loader`, and that of a shielded algorithm of the user's whose
actor `src.algos.policy.actor_from_state` builds."""

ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ippo": AlgorithmSpec(
        name="ippo",
        description="independent PPO, parameter-shared actor-critic",
        constrained=False,
        shielded=False,
        multiplier=False,
        sections=("ppo",),
        version_keys=("ippo_version",),
        action_kinds=("discrete", "box"),
    ),
    "ippo_lag": AlgorithmSpec(
        name="ippo_lag",
        description="IPPO with a cost critic and a Lagrange multiplier on P(violation)",
        constrained=True,
        shielded=False,
        multiplier=True,
        sections=("ppo", "lagrange"),
        version_keys=("lag_version",),
        trainer="src.algos.ippo_lag:IPPOLag",
        action_kinds=("discrete", "box"),
    ),
    "shield": AlgorithmSpec(
        name="shield",
        description="IPPO whose actions pass a world-model and opponent-model shield",
        constrained=True,
        shielded=True,
        multiplier=False,
        sections=("ppo", "shield"),
        version_keys=("shield_version", "wm_version", "om_version"),
        trainer="src.algos.shield.trainer:ShieldedIPPO",
        shield_loader=SHIELD_LOADER,
        action_kinds=("discrete", "box"),
    ),
    "shield_dec": AlgorithmSpec(
        name="shield_dec",
        description="shielded IPPO, each agent's shield alone: the others by the opponent model",
        constrained=True,
        shielded=True,
        multiplier=False,
        sections=("ppo", "shield"),
        version_keys=("shield_version", "wm_version", "om_version"),
        fixed={"coordination": "decentralised"},
        trainer="src.algos.shield.trainer:ShieldedIPPO",
        shield_loader=SHIELD_LOADER,
        action_kinds=("discrete", "box"),
    ),
}


REQUIRED_METHODS: dict[str, str] = {
    "train": "train(*, callbacks, progress): run the remaining updates",
    "state": "state() -> dict: everything a resumed run needs (checkpoint)",
    "load_state": "load_state(state): restore what state() returned",
    "policy_state": "policy_state() -> dict: the content of policy.pt",
    "load_actor": "load_actor(policy_state, config, *, shielded) -> actor (a classmethod)",
}
"""Methods an algorithm given by import path must have, and what each does."""

CAPABILITY_DEFAULTS: dict[str, Any] = {
    "constrained": False,
    "shielded": False,
    "multiplier": False,
    "sections": ("ppo",),
    "action_kinds": ("discrete",),
}
"""Capabilities an algorithm class may declare as class attributes, and their defaults
(`description` defaults to the first line of its docstring)."""

# (name, import path) -> the spec built from the class, so a class is checked once.
_LOADED: dict[tuple[str, str], tuple[AlgorithmSpec, type]] = {}


def _check_names(name: str, key: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, tuple | list) or not names or not set(names) <= set(allowed):
        raise ComponentError(
            f"{name}.{key} = {value!r}: must be a non-empty tuple of {', '.join(allowed)}"
        )
    return tuple(names)


def _load(name: str, entry: str) -> tuple[AlgorithmSpec, type]:
    """Import, check and describe the algorithm class of `entry` (cached)."""
    if (name, entry) in _LOADED:
        return _LOADED[name, entry]
    cls = load_entry(entry)
    if not inspect.isclass(cls):
        raise ComponentError(f"{entry} is a {type(cls).__name__}, not a class")
    missing = [method for method in REQUIRED_METHODS if not callable(getattr(cls, method, None))]
    if missing:
        needs = "; ".join(REQUIRED_METHODS[method] for method in missing)
        raise ComponentError(f"class {cls.__qualname__} lacks the methods {missing} ({needs})")
    caps = {key: getattr(cls, key, default) for key, default in CAPABILITY_DEFAULTS.items()}
    for key in ("constrained", "shielded", "multiplier"):
        if not isinstance(caps[key], bool):
            raise ComponentError(f"{cls.__qualname__}.{key} = {caps[key]!r}: must be a bool")
    sections = _check_names(cls.__qualname__, "sections", caps["sections"], SECTION_NAMES)
    if "ppo" not in sections:
        raise ComponentError(
            f"{cls.__qualname__}.sections = {sections!r}: must include 'ppo' (the run's "
            "num_envs, rollouts and updates live there)"
        )
    doc = (inspect.getdoc(cls) or "").strip().splitlines()
    description = getattr(cls, "description", None) or (doc[0] if doc else entry)
    spec = AlgorithmSpec(
        name=name,
        description=str(description),
        constrained=caps["constrained"],
        shielded=caps["shielded"],
        multiplier=caps["multiplier"],
        sections=sections,
        version_keys=(),
        action_kinds=_check_names(
            cls.__qualname__, "action_kinds", caps["action_kinds"], ACTION_KINDS
        ),
        entry=entry,
    )
    _LOADED[name, entry] = spec, cls
    return spec, cls


def algorithm_names() -> list[str]:
    """Every algorithm this process knows: the built-in ones and the registered ones."""
    return sorted({*ALGORITHMS, *CUSTOM_ALGOS})


def get_algorithm(name: Any) -> AlgorithmSpec:
    """The spec of `name`, or a `ValueError` listing the known algorithms.

    An algorithm given by import path is imported and checked here, the first time; a class
    that cannot serve raises `src.custom.ComponentError` saying what it lacks.
    """
    # A built-in name always means the built-in algorithm (the config layer refuses a custom
    # algorithm registered under it).
    if isinstance(name, str) and name not in ALGORITHMS and name in CUSTOM_ALGOS:
        return _load(name, CUSTOM_ALGOS[name])[0]
    return lookup({**dict.fromkeys(CUSTOM_ALGOS), **ALGORITHMS}, name, "algo")


def algorithm_class(name: str) -> type:
    """The class of an algorithm given by import path (`get_algorithm(name).entry` is set)."""
    spec = get_algorithm(name)
    if spec.entry is None:
        raise ValueError(f"algo {name!r} is built in; src.algos.train.trainer_class has its class")
    return _load(spec.name, spec.entry)[1]


def builtin_entries() -> dict[str, tuple[str, ...]]:
    """Per built-in algorithm, the import paths of its code that only its own runs import
    (`trainer`, `shield_loader`): `src.code_inputs.job_code` lists their modules in the code
    of that algorithm's jobs only, so that changing a shield module reruns the shields' jobs
    and not `ippo`'s. (An algorithm of the user's may load the built-in shield,
    `SHIELD_LOADER`, whatever it imports: its jobs list that too.)"""
    return {
        name: tuple(entry for entry in (spec.trainer, spec.shield_loader) if entry)
        for name, spec in ALGORITHMS.items()
    }


def shielded_algos() -> tuple[str, ...]:
    """Names of the algorithms whose actions pass through a shield."""
    return tuple(name for name in algorithm_names() if get_algorithm(name).shielded)
