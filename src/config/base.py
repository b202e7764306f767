"""`create_base_config`: the validated base config of an experiment, and the rule of every key.

`BASE_CHECKS` holds the one rule of each base-config key; `create_base_config` applies it to
every argument, `check_base_value` to one key (the workflow uses it to report a bad value of
`base.<key>` in the YAML config), and the wandb keys read by `start_run` have theirs in
`OPTIONAL_CHECKS`. Nothing after `create_base_config` checks these values again: the typed
sections of `src.config.run.RunConfig` are built from its output.
"""

import inspect
import itertools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from src.checks import (
    ConfigError,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_probability,
    check_str,
    fail,
    is_int,
)

__all__ = [
    "BASE_CHECKS",
    "CREDIBLE_SCHEDULES",
    "LIMITS",
    "OPPONENT_MODES",
    "OPTIONAL_CHECKS",
    "REQUIRED_BASE_KEYS",
    "REWARD_MODES",
    "SEED_MAX",
    "UNREAD_KEYS",
    "VERSION_KEYS",
    "WANDB_MODES",
    "check_base_value",
    "check_optional_value",
    "create_base_config",
    "recorded_constraint_horizon",
]

WANDB_MODES = ("offline", "online", "disabled")
OPPONENT_MODES = ("model", "uniform", "monotone_floor")
REWARD_MODES = ("bayesian", "frequentist", "mean")
CREDIBLE_SCHEDULES = ("summable", "constant")
# Base-config keys that select an implementation variant from a registry.
VERSION_KEYS = ("ippo_version", "lag_version", "shield_version", "wm_version", "om_version")
UNREAD_KEYS = ("shield_reward_mode", "shield_credible_schedule")
"""Keys of `create_base_config` by whose value no shield version decides: accepted with their
default only (`_unread`), so that a config which sets another one is refused instead of
ignored. The shield decides by its models' risk against its allowance and certifies with its
own exact test; only the calibrated risk it reports uses these defaults."""

_TAG_PATTERN = re.compile(r"[A-Za-z0-9_.\-]*")
# Characters wandb refuses in a project name (it names a URL path segment on the server).
_WANDB_PROJECT_FORBIDDEN = set("/\\#?%:")
_WANDB_PROJECT_MAX = 128


def _tag(key: str, value: Any) -> str:
    # The tag names a results folder (results/{tag}/) and the wandb group.
    if not isinstance(value, str) or not _TAG_PATTERN.fullmatch(value) or value in (".", ".."):
        raise fail(key, value, "a string of letters, digits, '-', '_' and '.' (may be empty)")
    return value


def _horizons(key: str, value: Any) -> list[int]:
    top = LIMITS["final_policy_eval_horizon"]
    requirement = f"a non-empty, strictly increasing sequence of ints in [1, {top}]"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
        raise fail(key, value, requirement)
    if not all(is_int(item) and 1 <= item <= top for item in value):
        raise fail(key, value, requirement)
    horizons = [int(item) for item in value]
    if any(b <= a for a, b in itertools.pairwise(horizons)):
        raise fail(key, value, requirement)
    return horizons


def _unread(key: str, value: Any) -> str:
    # The default of `key` in create_base_config's signature (read at call time).
    default = inspect.signature(create_base_config).parameters[key].default
    if value != default:
        raise ConfigError(
            f"{key}={value!r}: no shield version decides by another value (the shield decides "
            "by its models' risk against its allowance and certifies with its own exact test; "
            f"the calibrated risk it reports uses the default {default!r}); leave it at "
            f"{default!r} or remove it"
        )
    return default


def _wandb_project(key: str, value: Any) -> str:
    project = check_str(key, value)
    bad = sorted(_WANDB_PROJECT_FORBIDDEN & set(project))
    if bad or len(project) > _WANDB_PROJECT_MAX or project != project.strip():
        raise fail(
            key,
            value,
            f"a wandb project name: at most {_WANDB_PROJECT_MAX} characters, no surrounding "
            f"spaces and none of {' '.join(sorted(_WANDB_PROJECT_FORBIDDEN))}",
        )
    return project


def _wandb_dir(key: str, value: Any) -> str:
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise fail(key, value, "a non-empty path")
    return str(value)


SEED_MAX = 2**32 - 1
"""The largest seed the pipeline derives: NumPy's legacy seeding and the envs' reset seeds take
32-bit values, so every seed derived from `seed_offset` and `final_policy_eval_seed_offset`
must fit (`_check_consistency`)."""

