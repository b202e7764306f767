"""Experiment configuration and Weights & Biases logging.

- `create_base_config` builds the validated base config of an experiment (one per env).
- `start_run` opens one wandb run per (env, algo, run index): offline unless the config or
  `WANDB_MODE` says otherwise, and a disabled run when `use_wandb` is false.
- `EpisodeLog` is the record of one finished training episode (docs/architecture.md);
  `load_history` reads a run's saved history back.
- `log_history` logs a history as wandb rows, one row per episode at `step = t_end`.

`wandb` itself is imported only inside `start_run`: training jobs import `EpisodeLog` from
here and never need wandb (nor its import time).
"""

import itertools
import json
import math
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

__all__ = [
    "ConfigError",
    "EpisodeLog",
    "create_base_config",
    "load_history",
    "log_history",
    "start_run",
]


class ConfigError(ValueError):
    """A config value is missing, of the wrong type or out of range.

    The message is one line naming the key and the bad value.
    """


# ---------------------------------------------------------------------------------------------
# Value checks shared by create_base_config and start_run. Each returns the value normalised to
# a plain Python type (numpy scalars become int/float) so the config is JSON-serialisable.
# ---------------------------------------------------------------------------------------------

_TAG_PATTERN = re.compile(r"[A-Za-z0-9_.\-]*")
WANDB_MODES = ("offline", "online", "disabled")
SHIELD_OPPONENT_MODES = ("model", "uniform", "monotone_floor")
SHIELD_REWARD_MODES = ("bayesian", "frequentist", "mean")
SHIELD_CREDIBLE_SCHEDULES = ("summable", "constant")


def _fail(key: str, value: Any, requirement: str) -> ConfigError:
    hint = ""
    if isinstance(value, str) and requirement.startswith(("an int", "a float")):
        # PyYAML reads `3e-4` (no dot) as a string, a common way to end up here.
        hint = " (got a string; write numbers without quotes, e.g. 3.0e-4 in YAML)"
    return ConfigError(f"{key}={value!r}: must be {requirement}{hint}")


def _int(key: str, value: Any, *, minimum: int) -> int:
    # bool is an int subclass; True as a batch count is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(key, value, f"an int >= {minimum}")
    if value < minimum:
        raise _fail(key, value, f"an int >= {minimum}")
    return int(value)


def _float(key: str, value: Any, *, low: float, high: float | None, open_high: bool) -> float:
    """A finite real in (low, high) or (low, high] (open_high=False); high=None: unbounded."""
    if high is None:
        requirement = f"a float > {low}"
    else:
        requirement = f"a float in ({low}, {high}{')' if open_high else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(key, value, requirement)
    number = float(value)
    if not math.isfinite(number) or number <= low:
        raise _fail(key, value, requirement)
    if high is not None and (number > high or (open_high and number == high)):
        raise _fail(key, value, requirement)
    return number


def _probability(key: str, value: Any) -> float:
    return _float(key, value, low=0.0, high=1.0, open_high=True)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, value, "a bool (true or false)")
    return value


def _nonempty_str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, value, "a non-empty string")
    return value


def _choice(key: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(key, value, f"one of {', '.join(choices)}")
    return value


def _tag(key: str, value: Any) -> str:
    # The tag names a results folder (results/{tag}/) and the wandb group.
    if not isinstance(value, str) or not _TAG_PATTERN.fullmatch(value) or value in (".", ".."):
        raise _fail(key, value, "a string of letters, digits, '-', '_' and '.' (may be empty)")
    return value


def _horizons(key: str, value: Any) -> list[int]:
    requirement = "a non-empty, strictly increasing sequence of ints >= 1"
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise _fail(key, value, requirement)
    horizons = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral) or item < 1:
            raise _fail(key, value, requirement)
        horizons.append(int(item))
    if any(b <= a for a, b in itertools.pairwise(horizons)):
        raise _fail(key, value, requirement)
    return horizons


