"""The team's action space as the IPPO trainers see it: Discrete(n) for every agent, or one Box.

A parameter-shared policy needs every agent of the team to act in the same space. With
Discrete actions it is a categorical distribution over the logits (`networks.sample_actions`);
with a Box it is a Gaussian (`networks.sample_gaussian`, docs/design.md, section 6.1): the
policy samples unbounded actions, learns from the raw samples, and `BoxActions.to_env` clips
them to the Box's bounds only on their way to the env.

`team_action_box(env, env_name=..., params=...)` reads the Box of a `VectorEnv` whose
`continuous_actions` is set: its `action_space` (a task wrapped by `src.envs.task`), else the
action spaces of the agents of the registry's ParallelEnv of the same task (the native
`spread`), which must all be one Box (`shared_action_space`). A VectorEnv without
`continuous_actions` has Discrete actions, and nothing is read. A team that mixes Discrete and
Box agents, or agents of different Boxes, is refused in one line naming the agents and their
spaces; so is a Box of integers.

`BoxActions.describe()` is what `policy.pt` records under `POLICY_KEY`, and
`BoxActions.from_description` rebuilds it for the evaluation and the videos.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from src.custom import ComponentError

if TYPE_CHECKING:  # the config check reads the spaces without importing torch
    import torch

__all__ = [
    "POLICY_KEY",
    "BoxActions",
    "agent_action_spaces",
    "shared_action_space",
    "team_action_box",
]

POLICY_KEY = "action_space"
"""The entry of policy.pt that holds a Box policy's action space (`BoxActions.describe()`);
policies of Discrete actions have none."""


def _shown(space: spaces.Space) -> str:
    """A space as one line (a Box with per-entry bounds prints its arrays over several)."""
    return " ".join(str(space).split())


def _kind(space: spaces.Space) -> str:
    if isinstance(space, spaces.Discrete):
        return "Discrete"
    if isinstance(space, spaces.Box):
        return "Box"
    return type(space).__name__


def shared_action_space(action_spaces: Mapping[str, spaces.Space], *, env: str) -> spaces.Space:
    """The one action space of a team (`action_spaces`: agent -> its space), Discrete or Box.

    Raises `src.custom.ComponentError` in one line naming two agents and their spaces when the
    team mixes Discrete and Box actions or its agents act in different spaces, and naming the
    space when it is neither Discrete nor Box.
    """
    if not action_spaces:
        raise ComponentError(f"env {env}: has no agents, so no action space")
    (first_agent, first), *others = action_spaces.items()
    for agent, space in others:
        if space == first:
            continue
        if _kind(space) != _kind(first):
            raise ComponentError(
                f"env {env}: agent {first_agent!r} has {_kind(first)} actions {_shown(first)} "
                f"and agent {agent!r} has {_kind(space)} actions {_shown(space)}; a team that "
                "mixes Discrete and Box actions is not supported: every agent needs the same "
                "action space"
            )
        raise ComponentError(
            f"env {env}: agents {first_agent!r} and {agent!r} act in different spaces "
            f"({_shown(first)} and {_shown(space)}); the parameter-shared policy needs one "
            "action space for every agent"
        )
    if _kind(first) not in ("Discrete", "Box"):
        raise ComponentError(
            f"env {env}: the agents act in a {_kind(first)} ({_shown(first)}); the built-in "
            "algorithms take Discrete or Box actions"
        )
    return first


def agent_action_spaces(env_name: str, params: Mapping[str, Any]) -> dict[str, spaces.Space]:
    """Each agent's action space in the registry's ParallelEnv of `env_name` with `params`."""
    from src.envs.registry import make_env

    parallel = make_env(env_name, **params)
    try:
        return {agent: parallel.action_space(agent) for agent in parallel.possible_agents}
    finally:
        parallel.close()


@dataclass(frozen=True, eq=False)
class BoxActions:
    """A Box action space as the Gaussian policy uses it: the policy's flat action of `dim`
    entries, the shape and dtype the env takes, and the bounds samples are clipped to."""

    shape: tuple[int, ...]
    """The shape of one agent's action (the Box's)."""
    low: np.ndarray
    """`[dim]` float64 lower bounds (-inf where unbounded)."""
    high: np.ndarray
    """`[dim]` float64 upper bounds (+inf where unbounded)."""
    dtype: np.dtype
    """The Box's float dtype: the env's actions are cast to it."""

    @property
    def dim(self) -> int:
        """Entries of one agent's action: the width of the policy's mean and log-std."""
        return int(np.prod(self.shape, dtype=np.int64))

    @classmethod
    def from_space(cls, space: spaces.Box, *, env: str) -> BoxActions:
        """The Box `space` of env `env`; a Box of integers raises a one-line `ComponentError`."""
        if not np.issubdtype(space.dtype, np.floating):
            raise ComponentError(
                f"env {env}: its Box actions {_shown(space)} hold {space.dtype}; the Gaussian "
                "policy of ippo and ippo_lag takes float Boxes"
            )
        return cls(
            shape=tuple(int(n) for n in space.shape),
            low=np.asarray(space.low, dtype=np.float64).reshape(-1),
            high=np.asarray(space.high, dtype=np.float64).reshape(-1),
            dtype=np.dtype(space.dtype),
        )

    def to_env(self, raw: torch.Tensor) -> np.ndarray:
        """Raw policy samples `[..., dim]` -> the env's actions `[..., *shape]`: clipped to the
        bounds and cast to the Box's dtype (the raw samples stay what the policy learns from)."""
        clipped = np.clip(raw.detach().numpy(), self.low, self.high)
        return clipped.reshape(*raw.shape[:-1], *self.shape).astype(self.dtype, copy=False)

    def describe(self) -> dict[str, Any]:
        """Plain values for policy.pt (`POLICY_KEY`): kind, shape, bounds and dtype."""
        return {
            "kind": "box",
            "shape": list(self.shape),
            "low": self.low.tolist(),
            "high": self.high.tolist(),
            "dtype": self.dtype.name,
        }

    @classmethod
    def from_description(cls, value: Any, *, where: str) -> BoxActions:
        """Rebuild what `describe` returned; a `ValueError` naming `where` and the problem."""
        problem = _description_problem(value)
        if problem is not None:
            raise ValueError(f"{where}: entry {POLICY_KEY!r} {problem}")
        dtype = np.dtype(value["dtype"])
        space = spaces.Box(
            low=np.asarray(value["low"], dtype=np.float64).reshape(value["shape"]).astype(dtype),
            high=np.asarray(value["high"], dtype=np.float64).reshape(value["shape"]).astype(dtype),
            dtype=dtype,
        )
        return cls.from_space(space, env=where)