# Upper limits of the sizes: far above any experiment this pipeline runs on one machine or a
# cluster, low enough that a typo (an extra zero or three) is refused before anything is
# allocated or scheduled.
LIMITS: dict[str, int] = {
    "num_envs": 4096,
    "n_agents": 64,
    "timesteps": 1_000_000_000,
    "num_runs": 1000,
    "rollouts": 100_000,
    "learning_epochs": 1000,
    "mini_batches": 1_000_000,
    "shield_patience": 1_000_000,
    "final_policy_eval_episodes": 1_000_000,
    "final_policy_eval_horizon": 100_000,
    "final_policy_eval_num_envs": 4096,
    "seed_offset": SEED_MAX,
    "final_policy_eval_seed_offset": SEED_MAX,
}


def _positive(key: str, value: Any) -> int:
    return check_int(key, value, low=1, high=LIMITS.get(key))


def _non_negative(key: str, value: Any) -> int:
    return check_int(key, value, low=0, high=LIMITS.get(key))


# The rule of each key of the base config, in create_base_config's parameter order.
BASE_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "env_name": check_str,
    "num_envs": _positive,
    "n_agents": _positive,
    "timesteps": _positive,
    "num_runs": _positive,
    "rollouts": _positive,
    "learning_epochs": _positive,
    "mini_batches": _positive,
    "learning_rate": lambda k, v: check_float(k, v, low=0.0),
    "max_risk": check_probability,
    "use_wandb": check_bool,
    "shield_patience": _non_negative,
    "shield_opponent_mode": lambda k, v: check_choice(k, v, OPPONENT_MODES),
    "shield_reward_mode": _unread,
    "shield_credible_delta": check_probability,
    "shield_credible_schedule": _unread,
    "experiment_tag": _tag,
    "seed_offset": _non_negative,
    "wm_version": check_str,
    "om_version": check_str,
    "ippo_version": check_str,
    "lag_version": check_str,
    "shield_version": check_str,
    "final_policy_eval_episodes": _non_negative,
    "final_policy_eval_horizons": _horizons,
    "final_policy_eval_seed_offset": _non_negative,
    "final_policy_eval_confidence": check_probability,
}
# Keys that may arrive through **overrides and have a rule of their own.
OPTIONAL_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "wandb_mode": lambda k, v: check_choice(k, v, WANDB_MODES),
    "wandb_project": _wandb_project,
    "wandb_dir": _wandb_dir,
    "final_policy_eval_num_envs": _positive,
    # Steps of the constraint P(violation within them) <= max_risk; the workflow sets it to
    # the task's episode cap `max_steps` unless the config does (`RunConfig.constraint_horizon`).
    "constraint_horizon": lambda k, v: check_int(
        k, v, low=1, high=LIMITS["final_policy_eval_horizon"]
    ),
}


def check_base_value(key: str, value: Any) -> Any:
    """Check one base-config key by its rule; returns the normalised value."""
    if key not in BASE_CHECKS:
        raise ConfigError(f"unknown base-config key {key!r}; known: {', '.join(BASE_CHECKS)}")
    return BASE_CHECKS[key](key, value)


def check_optional_value(key: str, value: Any) -> Any:
    """Check an override key that has a rule (`OPTIONAL_CHECKS`); others are returned as is."""
    check = OPTIONAL_CHECKS.get(key)
    return value if check is None else check(key, value)


def _check_consistency(cfg: Mapping[str, Any]) -> None:
    """Cross-key rules of the PPO loop: whole minibatches and at least one update."""
    batch = cfg["num_envs"] * cfg["rollouts"] * cfg["n_agents"]
    if batch % cfg["mini_batches"] != 0:
        raise ConfigError(
            f"mini_batches={cfg['mini_batches']!r}: must divide the PPO batch "
            f"num_envs*rollouts*n_agents = {cfg['num_envs']}*{cfg['rollouts']}*"
            f"{cfg['n_agents']} = {batch}"
        )
    per_update = cfg["num_envs"] * cfg["rollouts"]
    if cfg["timesteps"] < per_update:
        raise ConfigError(
            f"timesteps={cfg['timesteps']!r}: must be >= num_envs*rollouts = "
            f"{cfg['num_envs']}*{cfg['rollouts']} = {per_update} (at least one policy update)"
        )
    # Run i is seeded seed_offset + i (its env copies reset from seeds hashed from it,
    # src.seeds.copy_seeds); evaluation episode j with final_policy_eval_seed_offset + j. The
    # largest of each must fit every RNG.
    offset = cfg["seed_offset"]
    top = offset + cfg["num_runs"] - 1 + cfg["num_envs"] - 1
    if top > SEED_MAX:
        raise ConfigError(
            f"seed_offset={offset!r}: its largest seed, seed_offset + (num_runs - 1) + "
            f"(num_envs - 1) = {top}, must be at most {SEED_MAX} (2**32 - 1)"
        )
    # Run r evaluates the seeds offset + r * N + i, i < N (disjoint layouts per run).
    offset = cfg["final_policy_eval_seed_offset"]
    top = offset + cfg["num_runs"] * max(cfg["final_policy_eval_episodes"], 1) - 1
    if top > SEED_MAX:
        raise ConfigError(
            f"final_policy_eval_seed_offset={offset!r}: its largest seed, "
            f"final_policy_eval_seed_offset + num_runs * final_policy_eval_episodes - 1 = "
            f"{top}, must be at most {SEED_MAX} (2**32 - 1)"
        )


