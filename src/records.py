"""`EpisodeLog`: the record of one finished training episode, and reading a run's history.

Training appends one `EpisodeLog` per finished episode of every env copy; the run's
`history.json` is the list of them (`save_to_file`), `load_history` reads it back, and
`src.core.wandb.log_history` logs it as one wandb row per episode at `step = t_end`. A run
whose training finished no episode has no history to summarise: its training job ends with
`NoTrainingEpisodeError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from src.checks import check_bool, check_float, check_int, fail, is_int

__all__ = ["EpisodeLog", "NoTrainingEpisodeError", "load_history"]


class NoTrainingEpisodeError(RuntimeError):
    """A run's training finished without a single episode (`src.algos.train.train_run` raises
    it before writing the run's files): the summary and the learning curves need at least one.
    Its message is one line naming the run folder."""


def _as_int(name: str, value: Any, *, minimum: int) -> int:
    return check_int(f"EpisodeLog.{name}", value, low=minimum)


def _as_float(name: str, value: Any) -> float:
    return check_float(f"EpisodeLog.{name}", value)


def _as_bool(name: str, value: Any) -> bool:
    # NumPy bools are accepted (trainers compute flags with numpy).
    return check_bool(f"EpisodeLog.{name}", value)


@dataclass(frozen=True, kw_only=True)
class EpisodeLog:
    """One finished training episode of one env copy.

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
        if not is_int(fvs):
            raise fail("EpisodeLog.first_violation_step", fvs, "an int")
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
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeLog:
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
    list of dicts, or a Parquet table with one row per episode. Raises `CorruptFileError` (a
    `ValueError`), one line naming the file (and the entry), when it holds no list or an
    entry is not a valid `EpisodeLog`.
    """
    from src.core.io import CorruptFileError, load_from_file

    data = load_from_file(dir, filename)
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        data = data.to_dict(orient="records")  # a DataFrame read from .parquet
    path = Path(dir) / filename
    fmt = path.suffix
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise CorruptFileError(
            f"{path}: expected a list of episode records, got {type(data).__name__}",
            path=path,
            format=fmt,
        )
    history = []
    for index, entry in enumerate(data):
        try:
            history.append(EpisodeLog.from_dict(entry))
        except (TypeError, ValueError) as error:
            why = " ".join(str(error).split())[:500]
            raise CorruptFileError(f"{path}: entry {index}: {why}", path=path, format=fmt) from None
    return history
