"""`RunConfig`: the typed, frozen config of one training run, checked once when it is built.

A run config is the output of `create_base_config` for the run's env (the *base*: checked key
by key there) plus the run's identity and settings:

```
algo: str, run_idx: int, seed: int      # seed = seed_offset + run_idx
env_params: dict                         # the env's own parameters (make_vector_env / make_env)
algo_params: dict                        # tunable fields of the algorithm's sections
threads: int                             # torch threads of the training job
checkpoint_every: int                    # policy updates between checkpoints
custom: dict                             # only for a task or algorithm given by import path:
                                         # {"env": {"factory", "cost"}, "algo": "module:Class"}
```

`RunConfig.from_dict` checks what the base does not (the identity, the settings, the
implementation versions that apply to the algorithm, the `algo_params` against the sections
the algorithm's spec names; a retired version name or a removed shield key,
`RETIRED_VERSIONS` and `RETIRED_KEYS`, is refused with what became of it) and builds the
typed sections: `env`, `ppo`, `evaluation`, and `lagrange` or `shield` where the algorithm
has them. Trainers, evaluation and analysis read the sections and check nothing again.

`to_dict` gives back the flat form, which a run records (config.json, and the `config` entry
of policy.pt), together with what `from_dict` resolved (`RECORDED_KEYS`):

```
shielded: bool                           # the algorithm's actions pass through a shield
sections: {name: {field: value}}         # every tunable field of each section, defaults too
```

`RunConfig.from_recorded` reads that form back as it was resolved when the run was made,
without looking anything up again (no algorithm registry, custom entry or version name):
every value is checked by its rule, and a recording of another code version, with keys this
code does not know or without keys it needs, is refused naming them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from src.algos.registry import RETIRED_VERSIONS, get_algorithm, versions_of
from src.checks import (
    ConfigError,
    check_bool,
    check_int,
    check_mapping,
    check_str,
    fail,
    shown,
)
from src.config.base import (
    BASE_CHECKS,
    OPTIONAL_CHECKS,
    REQUIRED_BASE_KEYS,
    create_base_config,
    recorded_constraint_horizon,
)
from src.config.evaluation import EvalConfig
from src.config.lagrange import LagrangeConfig
from src.config.ppo import PPOConfig
from src.config.section import Section
from src.config.shield import RETIRED_KEYS, ShieldConfig
from src.custom import recorded_entries

__all__ = [
    "OPTIONAL_RUN_KEYS",
    "RECORDED_KEYS",
    "RUN_KEYS",
    "SECTIONS",
    "EnvConfig",
    "RunConfig",
    "make_run_config",
]

# Keys a run config adds to the base config.
RUN_KEYS = ("algo", "run_idx", "seed", "env_params", "algo_params", "threads", "checkpoint_every")
# Run keys present only in some runs: `custom`, the import paths of a task or algorithm given
# by a config (absent for built-in ones, so their run configs are what they always were).
OPTIONAL_RUN_KEYS = ("custom",)
# Torch threads a training job may ask for (more than any machine here has cores; the job
# uses no more than the threads it is granted and the machine's CPUs).
MAX_THREADS = 256
# Keys config.json adds after training (provenance); they are not part of the config.
METADATA_KEYS = ("git_commit", "git_dirty", "package_versions", "kernels")
# Keys to_dict adds from what from_dict resolved through the algorithm's spec: whether its
# actions pass through a shield, and every tunable field of each of its sections. A recording
# is read back from them (from_recorded); from_dict, which resolves them, passes over them.
RECORDED_KEYS = ("shielded", "sections")
# Section name (as in AlgorithmSpec.sections) -> its dataclass.
SECTIONS: dict[str, type[Section]] = {
    "ppo": PPOConfig,
    "lagrange": LagrangeConfig,
    "shield": ShieldConfig,
}


@dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """The env of a run: registry name, agent count and the env's own parameters."""

    name: str
    """Registry name (`env_name`)."""
    n_agents: int
    """Number of agents."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The env's own parameters (`env_params`), checked by the env's constructor."""

    def constructor_params(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments of make_env / make_vector_env: params, n_agents, then overrides."""
        return {**self.params, "n_agents": self.n_agents, **overrides}


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One training run, typed. Build it with `from_dict` (which checks it), or read a run's
    recording back with `from_recorded`."""

    algo: str
    """Algorithm name, a key of `src.algos.registry.ALGORITHMS`."""
    run_idx: int
    """Index of the run in its (env, algo) group."""
    seed: int
    """Seed of everything random in training: `seed_offset + run_idx`."""
    threads: int
    """Torch threads of the training job."""
    checkpoint_every: int
    """Policy updates between resume points."""
    env: EnvConfig
    """The env."""
    ppo: PPOConfig
    """The PPO loop."""
    evaluation: EvalConfig
    """The final-policy evaluation."""
    lagrange: LagrangeConfig | None = None
    """The constraint's multiplier (algorithms with the `lagrange` section)."""
    shield: ShieldConfig | None = None
    """The shield (algorithms with the `shield` section)."""
    shielded: bool = False
    """Whether the algorithm's actions pass through a shield (its spec's `shielded`)."""
    base: Mapping[str, Any] = field(default_factory=dict)
    """The base config (`create_base_config` output), for to_dict and wandb."""
    algo_params: Mapping[str, Any] = field(default_factory=dict)
    """The `algo_params` as given (the sections hold their values)."""
    custom: Mapping[str, Any] = field(default_factory=dict)
    """Import paths of the run's task (`env`) and algorithm (`algo`) when given by a config."""

    @property
    def env_name(self) -> str:
        """Registry name of the env."""
        return self.env.name

    @property
    def max_risk(self) -> float:
        """The constraint: P(violation within `constraint_horizon` steps) <= max_risk."""
        return float(self.base["max_risk"])

    @property
    def constraint_horizon(self) -> int | None:
        """Steps the constraint covers: the base's `constraint_horizon` (the workflow sets it
        to the task's episode cap unless the config does), else the env's `max_steps`
        parameter; None when neither is given (`constraint_horizon_of` then takes the env's
        own cap)."""
        return recorded_constraint_horizon({**self.base, "env_params": self.env.params})

    def constraint_horizon_of(self, cap: int) -> int:
        """The constraint horizon of this run on an env whose episodes end by `cap` steps;
        raises ValueError when it is longer than the episode (nothing would be measured past
        the cap)."""
        horizon = self.constraint_horizon or int(cap)
        if horizon > cap:
            raise ValueError(
                f"constraint_horizon={horizon}: at most the episode cap max_steps={cap} of "
                f"env {self.env_name}"
            )
        return horizon

    def version(self, key: str) -> str:
        """The implementation version `key` (e.g. `lag_version`) of the base config."""
        return str(self.base[key])

    @property
    def eval_modes(self) -> tuple[bool, ...]:
        """Shield settings the final policy is evaluated with: on and off, or just off."""
        return (True, False) if self.shielded else (False,)

    def sections(self) -> dict[str, Section]:
        """The algorithm's sections by name (`SECTIONS`): `ppo`, and `lagrange` or `shield`
        where it has them."""
        held = {"ppo": self.ppo, "lagrange": self.lagrange, "shield": self.shield}
        return {name: section for name, section in held.items() if section is not None}

    def to_dict(self) -> dict[str, Any]:
        """The flat form a run records (config.json): the base config, the run keys and what
        `from_dict` resolved (`RECORDED_KEYS`)."""
        return {
            **dict(self.base),
            "algo": self.algo,
            "run_idx": self.run_idx,
            "seed": self.seed,
            "env_params": dict(self.env.params),
            "algo_params": dict(self.algo_params),
            "threads": self.threads,
            "checkpoint_every": self.checkpoint_every,
            **({"custom": dict(self.custom)} if self.custom else {}),
            "shielded": self.shielded,
            "sections": {name: section.tunables() for name, section in self.sections().items()},
        }

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | RunConfig) -> RunConfig:
        """Check a flat run config (e.g. a workflow's run) and build the typed sections, as
        the algorithm's spec names them.

        Raises `ConfigError` whose message is one line naming the key and the value.
        """
        if isinstance(config, RunConfig):
            return config
        if not isinstance(config, Mapping):
            raise ConfigError(f"a run config must be a mapping, got {type(config).__name__}")
        missing = [key for key in (*RUN_KEYS, *REQUIRED_BASE_KEYS) if key not in config]
        if missing:
            raise ConfigError(f"run config lacks the keys {missing}")
        _check_flat_keys(config)
        base = _base_of(config)
        custom = _check_custom(config.get("custom", {}), base["env_name"], config["algo"])
        try:
            spec = get_algorithm(config["algo"])
        except ValueError as error:
            raise ConfigError(f"algo={config['algo']!r}: {error}") from None
        for key in spec.version_keys:
            if base[key] not in versions_of(key):
                known = ", ".join(sorted(versions_of(key)))
                retired = RETIRED_VERSIONS.get(key, {}).get(base[key])
                raise ConfigError(
                    f"{key}={base[key]!r}: unknown {key} {base[key]!r} for {spec.name}; "
                    f"known: {known}" + (f" ({retired})" if retired else "")
                )
        algo_params = check_mapping("algo_params", config["algo_params"])
        sections = {name: SECTIONS[name] for name in spec.sections}
        tunable = {name for section in sections.values() for name in section.tunable_names()}
        unknown = sorted(set(algo_params) - tunable)
        # A key the code no longer reads is named as removed, with what became of it.
        removed = [key for key in unknown if key in RETIRED_KEYS and "shield" in sections]
        if removed:
            raise ConfigError(
                f"algo_params={removed}: removed from the shield: "
                + "; ".join(f"{key} ({RETIRED_KEYS[key]})" for key in removed)
            )
        if unknown:
            # The field meant, when one is close (difflib), for each unknown one.
            meant = [
                f"'{close[0]}'" + (f" for '{key}'" if len(unknown) > 1 else "")
                for key in unknown
                if (close := difflib.get_close_matches(key, sorted(tunable), n=1))
            ]
            hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
            raise ConfigError(
                f"algo_params={unknown}: unknown for {spec.name}{hint}; known: {sorted(tunable)}"
            )
        clash = sorted(set(algo_params) & set(spec.fixed))
        if clash:
            fixed = ", ".join(f"{key}={spec.fixed[key]!r}" for key in clash)
            raise ConfigError(
                f"algo_params={clash}: {spec.name} fixes {fixed}; choose another algorithm "
                "for another value"
            )
        params = {**algo_params, **spec.fixed}
        return cls._built(
            config,
            base,
            algo=spec.name,
            shielded=spec.shielded,
            sections={name: section.from_parts(base, params) for name, section in sections.items()},
            algo_params=algo_params,
            custom=custom,
        )

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, Any]) -> RunConfig:
        """The run config a run recorded (`to_dict`: its config.json, or the `config` entry of
        its policy.pt), as it was resolved when the run was made.

        Nothing is looked up again: the algorithm's sections and `shielded` are the recorded
        ones, the custom entries and version names are taken as recorded (they were checked
        when the run was made, and the code that rebuilds a policy checks them again). Every
        value is checked by its rule: the base by `create_base_config`, each section by its
        own, the identity and settings as `from_dict` checks them, and each `algo_params`
        entry must be what its section holds.

        Raises `ConfigError`, one line: naming the key and the value, or for a recording of
        another code version (keys this code does not know, or without keys it needs) the
        keys that differ.
        """
        if not isinstance(recorded, Mapping):
            raise ConfigError(f"a run config must be a mapping, got {type(recorded).__name__}")
        _check_recorded_keys(recorded)
        base = _base_of(recorded)
        sections = {
            name: SECTIONS[name].from_parts(base, values)
            for name, values in check_mapping("sections", recorded["sections"]).items()
        }
        algo_params = check_mapping("algo_params", recorded["algo_params"])
        held = {
            name: list(value) if isinstance(value, tuple) else value
            for part in sections.values()
            for name in part.tunable_names()
            for value in (getattr(part, name),)
        }
        for key, value in algo_params.items():
            given = list(value) if isinstance(value, tuple) else value
            if given != held[key]:
                raise ConfigError(
                    f"algo_params.{key}={shown(value)}: its section records {shown(held[key])}"
                )
        return cls._built(
            recorded,
            base,
            algo=check_str("algo", recorded["algo"]),
            shielded=check_bool("shielded", recorded["shielded"]),
            sections=sections,
            algo_params=algo_params,
            custom=check_mapping("custom", recorded.get("custom", {})),
        )

    @classmethod
    def _built(
        cls,
        config: Mapping[str, Any],
        base: dict[str, Any],
        *,
        algo: str,
        shielded: bool,
        sections: Mapping[str, Section],
        algo_params: dict[str, Any],
        custom: dict[str, Any],
    ) -> RunConfig:
        """The run config of the flat `config` whose base is `base` and whose algorithm makes
        the rest (`algo` ... `custom`); checks the identity and settings."""
        run_idx = check_int("run_idx", config["run_idx"], low=0)
        seed = check_int("seed", config["seed"], low=0)
        if seed != base["seed_offset"] + run_idx:
            raise fail("seed", seed, f"seed_offset + run_idx = {base['seed_offset'] + run_idx}")
        env_params = check_mapping("env_params", config["env_params"])
        for key in ("n_agents", "num_envs"):
            if key in env_params:
                raise ConfigError(
                    f"env_params.{key}={env_params[key]!r}: must not be set there; "
                    f"{key} is a base-config key"
                )
        return cls(
            algo=algo,
            run_idx=run_idx,
            seed=seed,
            threads=check_int("threads", config["threads"], low=1, high=MAX_THREADS),
            checkpoint_every=check_int(
                "checkpoint_every", config["checkpoint_every"], low=1, high=1_000_000
            ),
            env=EnvConfig(
                name=check_str("env_name", base["env_name"]),
                n_agents=base["n_agents"],
                params=env_params,
            ),
            ppo=sections["ppo"],
            evaluation=EvalConfig.from_parts(base, {}),
            lagrange=sections.get("lagrange"),
            shield=sections.get("shield"),
            shielded=shielded,
            base=base,
            algo_params=algo_params,
            custom=custom,
        )