def _wandb_dir(key: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise _fail(key, value, "a non-empty path")
    return str(value)


# One checker per key of the base config. Optional keys that start_run reads (wandb_*) are
# checked the same way when they arrive through **overrides.
_CHECKS: dict[str, Any] = {
    "env_name": _nonempty_str,
    "num_envs": lambda k, v: _int(k, v, minimum=1),
    "n_agents": lambda k, v: _int(k, v, minimum=1),
    "timesteps": lambda k, v: _int(k, v, minimum=1),
    "num_runs": lambda k, v: _int(k, v, minimum=1),
    "rollouts": lambda k, v: _int(k, v, minimum=1),
    "learning_epochs": lambda k, v: _int(k, v, minimum=1),
    "mini_batches": lambda k, v: _int(k, v, minimum=1),
    "learning_rate": lambda k, v: _float(k, v, low=0.0, high=None, open_high=True),
    "max_risk": _probability,
    "use_wandb": _bool,
    "shield_patience": lambda k, v: _int(k, v, minimum=0),
    "shield_opponent_mode": lambda k, v: _choice(k, v, SHIELD_OPPONENT_MODES),
    "shield_reward_mode": lambda k, v: _choice(k, v, SHIELD_REWARD_MODES),
    "shield_credible_delta": _probability,
    "shield_credible_schedule": lambda k, v: _choice(k, v, SHIELD_CREDIBLE_SCHEDULES),
    "experiment_tag": _tag,
    "seed_offset": lambda k, v: _int(k, v, minimum=0),
    "wm_version": _nonempty_str,
    "om_version": _nonempty_str,
    "ippo_version": _nonempty_str,
    "lag_version": _nonempty_str,
    "shield_version": _nonempty_str,
    "final_policy_eval_episodes": lambda k, v: _int(k, v, minimum=0),
    "final_policy_eval_horizons": _horizons,
    "final_policy_eval_seed_offset": lambda k, v: _int(k, v, minimum=0),
    "final_policy_eval_confidence": _probability,
}
_OPTIONAL_CHECKS: dict[str, Any] = {
    "wandb_mode": lambda k, v: _choice(k, v, WANDB_MODES),
    "wandb_project": _nonempty_str,
    "wandb_dir": _wandb_dir,
}


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
    Cross-key rules: `mini_batches` divides the PPO batch `num_envs * rollouts * n_agents`,
    and `timesteps >= num_envs * rollouts` (at least one policy update).

    The result is a plain, JSON-serialisable dict: keys in parameter order, then the
    overrides in the order given. Numbers are plain `int`/`float` (numpy scalars are
    converted) and `final_policy_eval_horizons` is stored as a `list` of ints, so the dict
    equals its own JSON round trip. Overrides may add any JSON-serialisable key; the
    optional keys read by `start_run` are checked too: `wandb_mode` (offline, online,
    disabled), `wandb_project` (non-empty string), `wandb_dir` (path, stored as a string).
    Env names are checked by the workflow schema and the env registry, not here.

    >>> cfg = create_base_config("hazard_grid", 2, 2, 64, 1, 16, 2, 4, 3e-4, 0.1, False)
    >>> cfg["final_policy_eval_horizons"], cfg["shield_reward_mode"]
    ([1, 10, 50, 100, 200], 'bayesian')
    """
    given = dict(locals())
    given.pop("overrides")
    cfg = {key: check(key, given[key]) for key, check in _CHECKS.items()}
    _check_consistency(cfg)
    for key, value in overrides.items():
        if key in _OPTIONAL_CHECKS:
            value = _OPTIONAL_CHECKS[key](key, value)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ConfigError(
                f"{key}={value!r}: must be JSON-serialisable (finite numbers, strings, bools, "
                f"None, lists and dicts with string keys): {error}"
            ) from None
        cfg[key] = value
    return cfg


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

_RUN_IDENTITY_KEYS = ("algo", "run_idx", "seed")


def _run_mode(base_cfg: Mapping[str, Any]) -> str:
    """wandb mode: base_cfg['wandb_mode'], else $WANDB_MODE, else offline."""
    if base_cfg.get("wandb_mode"):
        return _choice("wandb_mode", base_cfg["wandb_mode"], WANDB_MODES)
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode:
        return _choice("WANDB_MODE (environment)", env_mode, WANDB_MODES)
    return "offline"


def start_run(
    algo: str,
    run_idx: int,
    base_cfg: dict,
    extra_cfg: dict | None = None,
) -> "Run":
    """Open the wandb run of one (env, algo, run index) and return it.

    With `base_cfg["use_wandb"]` false the run is disabled: a `wandb` no-op run whose `log`
    and `finish` do nothing and which writes no file. Otherwise the run is

    - `mode`: `base_cfg["wandb_mode"]`, else the `WANDB_MODE` environment variable, else
      `"offline"` (offline runs never touch the network; `wandb sync` uploads them later);
    - `project`: `base_cfg.get("wandb_project", "safe-marl")`;
    - `dir`: `base_cfg.get("wandb_dir")` (created if missing); wandb puts the run folder
      `offline-run-<time>-<id>/` (holding `run-<id>.wandb`) under `<dir>/wandb/`;
    - `group = experiment_tag` (no group when the tag is empty), `job_type = algo`,
      `name = f"{env_name}-{algo}-run{run_idx}"`;
    - `config = base_cfg | extra_cfg | {"algo", "run_idx", "seed": seed_offset + run_idx}`;
      an `algo`, `run_idx` or `seed` already in the configs must agree (a resolved run
      config does), otherwise `ConfigError`.

    Several runs may be open in one process (each call creates a new run); finish each
    with `run.finish()`. System-metric sampling, console capture and wandb's own usage
    analytics are off, so a run records only what is logged to it and an offline run opens
    no network connection. `run.finish()` returns before wandb's service process has
    flushed `run-<id>.wandb`: call `wandb.teardown()` (it waits for the service) before
    reading or syncing the files.

    Bad arguments raise `ValueError`/`TypeError` naming them; bad config values
    `ConfigError`, before any run is created.
    """
    if not isinstance(algo, str) or not algo.strip():
        raise ValueError(f"algo={algo!r}: must be a non-empty string")
    if isinstance(run_idx, bool) or not isinstance(run_idx, numbers.Integral) or run_idx < 0:
        raise ValueError(f"run_idx={run_idx!r}: must be an int >= 0")
    run_idx = int(run_idx)
    if not isinstance(base_cfg, Mapping):
        raise TypeError(f"base_cfg must be a dict (from create_base_config), got {base_cfg!r}")
    if extra_cfg is not None and not isinstance(extra_cfg, Mapping):
        raise TypeError(f"extra_cfg must be a dict or None, got {extra_cfg!r}")
    missing = [
        k for k in ("env_name", "use_wandb", "experiment_tag", "seed_offset") if k not in base_cfg
    ]
    if missing:
        raise ConfigError(
            f"base_cfg is missing {', '.join(missing)} (build it with create_base_config)"
        )
    # Re-check what was given: base_cfg may come from a config.json edited by hand.
    for key, value in base_cfg.items():
        check = _CHECKS.get(key) or _OPTIONAL_CHECKS.get(key)
        if check is not None:
            check(key, value)

    seed = int(base_cfg["seed_offset"]) + run_idx
    identity = {"algo": algo, "run_idx": run_idx, "seed": seed}
    config = {**base_cfg, **(extra_cfg or {})}
    for key in _RUN_IDENTITY_KEYS:
        # A resolved run config carries the same identity; a different one is a mix-up.
        if key in config and config[key] != identity[key]:
            raise ConfigError(
                f"{key}={config[key]!r}: contradicts the run being started "
                f"({key}={identity[key]!r})"
            )
    config.update(identity)

    from wandb.analytics.opentelemetry import opentelemetry_proxy

    # wandb 0.31 reports its own usage metrics (OpenTelemetry) to its server from every
    # run.log, offline runs included; runs of this project never touch the network unless
    # they are online runs, and never send usage metrics. This switch is process-wide.
    opentelemetry_proxy.disable()
    import wandb

    if not base_cfg["use_wandb"]:
        return wandb.init(mode="disabled", config=config, reinit="create_new")

    mode = _run_mode(base_cfg)
    wandb_dir = base_cfg.get("wandb_dir")
    if wandb_dir is not None:
        Path(wandb_dir).mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(
        console="off",  # no stdout/stderr capture: job logs go through src.core.logging
        x_disable_stats=True,  # no system-metrics sampler thread
        silent=True,
    )
    return wandb.init(
        mode=mode,
        project=base_cfg.get("wandb_project", "safe-marl"),
        dir=str(wandb_dir) if wandb_dir is not None else None,
        group=base_cfg["experiment_tag"] or None,
        job_type=algo,
        name=f"{base_cfg['env_name']}-{algo}-run{run_idx}",
        config=config,
        reinit="create_new",
        settings=settings,
    )


# ---------------------------------------------------------------------------------------------
# Episode history
# ---------------------------------------------------------------------------------------------


def _as_int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"EpisodeLog.{name}={value!r}: must be an int >= {minimum}")
    return int(value)


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"EpisodeLog.{name}={value!r}: must be a finite number")
    return float(value)


def _as_bool(name: str, value: Any) -> bool:
    # numpy.bool_ is not a bool subclass; accept it (trainers compute flags with numpy).
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"EpisodeLog.{name}={value!r}: must be a bool")
    return bool(value)


@dataclass(frozen=True, kw_only=True)
class EpisodeLog:
    """One finished training episode of one env copy (docs/architecture.md).

    Values are normalised on construction (numpy scalars become int/float/bool,
    `agent_returns` a tuple of floats) and checked: counters are non-negative ints
    (`length >= 1`),
    `t_end >= t_start`, returns and cost finite, cost >= 0, `violated` equals
    `cost > 0` and `first_violation_step != -1`, and `1 <= first_violation_step <= length`
    when violated. A bad value raises `ValueError` naming the field.
    """

    env: str
    """Env name (run identity)."""
    algo: str
    """Algorithm name (run identity)."""
    run: int
    """Run index (run identity)."""
    episode: int
    """0-based index over all finished episodes of the run."""
    env_copy: int
    """Which vector-env copy the episode ran in."""
    t_start: int
    """Global env step at which the episode started (vector steps * num_envs + copy)."""
    t_end: int
    """Global env step at which the episode ended; the wandb step of its row."""
    length: int
    """Steps in the episode."""
    team_return: float
    """Sum over agents and steps of reward."""
    agent_returns: tuple[float, ...]
    """Per-agent returns, in env.agents order."""
    cost: float
    """Sum over agents and steps of cost."""
    violated: bool
    """Whether any agent's cost was > 0 at some step."""
    first_violation_step: int
    """1-based step of the first violation, -1 if none."""
    truncated_by_cap: bool
    """Whether the hidden episode cap ended the episode."""
    shield_interventions: int
    """Actions replaced by the shield (0 for algorithms without a shield)."""

    def __post_init__(self) -> None:
        """Normalise numpy scalars to Python types and check every field."""
        values: dict[str, Any] = {}
        for name in ("env", "algo"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"EpisodeLog.{name}={value!r}: must be a non-empty string")
        for name in ("run", "episode", "env_copy", "t_start", "t_end"):
            values[name] = _as_int(name, getattr(self, name), minimum=0)
        values["length"] = _as_int("length", self.length, minimum=1)  # an episode takes a step
        values["shield_interventions"] = _as_int(
            "shield_interventions", self.shield_interventions, minimum=0
        )
        values["team_return"] = _as_float("team_return", self.team_return)
        values["cost"] = _as_float("cost", self.cost)
        returns = self.agent_returns
        # Any iterable of numbers (tuple, list from JSON, numpy array) but not a string/dict.
        try:
            if isinstance(returns, (str, bytes, Mapping)):
                raise TypeError
            items = list(returns)
        except TypeError:
            raise ValueError(
                f"EpisodeLog.agent_returns={returns!r}: must be a sequence of numbers"
            ) from None
        if not items:
            raise ValueError("EpisodeLog.agent_returns=(): must hold one return per agent")
        values["agent_returns"] = tuple(
            _as_float(f"agent_returns[{i}]", item) for i, item in enumerate(items)
        )
        values["violated"] = _as_bool("violated", self.violated)
        values["truncated_by_cap"] = _as_bool("truncated_by_cap", self.truncated_by_cap)
        fvs = self.first_violation_step
        if isinstance(fvs, bool) or not isinstance(fvs, numbers.Integral):
            raise ValueError(f"EpisodeLog.first_violation_step={fvs!r}: must be an int")
        values["first_violation_step"] = int(fvs)
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._check_relations()

    def _check_relations(self) -> None:
        if self.t_end < self.t_start:
            raise ValueError(f"EpisodeLog.t_end={self.t_end}: must be >= t_start={self.t_start}")
        if self.cost < 0:
            raise ValueError(f"EpisodeLog.cost={self.cost}: must be >= 0")
        if self.violated != (self.cost > 0):
            raise ValueError(
                f"EpisodeLog.violated={self.violated}: must equal cost > 0 (cost={self.cost})"
            )
        if self.violated:
            if not 1 <= self.first_violation_step <= self.length:
                raise ValueError(
                    f"EpisodeLog.first_violation_step={self.first_violation_step}: must be in "
                    f"[1, length={self.length}] when violated"
                )
        elif self.first_violation_step != -1:
            raise ValueError(
                f"EpisodeLog.first_violation_step={self.first_violation_step}: must be -1 when "
                "not violated"
            )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form: field name -> value, `agent_returns` as a list."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["agent_returns"] = list(self.agent_returns)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EpisodeLog":
        """Rebuild an `EpisodeLog` from its JSON form (the output of `to_dict`).

        Raises `TypeError` if `data` is not a mapping and `ValueError` naming the missing or
        unknown keys, or the bad value.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"EpisodeLog.from_dict needs a dict, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [name for name in names if name not in data]
        unknown = sorted(str(key) for key in data if key not in names)
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing keys: {', '.join(missing)}")
            if unknown:
                parts.append(f"unknown keys: {', '.join(unknown)}")
            raise ValueError(f"EpisodeLog.from_dict: {'; '.join(parts)}")
        return cls(**{name: data[name] for name in names})


def load_history(dir: str | Path, filename: str) -> list[EpisodeLog]:
    """Load a run's history (a list of `EpisodeLog` saved with `save_to_file`).

    Reads with `src.core.io.load_from_file`, so the format follows the suffix: a JSON/YAML
    list of dicts, or a Parquet table with one row per episode. Raises `ValueError` naming
    the file and the entry when an entry is not a valid `EpisodeLog`.
    """
    from src.core.io import load_from_file

    data = load_from_file(dir, filename)
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        data = data.to_dict(orient="records")  # a DataFrame read from .parquet
    path = Path(dir) / filename
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise ValueError(f"{path}: expected a list of episode records, got {type(data).__name__}")
    history = []
    for index, entry in enumerate(data):
        try:
            history.append(EpisodeLog.from_dict(entry))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: entry {index}: {error}") from None
    return history


def _episode_row(episode: EpisodeLog, prefix: str) -> dict[str, Any]:
    # Run identity (env, algo, run) is the same for every row and lives in the run's config.
    # Flags are logged as 0/1 so wandb can chart them and average them into rates.
    row: dict[str, Any] = {
        "episode": episode.episode,
        "env_copy": episode.env_copy,
        "t_start": episode.t_start,
        "t_end": episode.t_end,
        "length": episode.length,
        "team_return": episode.team_return,
        "cost": episode.cost,
        "violated": int(episode.violated),
        "first_violation_step": episode.first_violation_step,
        "truncated_by_cap": int(episode.truncated_by_cap),
        "shield_interventions": episode.shield_interventions,
    }
    for agent, value in enumerate(episode.agent_returns):
        row[f"agent_returns/{agent}"] = value
    return {f"{prefix}{key}": value for key, value in row.items()}


def _rows_from_dicts(rows: Sequence[Any], prefix: str) -> list[tuple[int | None, dict[str, Any]]]:
    out: list[tuple[int | None, dict[str, Any]]] = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(
                f"log_history: history[{index}] is {type(row).__name__}; a list history holds "
                "only EpisodeLog records or only dicts"
            )
        values = dict(row)
        step = values.pop("step", None)
        for key in values:
            if not isinstance(key, str):
                raise TypeError(f"log_history: history[{index}] has a non-string key {key!r}")
        if step is not None and (
            isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0
        ):
            raise ValueError(f"log_history: history[{index}]['step']={step!r}: must be an int >= 0")
        out.append(
            (None if step is None else int(step), {f"{prefix}{k}": v for k, v in values.items()})
        )
    return out


def log_history(run: "Run", history: Any, prefix: str = "") -> None:
    """Log a history to a wandb run, one `run.log` call per row.

    Supports

    - `list[EpisodeLog]`: one summary point per episode at `step = t_end`, episodes in
      `t_end` order. Keys are the record's fields (`team_return`, `cost`, `violated` and
      `truncated_by_cap` as 0/1, ..., one `agent_returns/<i>` per agent); run identity
      (env, algo, run) is not logged (it is in the run's config), and all episodes must come
      from one run. `t_end` is unique per run (an env copy finishes at most one episode per
      vector step), so two episodes with the same `t_end` raise `ValueError`.
    - a list of dicts: each dict is a row; an optional `"step"` key gives its step (not
      logged as a metric). Either every row has a step or none has.
    - a dict of lists: column name -> values (a list or 1-D numpy array), all of equal
      length; rows are zipped (a `"step"` column gives the steps).

    `prefix` is prepended to every key (e.g. `"train/"`). Each row is committed as it is
    logged, so it never merges with a later `run.log`; rows without a step continue wandb's
    own step counter. wandb silently drops rows whose step is below the run's current step
    (`run.step`, one past the last committed row), so steps must be strictly increasing and
    at least `run.step`: otherwise `ValueError`, raised before anything is logged. An empty
    history logs nothing. A history of any other type raises `TypeError` naming what was
    given.
    """
    if not callable(getattr(run, "log", None)):
        raise TypeError(
            f"log_history: run must be a wandb run (with .log), got {type(run).__name__}"
        )
    if not isinstance(prefix, str):
        raise TypeError(f"log_history: prefix must be a str, got {type(prefix).__name__}")

    rows: list[tuple[int | None, dict[str, Any]]]
    if isinstance(history, Mapping):
        rows = _rows_from_dicts(_zip_columns(history), prefix)
    elif isinstance(history, Sequence) and not isinstance(history, (str, bytes)):
        if history and all(isinstance(item, EpisodeLog) for item in history):
            rows = _rows_from_episodes(history, prefix)
        else:
            if any(isinstance(item, EpisodeLog) for item in history):
                raise TypeError(
                    "log_history: a list history holds only EpisodeLog records or only dicts, "
                    "got a mix"
                )
            rows = _rows_from_dicts(history, prefix)
    else:
        raise TypeError(
            "log_history: history must be a list of EpisodeLog, a list of dicts or a dict of "
            f"lists, got {type(history).__name__}"
        )

    _check_steps(rows, current=getattr(run, "step", 0))
    for step, row in rows:
        if step is None:
            run.log(row)
        else:
            # Commit each row now: an open row at `step` would absorb whatever is logged next
            # without a step (wandb merges same-step logs into one row).
            run.log(row, step=step, commit=True)


def _zip_columns(columns: Mapping[Any, Any]) -> list[dict[str, Any]]:
    lengths = {}
    lists = {}
    for key, values in columns.items():
        if not isinstance(key, str):
            raise TypeError(f"log_history: column name {key!r} is not a string")
        if isinstance(values, np.ndarray) and values.ndim == 1:
            values = values.tolist()  # plain Python scalars: JSON-encodable, steps are ints
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise TypeError(
                f"log_history: column {key!r} must be a list (or 1-D array) of values, got "
                f"{type(values).__name__}"
            )
        lists[key] = values
        lengths[key] = len(values)
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{key}: {n}" for key, n in lengths.items())
        raise ValueError(
            f"log_history: columns of a dict history must have equal lengths ({detail})"
        )
    n_rows = next(iter(lengths.values()), 0)
    return [{key: values[i] for key, values in lists.items()} for i in range(n_rows)]


def _rows_from_episodes(
    episodes: Sequence[EpisodeLog], prefix: str
) -> list[tuple[int | None, dict[str, Any]]]:
    identities = {(e.env, e.algo, e.run) for e in episodes}
    if len(identities) > 1:
        raise ValueError(
            f"log_history: episodes come from several runs {sorted(identities)}; log each run's "
            "history into its own wandb run"
        )
    ordered = sorted(episodes, key=lambda e: e.t_end)
    for first, second in itertools.pairwise(ordered):
        if first.t_end == second.t_end:
            raise ValueError(
                f"log_history: episodes {first.episode} and {second.episode} share "
                f"t_end={first.t_end}; t_end must be unique per run (one wandb row per step)"
            )
    return [(e.t_end, _episode_row(e, prefix)) for e in ordered]


def _check_steps(rows: Sequence[tuple[int | None, dict[str, Any]]], current: int) -> None:
    with_step = [step is not None for step, _ in rows]
    if any(with_step) and not all(with_step):
        raise ValueError("log_history: either every row has a 'step' or none has")
    if not rows or not with_step[0]:
        return
    steps = [step for step, _ in rows]
    if steps[0] < current:
        raise ValueError(
            f"log_history: first step {steps[0]} is below the run's current step {current}; "
            "wandb would drop these rows"
        )
    for index in range(1, len(steps)):
        if steps[index] <= steps[index - 1]:
            raise ValueError(
                f"log_history: steps must be strictly increasing, row {index} has step "
                f"{steps[index]} after {steps[index - 1]}"
            )
