"""Registry of the safety environments: one name, one config dataclass, two constructors.

`ENVS` holds the built-in tasks. A task given by import path (`src.custom.register_env`, or a
config's `custom_envs`) is looked up by the same functions: its config is a
`src.envs.task.TaskConfig`, its ParallelEnv the user's env wrapped in a `CostParallelEnv` and
its vector env a `ParallelVectorEnv` (src/envs/task.py states what such a task must provide).

>>> env = make_vector_env("hazard_grid", num_envs=2, seed=0, n_agents=2)
>>> env.reset().shape
(2, 2, 45)
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pettingzoo import ParallelEnv

from src.custom import CUSTOM_ENVS, EnvEntry
from src.envs.base import VectorEnv
from src.envs.grid_core import GridConfig, GridVectorEnv
from src.envs.grid_parallel import GridParallelEnv
from src.envs.hazard_grid import HazardGridConfig, HazardGridVectorEnv
from src.envs.intersection import IntersectionConfig, IntersectionVectorEnv
from src.envs.mamujoco import MaMuJoCoConfig, MaMuJoCoParallelEnv, MaMuJoCoVectorEnv
from src.envs.spread_core import NativeSpreadVectorEnv, SpreadConfig
from src.envs.spread_parallel import NativeSpreadParallelEnv
from src.envs.task import TaskConfig, make_task_env, make_task_vector_env

__all__ = ["ENVS", "EnvSpec", "env_names", "make_config", "make_env", "make_vector_env"]


@dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """How to build one registered environment."""

    name: str
    """Registry name (``env_name`` in configs)."""
    config_class: type
    """Frozen dataclass holding the env's parameters and their checks."""
    make_parallel: Callable[[Any, str | None], ParallelEnv]
    """``(config, render_mode) -> ParallelEnv``."""
    make_vector: Callable[[Any, int, int | Sequence[int] | None], VectorEnv]
    """``(config, num_envs, seed) -> VectorEnv``."""
    description: str
    """One line for listings."""


def _grid_spec(
    name: str, config_class: type[GridConfig], core_class: type[GridVectorEnv], description: str
) -> EnvSpec:
    """The spec of a native grid task: its ParallelEnv is a :class:`GridParallelEnv` view."""
    return EnvSpec(
        name=name,
        config_class=config_class,
        make_parallel=lambda config, render_mode: GridParallelEnv(
            core_class, config, render_mode=render_mode
        ),
        make_vector=lambda config, num_envs, seed: core_class(config, num_envs=num_envs, seed=seed),
        description=description,
    )


ENVS: dict[str, EnvSpec] = {
    "hazard_grid": _grid_spec(
        "hazard_grid",
        HazardGridConfig,
        HazardGridVectorEnv,
        "agents reach goals on a grid with hazard cells; hazards and collisions cost",
    ),
    "spread": EnvSpec(
        name="spread",
        config_class=SpreadConfig,
        make_parallel=lambda config, render_mode: NativeSpreadParallelEnv(
            config, render_mode=render_mode
        ),
        make_vector=lambda config, num_envs, seed: NativeSpreadVectorEnv(
            config, num_envs=num_envs, seed=seed
        ),
        description="mpe2's simple_spread_v3 in batched NumPy, seed for seed; collisions cost",
    ),
    "spread_mpe2": EnvSpec(
        name="spread_mpe2",
        config_class=SpreadConfig,
        make_parallel=lambda config, render_mode: _mpe2().SpreadParallelEnv(
            config, render_mode=render_mode
        ),
        make_vector=lambda config, num_envs, seed: _mpe2().SpreadVectorEnv(
            config, num_envs=num_envs, seed=seed
        ),
        description="mpe2 simple_spread_v3 itself (the reference of spread); collisions cost",
    ),
    "intersection": _grid_spec(
        "intersection",
        IntersectionConfig,
        IntersectionVectorEnv,
        "agents cross a four-way junction; collisions and leaving the road cost",
    ),
    "mamujoco": EnvSpec(
        name="mamujoco",
        config_class=MaMuJoCoConfig,
        make_parallel=lambda config, render_mode: MaMuJoCoParallelEnv(
            config, render_mode=render_mode
        ),
        make_vector=lambda config, num_envs, seed: MaMuJoCoVectorEnv(
            config, num_envs=num_envs, seed=seed
        ),
        description="Gymnasium-Robotics' mamujoco_v1 (Box actions); Safety-Gymnasium's "
        "velocity cost",
    ),
}


def _mpe2() -> ModuleType:
    """The mpe2-backed module, imported on first use (mpe2 brings pygame along)."""
    return importlib.import_module("src.envs.spread")


def env_names() -> list[str]:
    """Every env this process knows: the built-in ones and the registered custom tasks."""
    return sorted({*ENVS, *CUSTOM_ENVS})


def _task_spec(name: str, entry: EnvEntry) -> EnvSpec:
    """The spec of a task given by import path (its factory is imported when it is built)."""
    return EnvSpec(
        name=name,
        config_class=TaskConfig,
        make_parallel=lambda config, render_mode: make_task_env(
            name, config, render_mode=render_mode
        ),
        make_vector=lambda config, num_envs, seed: make_task_vector_env(
            name, config, num_envs=num_envs, seed=seed
        ),
        description=f"{entry.factory} (given by import path)",
    )


def _spec(name: str) -> EnvSpec:
    # A built-in name always means the built-in env (the config layer refuses a custom task
    # registered under it).
    if name in ENVS:
        return ENVS[name]
    if name in CUSTOM_ENVS:
        return _task_spec(name, CUSTOM_ENVS[name])
    raise ValueError(f"unknown env {name!r}; known envs: {', '.join(env_names())}")


def make_config(name: str, **params: Any) -> Any:
    """The validated config dataclass of env ``name``; bad or unknown params raise ValueError.

    A custom task's parameters other than ``n_agents`` and ``max_steps`` are its factory's
    keyword arguments, checked when the factory is called.
    """
    spec = _spec(name)
    if name not in ENVS:
        return TaskConfig.from_params(CUSTOM_ENVS[name], params)
    known = [field.name for field in dataclasses.fields(spec.config_class)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(
            f"unknown parameters {unknown} for env {name!r}; known parameters: {', '.join(known)}"
        )
    return spec.config_class(**params)


def make_env(name: str, *, render_mode: str | None = None, **params: Any) -> ParallelEnv:
    """A PettingZoo ParallelEnv of env ``name`` with its parameters ``params``."""
    return _spec(name).make_parallel(make_config(name, **params), render_mode)


def make_vector_env(
    name: str, *, num_envs: int, seed: int | Sequence[int] | None = None, **params: Any
) -> VectorEnv:
    """``num_envs`` copies of env ``name``; ``seed`` is used by the first ``reset()``."""
    return _spec(name).make_vector(make_config(name, **params), num_envs, seed)