def _description_problem(value: Any) -> str | None:
    """What is wrong with a `BoxActions.describe()` value read from a file (None: nothing)."""
    if not isinstance(value, Mapping) or value.get("kind") != "box":
        return f"must be a dict with kind 'box', got {value!r}"
    shape = value.get("shape")
    if not isinstance(shape, list) or not shape:
        return f"has shape {shape!r}, not a non-empty list of sizes"
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape):
        return f"has shape {shape!r}, not a list of sizes >= 1"
    size = int(np.prod(shape, dtype=np.int64))
    for bound in ("low", "high"):
        entries = value.get(bound)
        if not isinstance(entries, list) or len(entries) != size:
            return f"has {bound} {entries!r}, not a list of {size} numbers"
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in entries):
            return f"has {bound} {entries!r}, not a list of {size} numbers"
    if any(lo > hi for lo, hi in zip(value["low"], value["high"], strict=True)):
        return "has a lower bound above its upper bound"
    try:
        dtype = np.dtype(value.get("dtype"))
    except TypeError:
        return f"has dtype {value.get('dtype')!r}, not a NumPy dtype"
    if not np.issubdtype(dtype, np.floating):
        return f"has dtype {dtype.name}, not a float dtype"
    return None


def team_action_box(env: Any, *, env_name: str, params: Mapping[str, Any]) -> BoxActions | None:
    """The Box the agents of `env` (a VectorEnv) act in, or None for Discrete actions.

    Box actions are those of a VectorEnv with `continuous_actions` set; their space is its
    `action_space`, else the one every agent of the registry's ParallelEnv of `env_name`
    (built with `params`) acts in. Raises a one-line `src.custom.ComponentError` for a team
    without one shared float Box (a Discrete agent next to a Box one among them).
    """
    if not getattr(env, "continuous_actions", False):
        return None
    space = getattr(env, "action_space", None)
    if not isinstance(space, spaces.Space):
        from src.envs.registry import env_names

        if env_name not in env_names():
            raise ComponentError(
                f"env {env_name}: its VectorEnv has continuous_actions but no action_space, and "
                "the env registry has no task of that name to read the agents' spaces from; "
                "give the VectorEnv an action_space (a gymnasium Box)"
            )
        space = shared_action_space(agent_action_spaces(env_name, params), env=env_name)
    if not isinstance(space, spaces.Box):
        raise ComponentError(
            f"env {env_name}: its VectorEnv has continuous_actions, but its agents act in "
            f"{_shown(space)}, not a Box"
        )
    return BoxActions.from_space(space, env=env_name)
