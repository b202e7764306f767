"""Tasks and algorithms given by import path: what a config registers, and how it is imported.

A workflow config names its own tasks under `custom_envs` and its own algorithms under
`custom_algos` (docs/architecture.md, "Your own task and algorithm"):

```yaml
custom_envs:
  my_task: "my_package.tasks:make_env"                    # the env puts infos[agent]["cost"]
  tag: {factory: "mpe2.simple_tag_v3:parallel_env", cost: mpe2_collisions}
  fast: {factory: "my_package.tasks:make_env", vector: "my_package.tasks:MyVectorEnv"}
custom_algos:
  my_algo: "my_package.algos:MyAlgorithm"
```

Registering records the import paths only. Nothing is imported until the env registry builds
the env (`src.envs.registry`) or the algorithm registry reads the algorithm's capabilities
(`src.algos.registry`), so a job imports the user's module only when it runs that code, and
`src.code_inputs` makes the module an input of the rules whose code reaches those registries.
The registrations come from the config the user runs, never from a results folder: a run
config records the import paths it was trained with, and `RunConfig.from_dict` only checks
them against what is registered (reading results never imports code).

This module is a leaf (it imports nothing of the project), so every workflow job registers the
config's entries at its start (`workflow/scripts/job.py`) without pulling in the registries.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CUSTOM_ALGOS",
    "CUSTOM_ENVS",
    "ENTRY_PATTERN",
    "NAME_PATTERN",
    "ComponentError",
    "EnvEntry",
    "config_entries",
    "entry_module",
    "import_folders",
    "installed_folders",
    "load_entry",
    "module_files",
    "recorded_entries",
    "register_algorithm",
    "register_config",
    "register_env",
]

ENTRY_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
"""An import path `package.module:attribute` (the attribute may be dotted, `Class.factory`)."""
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""A task or algorithm name: it becomes part of result paths, wildcards and wandb run names."""


class ComponentError(ValueError):
    """A task or algorithm given by import path cannot be used; one line saying what is missing."""


@dataclass(frozen=True)
class EnvEntry:
    """A task given by import path: its env factory, if the env puts no cost into its infos
    the cost function (a name of `src.envs.costs.COST_FUNCTIONS` or an import path), and
    optionally the user's own vectorised form of the task."""

    factory: str
    """`module:function` returning a PettingZoo ParallelEnv."""
    cost: str | None = None
    """Cost function; None: the env puts `infos[agent]["cost"]` itself."""
    vector: str | None = None
    """`module:function` returning a `src.envs.base.VectorEnv` of the task (training and
    evaluation use it); None: a list of ParallelEnvs (`src.envs.task.ParallelVectorEnv`)."""

    @classmethod
    def from_config(cls, value: Any) -> EnvEntry:
        """The entry of a `custom_envs` value: an import path, or `{factory, cost}`."""
        if isinstance(value, EnvEntry):
            return value
        if isinstance(value, str):
            return cls(factory=_entry(value, "factory"))
        keys = {"factory", "cost", "vector"}
        if isinstance(value, Mapping) and "factory" in value and set(value) <= keys:
            cost, vector = value.get("cost"), value.get("vector")
            if cost is not None and (not isinstance(cost, str) or not cost.strip()):
                raise ComponentError(f"cost {cost!r}: must be a cost function name or import path")
            return cls(
                factory=_entry(value["factory"], "factory"),
                cost=cost,
                vector=None if vector is None else _entry(vector, "vector"),
            )
        raise ComponentError(
            f"{value!r}: must be an import path 'module:function' or a mapping "
            "{factory: 'module:function', cost: <cost function>, vector: 'module:function'}"
        )

    def to_dict(self) -> dict[str, str | None]:
        """The JSON form a run config records (`vector` only when given)."""
        recorded = {"factory": self.factory, "cost": self.cost}
        return recorded if self.vector is None else {**recorded, "vector": self.vector}


CUSTOM_ENVS: dict[str, EnvEntry] = {}
"""Tasks registered in this process: name -> entry."""
CUSTOM_ALGOS: dict[str, str] = {}
"""Algorithms registered in this process: name -> `module:Class`."""


def _entry(value: Any, what: str) -> str:
    if not isinstance(value, str) or not ENTRY_PATTERN.fullmatch(value):
        raise ComponentError(f"{what} {value!r}: must be an import path 'package.module:name'")
    return value


def _name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ComponentError(
            f"name {name!r}: must start with a letter and hold only letters, digits and '_'"
        )
    return name


def register_env(
    name: str, factory: str, cost: str | None = None, vector: str | None = None
) -> None:
    """Make task `name` known to this process (a later registration of `name` replaces it)."""
    CUSTOM_ENVS[_name(name)] = EnvEntry.from_config(
        {"factory": factory, "cost": cost, "vector": vector}
    )


