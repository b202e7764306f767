"""The vector interface shared by every environment, and the checks its inputs go through.

Training and evaluation talk to every task through :class:`VectorEnv`: arrays in the layout
``[E, A, ...]`` (env copy, agent), finished copies reset automatically, and the observation a
finished episode reached is kept in :attr:`StepResult.final_obs` for bootstrapping.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "StepResult",
    "VectorEnv",
    "check_actions",
    "check_config",
    "check_int",
    "check_number",
    "check_probability",
    "check_snapshot",
    "first_reset_seeds",
    "joint_observation",
    "require_reset",
    "resolve_seeds",
]

# Seeds are turned into unsigned 64-bit keys; anything outside that range is a mistake.
_MAX_SEED = 2**64 - 1


class StepResult(NamedTuple):
    """What one vector step returns; every array is a fresh array owned by the caller."""

    obs: np.ndarray  # [E, A, D] float32, after auto-reset (first obs of the new episode)
    reward: np.ndarray  # [E, A] float32
    cost: np.ndarray  # [E, A] float32, > 0 is a violation by that agent
    terminated: np.ndarray  # [E, A] bool
    truncated: np.ndarray  # [E, A] bool (hidden cap)
    final_obs: np.ndarray  # [E, A, D] the observation reached by this step (before reset)
    episode_step: np.ndarray  # [E] int64, steps taken in the episode this step belongs to
    # [E, A] bool: the agent's cost includes a collision with another agent; None when the task
    # does not tell collisions from its other costs
    collision: np.ndarray | None = None
    # [E, A] bool: the agent reached its goal this step (the task's unit of work); None for
    # tasks without goals
    arrived: np.ndarray | None = None


class VectorEnv(ABC):
    """``num_envs`` copies of one multi-agent task stepped together.

    Episodes end for all agents of a copy at once (termination or the hidden ``max_steps``
    cap); the copy then resets itself, continuing its own random stream.
    """

    name: str
    num_envs: int  # E
    n_agents: int  # A
    agents: list[str]  # possible agents, fixed order
    obs_dim: int  # D
    n_actions: int  # discrete actions per agent
    max_steps: int  # hidden episode cap (never observed by agents)

    @abstractmethod
    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Start a new episode in every copy and return obs ``[E, A, D]`` float32.

        An int seeds copy ``e`` with ``seed + e``; a sequence gives one seed per copy. ``None``
        continues every copy's random stream (or uses the constructor's seed on the first
        reset; fresh OS entropy if no seed was ever given).
        """

    @abstractmethod
    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every copy by one step with ``actions [E, A]`` (integers)."""

    @abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Return a picklable snapshot holding everything needed to continue exactly."""

    @abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a snapshot made by :meth:`get_state` on an env with the same parameters."""

    @abstractmethod
    def render(self, index: int = 0) -> np.ndarray:
        """Return an ``[H, W, 3]`` uint8 frame of copy ``index``."""

    def close(self) -> None:  # noqa: B027 - optional hook: most envs hold nothing to release
        """Release resources held by the copies (nothing by default)."""


def joint_observation(obs: np.ndarray) -> np.ndarray:
    """Concatenate the agents' observations of each copy: ``[E, A, D] -> [E, A * D]``.

    This is the input of the world model.

    >>> joint_observation(np.zeros((2, 3, 4), dtype=np.float32)).shape
    (2, 12)
    """
    array = np.asarray(obs)
    if array.ndim != 3:
        raise ValueError(f"obs must have shape [E, A, D], got shape {array.shape}")
    num_envs, n_agents, obs_dim = array.shape
    return array.reshape(num_envs, n_agents * obs_dim)


def resolve_seeds(seed: int | Sequence[int] | None, num_envs: int) -> list[int] | None:
    """Turn a reset seed into one seed per copy (``seed + e`` for an int), or ``None``."""
    if seed is None:
        return None
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        seeds = [int(seed) + e for e in range(num_envs)]
    elif isinstance(seed, Sequence | np.ndarray) and not isinstance(seed, str | bytes):
        seeds = list(seed)
        if len(seeds) != num_envs:
            raise ValueError(
                f"seed sequence has {len(seeds)} entries, expected num_envs={num_envs}"
            )
        for value in seeds:
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"seed entries must be integers, got {value!r}")
        seeds = [int(value) for value in seeds]
    else:
        raise ValueError(f"seed must be an int, a sequence of ints or None, got {seed!r}")
    for value in seeds:
        if not 0 <= value <= _MAX_SEED:
            raise ValueError(f"seeds must lie in [0, 2**64 - 1], got {value}")
    return seeds


def first_reset_seeds(
    seed: int | Sequence[int] | None,
    num_envs: int,
    *,
    initial: list[int] | None,
    started: bool,
) -> list[int] | None:
    """The per-copy seeds of a reset of a counter- or generator-seeded batch.

    ``seed`` as :func:`resolve_seeds` reads it; if that is ``None`` and no reset has ``started``
    the streams yet, the constructor's seeds ``initial``, else fresh OS entropy (as Gymnasium
    does for unseeded resets). ``None`` means: continue every copy's stream.
    """
    seeds = resolve_seeds(seed, num_envs)
    if seeds is None and not started:
        seeds = initial
        if seeds is None:
            # Never seeded: fresh OS entropy, as Gymnasium does for unseeded resets.
            entropy = np.random.SeedSequence().generate_state(num_envs, dtype=np.uint64)
            seeds = [int(value) for value in entropy]
    return seeds


def require_reset(started: bool, method: str) -> None:
    """Raise ``RuntimeError`` unless a reset has ``started`` the episodes ``method`` needs."""
    if not started:
        raise RuntimeError(f"call reset() before {method}()")


def check_config(config: Any, config_class: type) -> None:
    """Raise ``ValueError`` unless ``config`` is a ``config_class`` (the env's parameters)."""
    if not isinstance(config, config_class):
        name = config_class.__name__
        article = "an" if name[:1] in "AEIOU" else "a"
        raise ValueError(f"config must be {article} {name}, got {type(config).__name__}")


def check_snapshot(
    state: Any,
    *,
    name: str,
    config: Any,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> None:
    """Raise ``ValueError`` unless ``state`` is a ``get_state()`` snapshot this env can restore.

    The snapshot must be a dict made by env ``name`` with the dataclass ``config``; with
    ``shapes``, it must also hold every array named there, each of the given shape.
    """
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict, got {type(state).__name__}")
    expected = shapes or {}
    missing = [key for key in expected if key not in state]
    if missing:
        raise ValueError(f"state lacks the entries {missing}")
    if state.get("name") != name or state.get("config") != asdict(config):
        raise ValueError(
            f"state belongs to {state.get('name')!r} with config {state.get('config')}, "
            f"not to {name!r} with config {asdict(config)}"
        )
    for key, shape in expected.items():
        if np.shape(state[key]) != shape:
            raise ValueError(f"state[{key!r}] has shape {np.shape(state[key])}, expected {shape}")


def check_actions(actions: Any, num_envs: int, n_agents: int, n_actions: int) -> np.ndarray:
    """Return ``actions`` as an int64 ``[E, A]`` array, or raise naming what is wrong."""
    array = np.asarray(actions)
    if array.shape != (num_envs, n_agents):
        raise ValueError(
            f"actions must have shape [E, A] = ({num_envs}, {n_agents}), got {array.shape}"
        )
    if array.dtype.kind not in "iu":
        raise ValueError(f"actions must be integers, got dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= n_actions):
        raise ValueError(
            f"actions must lie in [0, {n_actions - 1}], got values in "
            f"[{array.min()}, {array.max()}]"
        )
    return array.astype(np.int64, copy=False)


def check_int(name: str, value: Any, *, low: int, high: int | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in ``[low, high]``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bounds}, got {value}")


def check_number(name: str, value: Any) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite real number."""
    if (
        not isinstance(value, numbers.Real)
        or isinstance(value, bool)
        or not np.isfinite(float(value))
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def check_probability(name: str, value: Any) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a probability in ``[0, 1]``."""
    check_number(name, value)
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
