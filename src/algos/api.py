"""Writing an algorithm: everything a trainer receives, must provide, and may use, in one module.

An algorithm is a class that a config names by import path (`custom_algos: {name:
"module:Class"}`); the workflow then trains, checkpoints, evaluates, renders, tabulates and
plots it like the built-in ones. Import what it needs from here, and nothing else of `src`:

    from src.algos.api import EpisodeTracker, RunConfig, VectorEnv, copy_seeds, update_row

`examples/reinforce.py` is a complete algorithm written against this module only, and
`docs/algorithms.md` ("Writing an algorithm") walks through it.

**What a trainer receives.** `train_run` (the train rule) seeds Python's, NumPy's and torch's
global generators from the run's seed, then builds the trainer as `Class(config, env)`:

- `config`, a `RunConfig`: `seed` (= `seed_offset + run_idx`), `run_idx`, `algo`, `env_name`,
  `max_risk` and `constraint_horizon` (the constraint), and the sections the class declares in
  `sections` (`ppo` always: `num_envs`, `rollouts`, `num_updates`, `steps_per_update`,
  `learning_rate`, `gamma`, `ent_coef`, `hidden_sizes`, ...; a config's `algo_params.<name>`
  sets their tunable fields);
- `env`, a `VectorEnv` of `config.ppo.num_envs` copies: `reset(seed) -> obs [E, A, D]`,
  `step(actions [E, A]) -> StepResult` (`reward`, `cost`, `terminated`, `truncated` `[E, A]`;
  finished copies reset themselves), `n_agents`, `obs_dim`, `n_actions`, `get_state()` /
  `set_state()`;
- seeds: reset the env copies, once, with `copy_seeds(config.seed, env.num_envs)` (the
  training range of `src.seeds`, which the evaluation and the certificates never use); draw
  anything else random from generators seeded from `config.seed`.

**What it must provide** (`Algorithm`; `src.algos.registry` checks the class, `train_run` the
instance). Capabilities as class attributes (`CAPABILITY_DEFAULTS`: `constrained`, `shielded`,
`multiplier`, `sections`, `action_kinds`; `description`), the instance attributes of
`REQUIRED_ATTRIBUTES`, and the methods of `REQUIRED_METHODS`. `train_run` writes the run
folder from them when `train` returns:

- `history` -> `history.json`: one `EpisodeLog` per finished training episode (the summary's
  training columns and the learning curves; `EpisodeTracker` makes them). A run that finished
  no episode is refused at the end of its training job (`NoTrainingEpisodeError`), before any
  of these files is written;
- `updates` -> `updates.json`: one row per update with the keys `UPDATE_KEYS` and metric
  constants only (`METRIC_KEYS`, the names of `src.algos.metrics`; any other key is refused by
  the export). `update_row` builds one. The figures and the results page read `LAMBDA`
  (an algorithm with `multiplier = True`) and `SHIELD_INTERVENTIONS` (`shielded = True`);
  every algorithm logs `EPISODE_METRICS`;
- `policy_state()` -> `policy.pt`: tensors, state dicts and plain values, with the run config
  under `POLICY_CONFIG` (`config.to_dict()`); the class method `load_actor(policy_state,
  config, *, shielded)` turns it back into a `PolicyActor` for the evaluation and the videos;
- `state()` / `load_state(state)` -> `checkpoint/` every `checkpoint_every` updates: dicts,
  lists, numbers, strings, NumPy arrays and tensors, everything a resumed run needs to go on
  as if never stopped (the env's `get_state()`, the generators, the tracker's `state_dict()`).

**Helpers.** `EpisodeTracker` (per-copy running sums of the episodes, their `EpisodeLog`s and
its own checkpointable state), `copy_seeds`, `episode_metrics` and `update_row`, the metric
constants (`metrics`), `register_algorithm` (register a class by import path, as a config's
`custom_algos` does) and `get_algorithm` (its checked `AlgorithmSpec`).

Try it: register the class, then `src.algos.train.train_run(config, out_dir)` with a run config
from `src.config.run.make_run_config(algo=..., env_name=..., ...)` trains one run (the tests do
so at a tiny budget), and a config naming it under `custom_algos` runs it through the workflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from src.algos import metrics
from src.algos.metrics import (
    EPISODE_COST,
    EPISODE_LENGTH,
    EPISODE_RETURN,
    GLOBAL_STEP,
    LAMBDA,
    LEARNING_RATE,
    SHIELD_INTERVENTIONS,
    VIOLATION_RATE,
)
from src.algos.registry import CAPABILITY_DEFAULTS, REQUIRED_METHODS, AlgorithmSpec, get_algorithm
from src.algos.tracker import EpisodeTracker
from src.config.run import RunConfig
from src.custom import register_algorithm
from src.envs.base import StepResult, VectorEnv
from src.records import EpisodeLog, NoTrainingEpisodeError
from src.seeds import copy_seeds

__all__ = [
    "CAPABILITY_DEFAULTS",
    "EPISODE_COST",
    "EPISODE_LENGTH",
    "EPISODE_METRICS",
    "EPISODE_RETURN",
    "GLOBAL_STEP",
    "LAMBDA",
    "LEARNING_RATE",
    "METRIC_KEYS",
    "POLICY_CONFIG",
    "REQUIRED_ATTRIBUTES",
    "REQUIRED_METHODS",
    "SHIELD_INTERVENTIONS",
    "UPDATE_KEYS",
    "VIOLATION_RATE",
    "Algorithm",
    "AlgorithmSpec",
    "EpisodeLog",
    "EpisodeTracker",
    "NoTrainingEpisodeError",
    "PolicyActor",
    "RunConfig",
    "StepResult",
    "TrainingCallback",
    "VectorEnv",
    "copy_seeds",
    "episode_metrics",
    "get_algorithm",
    "metrics",
    "register_algorithm",
    "update_row",
]

UPDATE_KEYS: tuple[str, ...] = ("update", "global_step", "wall_time")
"""The keys every row of `updates` has: the update's 0-based index, the env steps taken so far
(over all copies) and the seconds spent training so far (summed over resumes)."""

METRIC_KEYS: tuple[str, ...] = tuple(
    value
    for name, value in vars(metrics).items()
    if name.isupper() and isinstance(value, str) and "/" in value
)
"""Every metric name an update row may hold besides `UPDATE_KEYS` (the constants of
`src.algos.metrics`, the columns of the updates table)."""

EPISODE_METRICS: tuple[str, ...] = (EPISODE_RETURN, EPISODE_LENGTH, EPISODE_COST, VIOLATION_RATE)
"""The means over the episodes finished since the last update that every algorithm logs
(`episode_metrics`): wandb's training curves and the updates table show them."""