def register_algorithm(name: str, entry: str) -> None:
    """Make algorithm `name` (`module:Class`) known to this process (later ones replace it)."""
    CUSTOM_ALGOS[_name(name)] = _entry(entry, "algorithm")


def register_config(config: Mapping[str, Any]) -> None:
    """Register the `custom_envs` and `custom_algos` of a workflow config (absent: none)."""
    for name, value in (config.get("custom_envs") or {}).items():
        entry = EnvEntry.from_config(value)
        register_env(name, entry.factory, entry.cost, entry.vector)
    for name, entry in (config.get("custom_algos") or {}).items():
        register_algorithm(name, entry)


def recorded_entries(env: str, algo: str) -> dict[str, Any]:
    """What a run config of (`env`, `algo`) records under `custom`: the import paths of the
    registered task and algorithm among them (empty for built-in ones)."""
    recorded: dict[str, Any] = {}
    if env in CUSTOM_ENVS:
        recorded["env"] = CUSTOM_ENVS[env].to_dict()
    if algo in CUSTOM_ALGOS:
        recorded["algo"] = CUSTOM_ALGOS[algo]
    return recorded


def entry_module(entry: str) -> str:
    """The module part of an import path `module:attribute`."""
    return _entry(entry, "import path").split(":", 1)[0]


def load_entry(entry: str) -> Any:
    """Import `module:attribute` and return the attribute; one-line `ComponentError` otherwise."""
    module_name, attribute = _entry(entry, "import path").split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ComponentError(
            f"cannot import module {module_name!r} ({type(error).__name__}: {error}); "
            "it must be importable from the repository root or the Python path"
        ) from None
    except Exception as error:  # the user's module raised while being imported
        message = " ".join(str(error).split())
        raise ComponentError(
            f"importing module {module_name!r} failed ({type(error).__name__}: {message})"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ComponentError(f"module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    return value


def config_entries(config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(config key, import path) of every module a workflow config names: each `custom_envs`
    factory, vector form and cost function given by import path, and each `custom_algos`
    class. Values that are not import paths are left to the registration to refuse."""
    for name, value in (config.get("custom_envs") or {}).items():
        try:
            entry = EnvEntry.from_config(value)
        except ComponentError:
            continue
        for part in ("factory", "vector", "cost"):
            path = getattr(entry, part)
            if isinstance(path, str) and ENTRY_PATTERN.fullmatch(path):
                where = (
                    f"custom_envs.{name}"
                    if isinstance(value, str)
                    else f"custom_envs.{name}.{part}"
                )
                yield where, path
    for name, value in (config.get("custom_algos") or {}).items():
        if isinstance(value, str) and ENTRY_PATTERN.fullmatch(value):
            yield f"custom_algos.{name}", value


def module_files(module: str) -> list[Path]:
    """The files and package folders importing `module` would execute or search: every
    package's `__init__.py` and search folders on the way and the module's own file, found
    the way the import system finds them (`importlib.machinery.PathFinder`, component by
    component) without importing or executing anything. A component that is already
    imported contributes its recorded location; the walk stops at the first component that
    cannot be found (the import itself will say so)."""
    files: list[Path] = []
    search: list[str] | None = None
    parts = module.split(".")
    for index in range(len(parts)):
        name = ".".join(parts[: index + 1])
        loaded = sys.modules.get(name)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else None
        if spec is None:
            # By its last component within the parent's folders: a namespace package's spec
            # looks its parent up in sys.modules, where an unimported parent is not.
            spec = importlib.machinery.PathFinder.find_spec(parts[index], search)
        if spec is None:
            break
        if spec.has_location and spec.origin:
            files.append(Path(spec.origin))
        locations = list(spec.submodule_search_locations or [])
        files.extend(Path(location) for location in locations)
        if not locations:
            break
        search = locations
    return files


def _directory(entry: str) -> Path | None:
    path = Path(os.path.abspath(entry or os.curdir))
    return path.resolve() if path.is_dir() else None


def import_folders(repository: Path | None = None) -> list[Path]:
    """The folders modules are imported from: every directory on `sys.path` (resolved) and
    the repository root, if given."""
    folders = [_directory(entry) for entry in sys.path if isinstance(entry, str)]
    if repository is not None:
        folders.append(Path(repository).resolve())
    return list(dict.fromkeys(folder for folder in folders if folder is not None))


def installed_folders() -> list[Path]:
    """The folders of the Python installation: its standard library and site-packages."""
    paths = sysconfig.get_paths()
    names = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    names += [*site.getsitepackages(), site.getusersitepackages()]
    folders = [_directory(name) for name in names if name]
    return list(dict.fromkeys(folder for folder in folders if folder is not None))
