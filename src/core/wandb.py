"""Weights & Biases logging: open a run, log a history.

- `start_run` opens one wandb run per (env, algo, run index): offline unless the config or
  `WANDB_MODE` says otherwise, and a disabled run when `use_wandb` is false.
- `log_history` logs a history as wandb rows, one row per episode at `step = t_end`.
- `episode_rows` gives those episode rows as dicts with their `"step"`, to merge them with
  other rows (e.g. per-update metrics) by env step before `log_history` logs them.
- `create_base_config` (the experiment's base config, `src.config.base`) is published here.

`wandb` itself is imported only inside `start_run`, so importing this module is cheap.
"""

import itertools
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from src.checks import ConfigError, check_choice
from src.config.base import BASE_CHECKS, WANDB_MODES, check_optional_value, create_base_config
from src.records import EpisodeLog

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

__all__ = [
    "ConfigError",
    "create_base_config",
    "episode_rows",
    "log_history",
    "start_run",
]


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

_RUN_IDENTITY_KEYS = ("algo", "run_idx", "seed")


def _run_mode(base_cfg: Mapping[str, Any]) -> str:
    """wandb mode: base_cfg['wandb_mode'], else $WANDB_MODE, else offline."""
    if base_cfg.get("wandb_mode"):
        return check_choice("wandb_mode", base_cfg["wandb_mode"], WANDB_MODES)
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode:
        return check_choice("WANDB_MODE (environment)", env_mode, WANDB_MODES)
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
        if key in BASE_CHECKS:
            BASE_CHECKS[key](key, value)
        else:
            check_optional_value(key, value)

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


def episode_rows(history: Sequence[EpisodeLog], prefix: str = "") -> list[dict[str, Any]]:
    """The rows `log_history` logs for a list of `EpisodeLog`, as dicts in `t_end` order.

    Each dict holds the row's keys (prefixed by `prefix`) and its `"step"` (= `t_end`), so
    `log_history(run, episode_rows(history))` logs what `log_history(run, history)` logs, and
    other rows with steps can be merged in first. Raises like `log_history` (episodes of
    several runs or a shared `t_end`: `ValueError`; anything but `EpisodeLog` records:
    `TypeError`).
    """
    if not isinstance(prefix, str):
        raise TypeError(f"episode_rows: prefix must be a str, got {type(prefix).__name__}")
    if (
        not isinstance(history, Sequence)
        or isinstance(history, (str, bytes))
        or not all(isinstance(item, EpisodeLog) for item in history)
    ):
        raise TypeError(
            f"episode_rows: history must be a list of EpisodeLog, got {type(history).__name__}"
        )
    return [{"step": step, **row} for step, row in _rows_from_episodes(history, prefix)]


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