def create_base_config(
    env_name: str,
    num_envs: int,
    n_agents: int,
    timesteps: int,
    num_runs: int,
    rollouts: int,
    learning_epochs: int,
    mini_batches: int,
    learning_rate: float,
    max_risk: float,
    use_wandb: bool,
    shield_patience: int = 64,
    shield_opponent_mode: str = "monotone_floor",
    shield_reward_mode: str = "bayesian",
    shield_credible_delta: float = 0.05,
    shield_credible_schedule: str = "summable",
    experiment_tag: str = "",
    seed_offset: int = 0,
    wm_version: str = "v0",
    om_version: str = "v0",
    ippo_version: str = "v0",
    lag_version: str = "v0",
    shield_version: str = "v0",
    final_policy_eval_episodes: int = 0,
    final_policy_eval_horizons: tuple[int, ...] = (
        1,
        10,
        50,
        100,
        200,
    ),
    final_policy_eval_seed_offset: int = 1000000,
    final_policy_eval_confidence: float = 0.95,
    **overrides: Any,
) -> dict:
    """Create a base config dict with required values, allowing arbitrary overrides/additions
    via **overrides.

    Every value is checked (type, range, known mode) and a bad one raises `ConfigError`
    naming the key and the value, e.g. ``max_risk=1.5: must be a float in (0.0, 1.0)``.
    `shield_reward_mode` and `shield_credible_schedule` take their defaults only
    (`UNREAD_KEYS`: no shield version decides by them).
    Cross-key rules: `mini_batches` divides the PPO batch `num_envs * rollouts * n_agents`,
    `timesteps >= num_envs * rollouts` (at least one policy update), and every derived seed
    (`seed_offset + run + env copy`, `final_policy_eval_seed_offset + episode`) is at most
    `SEED_MAX`.

    The result is a plain, JSON-serialisable dict: keys in parameter order, then the
    overrides in the order given. Numbers are plain `int`/`float` (numpy scalars are
    converted) and `final_policy_eval_horizons` is stored as a `list` of ints, so the dict
    equals its own JSON round trip. Overrides may add any JSON-serialisable key; the
    optional keys with a rule of their own are checked too: `wandb_mode` (offline, online,
    disabled), `wandb_project` (a name wandb accepts), `wandb_dir` (path, stored as a
    string), `final_policy_eval_num_envs` (int >= 1), `constraint_horizon` (int >= 1: the
    steps the constraint covers). Env names are checked by the env
    registry, implementation versions by the algorithm registry (`src.config.run`).

    >>> cfg = create_base_config("hazard_grid", 2, 2, 64, 1, 16, 2, 4, 3e-4, 0.1, False)
    >>> cfg["final_policy_eval_horizons"], cfg["shield_reward_mode"]
    ([1, 10, 50, 100, 200], 'bayesian')
    """
    given = dict(locals())
    given.pop("overrides")
    cfg = {key: check(key, given[key]) for key, check in BASE_CHECKS.items()}
    _check_consistency(cfg)
    for key, value in overrides.items():
        value = check_optional_value(key, value)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ConfigError(
                f"{key}={value!r}: must be JSON-serialisable (finite numbers, strings, bools, "
                f"None, lists and dicts with string keys): {error}"
            ) from None
        cfg[key] = value
    return cfg


# Parameters of create_base_config without a default.
REQUIRED_BASE_KEYS: tuple[str, ...] = tuple(
    name
    for name, parameter in inspect.signature(create_base_config).parameters.items()
    if parameter.default is inspect.Parameter.empty and parameter.kind is not parameter.VAR_KEYWORD
)


def recorded_constraint_horizon(config: Mapping[str, Any]) -> int | None:
    """The steps a flat run config's constraint covers: its `constraint_horizon`, else its
    env's `env_params["max_steps"]` (a config from before the key), else None.

    >>> recorded_constraint_horizon({"constraint_horizon": 200, "env_params": {"max_steps": 100}})
    200
    >>> recorded_constraint_horizon({"env_params": {"max_steps": 100}})
    100
    """
    given = config.get("constraint_horizon")
    params = config.get("env_params")
    if given is None and isinstance(params, Mapping):
        given = params.get("max_steps")
    return None if given is None else int(given)