POLICY_CONFIG = "config"
"""The entry of `policy_state()` that holds the run config (`config.to_dict()`): loading a
policy reads it to know the run, its task and its algorithm."""

REQUIRED_ATTRIBUTES: tuple[str, ...] = (
    "num_updates",
    "steps_per_update",
    "update",
    "history",
    "updates",
)
"""Instance attributes `train_run` reads from every trainer (see `Algorithm`)."""


class TrainingCallback(Protocol):
    """What `train(callbacks=...)` is given: the checkpointing callback, and any a caller adds."""

    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        """After learning epoch `epoch` (0-based) of an update (IPPO's own mid-update point: an
        algorithm without epochs need not call it)."""
        ...

    def on_update_end(self, trainer: Any) -> None:
        """After an update is complete and its row appended (`trainer.update` updates done):
        every algorithm calls it, so that checkpoints are written."""
        ...


class Algorithm(Protocol):
    """What `train_run`, checkpoints and evaluation use of a trainer (IPPO and its subclasses
    are ones; an algorithm given by import path must be one: docs/algorithms.md).

    Built as `cls(config: RunConfig, env: VectorEnv)`. Capabilities are class attributes
    (`CAPABILITY_DEFAULTS`); `REQUIRED_METHODS` lists the methods, `REQUIRED_ATTRIBUTES` the
    instance attributes.
    """

    num_updates: int
    """Policy updates of the whole run (`config.ppo.num_updates`)."""
    steps_per_update: int
    """Env steps (over all copies) between updates (`config.ppo.steps_per_update`)."""
    update: int
    """Updates completed so far (restored by `load_state`)."""
    history: list[Any]
    """One `EpisodeLog` per finished training episode."""
    updates: list[dict[str, Any]]
    """One row per update: `UPDATE_KEYS` and metric constants (`update_row`)."""

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        """Run the remaining updates, calling each callback's `on_update_end(self)`."""
        ...

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs (dicts, lists, numbers, strings, arrays, tensors)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state()` returned."""
        ...

    def policy_state(self) -> dict[str, Any]:
        """The content of policy.pt (tensors, state dicts, plain values); it holds the run
        config under `POLICY_CONFIG`."""
        ...


class PolicyActor(Protocol):
    """What an algorithm's `load_actor(policy_state, config, *, shielded)` returns: the final
    policy, as the evaluation and the videos drive it."""

    shielded: bool
    """Whether its actions pass through a shield (False for an algorithm without one)."""
    last_intervened: np.ndarray | None
    """`[E, A]` bool: which agents' actions the shield changed in the last `act` (None: no
    shield)."""

    def reset(self, num_envs: int, seed: int) -> None:
        """Start acting in `num_envs` copies, drawing from a generator seeded with `seed`."""
        ...

    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        """Actions `[E, A]` (Discrete; `[E, A, ...]` for a Box) for observations `[E, A, D]`;
        `episode_step` `[E]` is the 1-based step of each copy's episode these actions take."""
        ...


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def episode_metrics(episodes: Sequence[EpisodeLog]) -> dict[str, float | None]:
    """`EPISODE_METRICS` of `episodes`: mean team return, length, cost and violation rate
    (None each, a null in the tables, when no episode finished).

    >>> episode_metrics([])[EPISODE_RETURN] is None
    True
    """
    return {
        EPISODE_RETURN: _mean([episode.team_return for episode in episodes]),
        EPISODE_LENGTH: _mean([episode.length for episode in episodes]),
        EPISODE_COST: _mean([episode.cost for episode in episodes]),
        VIOLATION_RATE: _mean([float(episode.violated) for episode in episodes]),
    }


def update_row(
    *,
    update: int,
    global_step: int,
    wall_time: float,
    episodes: Sequence[EpisodeLog],
    extra: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """One row of `updates`: `UPDATE_KEYS`, `GLOBAL_STEP`, the `episode_metrics` of the
    episodes finished during the update, and `extra` (metric constants: losses, `LAMBDA`, ...).

    A key of `extra` that is not a metric constant raises a `ValueError` naming it (the export
    would refuse the row at the end of the run), and so does a value that is neither a finite
    number nor None.
    """
    unknown = sorted(set(extra or {}) - set(METRIC_KEYS))
    if unknown:
        raise ValueError(
            f"update {update}: {unknown} are not metric constants of src.algos.metrics "
            "(the updates table has a column for each constant only)"
        )
    for key, value in (extra or {}).items():
        if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
            raise ValueError(f"update {update}: metric {key} = {value!r} is not a finite number")
    return {
        "update": int(update),
        "global_step": int(global_step),
        "wall_time": float(wall_time),
        GLOBAL_STEP: int(global_step),
        **episode_metrics(episodes),
        **{key: None if value is None else float(value) for key, value in (extra or {}).items()},
    }
