"""Hidden episode caps: find the cap on a wrapper stack and enforce it on one step's flags.

A cap ends an episode by truncation after a fixed number of steps. It is hidden: agents never
observe it. The training and evaluation loops read the cap once with `infer_episode_cap` and
apply it every step with `apply_hidden_episode_cap`, so a cap set on any layer of the stack
holds even when the layer that carries it does not enforce it.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["CAP_ATTRIBUTES", "CHILD_ATTRIBUTES", "apply_hidden_episode_cap", "infer_episode_cap"]

CAP_ATTRIBUTES: tuple[str, ...] = (
    "max_steps",
    "max_cycles",
    "max_episode_steps",
    # Gymnasium's TimeLimit keeps its cap under the private name.
    "_max_episode_steps",
)
"""Instance attributes that hold an episode cap, checked in this order on every layer."""

CHILD_ATTRIBUTES: tuple[str, ...] = (
    "env",
    "aec_env",
    "par_env",
    "parallel_env",
    "_env",
    "unwrapped",
    "_unwrapped",
)
"""Instance attributes through which wrappers hold the layer they wrap, visited in this order."""


def _instance_dict(obj: object) -> dict[str, Any] | None:
    """Return the instance `__dict__` of `obj`, or None for objects without one.

    `vars` reads the `__dict__` descriptor of the type, so it never reaches a wrapper's
    `__getattr__`, which would forward the lookup to the wrapped env and hide where a value
    lives.
    """
    try:
        attributes = vars(obj)
    except TypeError:
        return None
    return attributes if isinstance(attributes, dict) else None


def _looks_like_env(obj: object) -> bool:
    """Whether `obj` has `reset` and `step` methods on its class (not through `__getattr__`)."""
    cls = type(obj)
    return callable(getattr(cls, "reset", None)) and callable(getattr(cls, "step", None))


def _checked_cap(value: object, *, layer: object, attribute: str) -> int:
    """Return `value` as an int cap, or raise an error naming the layer and attribute."""
    where = f"{type(layer).__name__}.{attribute}"
    # bool is an int subclass, but `max_steps=True` is a mistake, not a cap of one step.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"episode cap {where} must be an int or None, got {value!r} ({type(value).__name__})"
        )
    cap = int(value)
    if cap < 1:
        raise ValueError(f"episode cap {where} must be >= 1, got {cap}")
    return cap


def _layer_cap(layer: object, attributes: dict[str, Any]) -> int | None:
    """Return the cap this layer itself declares, or None if it declares none."""
    for name in CAP_ATTRIBUTES:
        value = attributes.get(name)
        if value is not None:
            return _checked_cap(value, layer=layer, attribute=name)
    # A Gymnasium EnvSpec stored on the env instance carries the registered cap.
    spec_attributes = _instance_dict(attributes.get("spec"))
    if spec_attributes is not None:
        value = spec_attributes.get("max_episode_steps")
        if value is not None:
            return _checked_cap(value, layer=layer, attribute="spec.max_episode_steps")
    return None


def infer_episode_cap(env: Any) -> int | None:
    """Find the hidden max_steps episode cap on an env/wrapper stack.

    Walks the stack from the outside in, breadth first: on each layer it reads the instance
    attributes `max_steps`, `max_cycles`, `max_episode_steps`, `_max_episode_steps` and
    `spec.max_episode_steps` (a value of None means "no cap on this layer"), then descends
    through `env`, `aec_env`, `par_env`, `parallel_env`, `_env`, `unwrapped`, `_unwrapped` and
    any other instance attribute whose class has `reset` and `step` methods. Only instance
    dictionaries are read, so `__getattr__` forwarding is never triggered and the cap found is
    the one of the outermost layer that declares it. Cycles in the stack are visited once.

    Args:
        env: A PettingZoo ParallelEnv or AECEnv, a Gymnasium env, or any wrapper around one.

    Returns:
        The first cap found (an int >= 1), or None when no layer declares one.

    Raises:
        TypeError: If a cap attribute holds something other than an int or None.
        ValueError: If a cap attribute holds an int below 1.

    Example:
        >>> class Inner:
        ...     def __init__(self):
        ...         self.max_cycles = 25
        >>> class Outer:
        ...     def __init__(self, env):
        ...         self.env = env
        >>> infer_episode_cap(Outer(Inner()))
        25
        >>> infer_episode_cap(object()) is None
        True
    """
    queue: deque[object] = deque([env])
    seen: set[int] = set()
    while queue:
        layer = queue.popleft()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        attributes = _instance_dict(layer)
        if attributes is None:
            continue
        cap = _layer_cap(layer, attributes)
        if cap is not None:
            return cap
        queue.extend(attributes[name] for name in CHILD_ATTRIBUTES if name in attributes)
        queue.extend(
            value
            for name, value in attributes.items()
            if name not in CHILD_ATTRIBUTES and name != "spec" and _looks_like_env(value)
        )
    return None


def _check_flags(flags: object, *, name: str, agents: list[str]) -> None:
    """Check that `flags` is a dict holding a bool for every agent in `agents`."""
    if not isinstance(flags, Mapping):
        raise TypeError(f"{name} must be a dict of agent -> bool, got {type(flags).__name__}")
    missing = [agent for agent in agents if agent not in flags]
    if missing:
        raise ValueError(f"{name} has no entry for active agents {missing}")
    for agent in agents:
        value = flags[agent]
        # numpy.bool_ is not a bool subclass but is what vectorised envs return.
        if not isinstance(value, bool | np.bool_):
            raise TypeError(
                f"{name}[{agent!r}] must be a bool, got {value!r} ({type(value).__name__})"
            )


def apply_hidden_episode_cap(
    *,
    active_agents: Iterable[str],
    terminations: dict[str, bool],
    truncations: dict[str, bool],
    episode_steps: int,
    episode_cap: int | None,
) -> tuple[dict[str, bool], bool]:
    """Return updated truncations plus whether the hidden cap fired this step.

    Once `episode_steps >= episode_cap`, every active agent that is neither terminated nor
    truncated is truncated. The cap "fired" when it changed at least one flag; agents that
    already ended keep their flags and do not count. The input dicts are never modified.

    Args:
        active_agents: Agents alive at this step (e.g. `env.agents` before the step).
        terminations: Terminations returned by the step, one bool per active agent at least.
        truncations: Truncations returned by the step, one bool per active agent at least.
        episode_steps: Steps taken in the current episode, this step included (>= 0).
        episode_cap: The hidden cap (an int >= 1), or None for no cap.

    Returns:
        A new truncations dict (entries of other agents copied unchanged) and whether the cap
        fired.

    Raises:
        TypeError: If an argument has the wrong type (e.g. a non-int cap or a non-bool flag).
        ValueError: If `episode_steps` is negative, `episode_cap` is below 1, or an active agent
            is missing from `terminations` or `truncations`.

    Example:
        >>> apply_hidden_episode_cap(
        ...     active_agents=["a", "b"],
        ...     terminations={"a": True, "b": False},
        ...     truncations={"a": False, "b": False},
        ...     episode_steps=25,
        ...     episode_cap=25,
        ... )
        ({'a': False, 'b': True}, True)
    """
    if isinstance(active_agents, str | bytes) or not isinstance(active_agents, Iterable):
        raise TypeError(
            "active_agents must be an iterable of agent names, "
            f"got {type(active_agents).__name__} {active_agents!r}"
        )
    agents = list(active_agents)
    if isinstance(episode_steps, bool) or not isinstance(episode_steps, numbers.Integral):
        raise TypeError(
            f"episode_steps must be an int, got {episode_steps!r} ({type(episode_steps).__name__})"
        )
    if episode_steps < 0:
        raise ValueError(f"episode_steps must be >= 0, got {episode_steps}")
    if episode_cap is not None:
        if isinstance(episode_cap, bool) or not isinstance(episode_cap, numbers.Integral):
            raise TypeError(
                "episode_cap must be an int or None, "
                f"got {episode_cap!r} ({type(episode_cap).__name__})"
            )
        if episode_cap < 1:
            raise ValueError(f"episode_cap must be >= 1 or None, got {episode_cap}")
    _check_flags(terminations, name="terminations", agents=agents)
    _check_flags(truncations, name="truncations", agents=agents)

    updated = dict(truncations)
    if episode_cap is None or episode_steps < episode_cap:
        return updated, False
    fired = False
    for agent in agents:
        if not terminations[agent] and not truncations[agent]:
            updated[agent] = True
            fired = True
    return updated, fired