def _base_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The base config of a flat run config: its keys but the run's, through
    `create_base_config`."""
    given = {
        key: value
        for key, value in config.items()
        if key not in (*RUN_KEYS, *OPTIONAL_RUN_KEYS, *METADATA_KEYS, *RECORDED_KEYS)
    }
    horizons = given.get("final_policy_eval_horizons")
    if isinstance(horizons, list):
        given["final_policy_eval_horizons"] = tuple(horizons)
    return create_base_config(**given)


def _check_flat_keys(config: Mapping[str, Any]) -> None:
    """Refuse a key that no part of a run reads (a section's field given at the top level
    instead of in `algo_params` would otherwise keep its default without a word)."""
    known = {*BASE_CHECKS, *OPTIONAL_CHECKS, *RUN_KEYS, *OPTIONAL_RUN_KEYS}
    unknown = sorted(
        str(key) for key in config if key not in {*known, *METADATA_KEYS, *RECORDED_KEYS}
    )
    if unknown:
        fields = {name for section in SECTIONS.values() for name in section.tunable_names()}
        placed = [key for key in unknown if key in fields]
        hint = f": set {shown(placed)} in algo_params" if placed else ""
        raise ConfigError(f"run config has unknown keys {shown(unknown)}{hint}")


def _check_recorded_keys(recorded: Mapping[str, Any]) -> None:
    """Refuse a recording whose keys are not those this code records: with keys it does not
    know (top-level, a section or its field as `sections.NAME.FIELD`, an `algo_params` entry
    that no recorded section has) or without keys it needs."""
    known = {*BASE_CHECKS, *OPTIONAL_CHECKS, *RUN_KEYS, *OPTIONAL_RUN_KEYS, *RECORDED_KEYS}
    unknown = [str(key) for key in recorded if key not in {*known, *METADATA_KEYS}]
    missing = [key for key in (*BASE_CHECKS, *RUN_KEYS, *RECORDED_KEYS) if key not in recorded]
    sections = recorded.get("sections")
    if isinstance(sections, Mapping):
        fields: set[str] = set()
        for name, values in sections.items():
            if name not in SECTIONS:
                unknown.append(f"sections.{name}")
                continue
            if not isinstance(values, Mapping):
                raise fail(f"sections.{name}", values, "a mapping of the section's fields")
            names = SECTIONS[name].tunable_names()
            fields.update(names)
            unknown += [f"sections.{name}.{key}" for key in values if key not in names]
            optional = SECTIONS[name].RECORDED_IF_SET
            missing += [
                f"sections.{name}.{key}"
                for key in names
                if key not in values and key not in optional
            ]
        if "ppo" not in sections:
            missing.append("sections.ppo")
        params = recorded.get("algo_params")
        if isinstance(params, Mapping):
            unknown += [f"algo_params.{key}" for key in params if key not in fields]
    if unknown or missing:
        differ = [
            f"{kind} keys {shown(keys)}"
            for kind, keys in (("unknown", unknown), ("missing", missing))
            if keys
        ]
        raise ConfigError(
            f"recorded by another code version: {', '.join(differ)}; rerun the training"
        )


def _check_custom(given: Any, env: Any, algo: Any) -> dict[str, Any]:
    """The run's `custom` entry, which must name what this process has registered for its env
    and algorithm: a run trained with one task or algorithm is never read as another, and a
    run config never makes anything be imported (the config the user runs registers them)."""
    recorded = check_mapping("custom", given)
    expected = recorded_entries(str(env), str(algo))
    if recorded != expected:
        names = ", ".join(
            f"{kind} {name!r}" for kind, name in (("env", env), ("algo", algo)) if kind in recorded
        )
        if not expected:
            why = (
                f"{names} given by import path, and none of them is registered in this "
                "process: register them first (the workflow config's custom_envs/custom_algos "
                "through check_workflow_config, or src.custom.register_env/register_algorithm)"
            )
        else:
            why = (
                f"must be {expected}, what this process has registered for env {env!r} and "
                f"algo {algo!r}"
            )
        raise ConfigError(f"custom={recorded!r}: {why}")
    return recorded


def make_run_config(
    *,
    env_name: str = "hazard_grid",
    algo: str = "ippo",
    run_idx: int = 0,
    num_envs: int = 4,
    n_agents: int = 2,
    timesteps: int = 2048,
    rollouts: int = 32,
    learning_epochs: int = 2,
    mini_batches: int = 4,
    learning_rate: float = 3e-4,
    max_risk: float = 0.1,
    seed_offset: int = 0,
    env_params: dict | None = None,
    algo_params: dict | None = None,
    threads: int = 1,
    checkpoint_every: int = 1,
    **base_overrides: Any,
) -> dict[str, Any]:
    """A flat run config for tests and benchmarks, built like the workflow builds one (with
    `custom`, the import paths of the task and algorithm, when this process registered them)."""
    base = create_base_config(
        env_name,
        num_envs,
        n_agents,
        timesteps,
        1 + run_idx,
        rollouts,
        learning_epochs,
        mini_batches,
        learning_rate,
        max_risk,
        False,
        seed_offset=seed_offset,
        **base_overrides,
    )
    return {
        **base,
        "algo": algo,
        "run_idx": run_idx,
        "seed": seed_offset + run_idx,
        "env_params": dict(env_params or {}),
        "algo_params": dict(algo_params or {}),
        "threads": threads,
        "checkpoint_every": checkpoint_every,
        **({"custom": custom} if (custom := recorded_entries(env_name, algo)) else {}),
    }
