"""The code a workflow job runs: the import closure of its script, computed from the source.

Snakemake reruns a job when its script changes, but it does not see the modules the script
imports. `import_closure(script)` reads the script and every module it reaches through
`import` / `from ... import` statements (at any depth of the code, so imports inside
functions count) and `importlib.import_module("...")` calls with a literal name, and returns
their files: every `src` module reached, with the `__init__.py` of each package on the way,
and the script's own helper modules next to it. The workflow makes these files inputs of the
job's rule, so that changing a module reruns exactly the jobs whose code runs it.

Tasks and algorithms given by import path are code of the jobs too: `component_code` adds the
user's modules (`module_closure`: the module, what it imports from its own package, and the
`src` files it imports) to the rules whose closure reaches the registry that imports them: a
task's factory and cost function for rules reaching `src/envs/registry.py`, an algorithm's
class for rules reaching `src/algos/registry.py`. Modules of installed distributions (mpe2,
say) and the standard library are the software environment, pinned in requirements.lock and
recorded in every config.json, and are not listed.

>>> closure = import_closure(ROOT / "workflow" / "scripts" / "export.py")
>>> names = {p.relative_to(ROOT).as_posix() for p in closure}
>>> sorted(names & {"workflow/scripts/job.py", "src/__init__.py", "src/analysis/export.py"})
['src/__init__.py', 'src/analysis/export.py', 'workflow/scripts/job.py']
"""

from __future__ import annotations

import ast
import sys
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGE",
    "ROOT",
    "component_code",
    "import_closure",
    "imported_names",
    "module_closure",
]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "src"
# The registries that import the user's code, relative to the repository root.
_ENV_REGISTRY = Path(PACKAGE, "envs", "registry.py")
_ALGO_REGISTRY = Path(PACKAGE, "algos", "registry.py")


def imported_names(path: Path, module: str | None = None) -> Iterator[str]:
    """Every module name the file at `path` imports, as absolute names.

    Relative imports (`from . import x`) are resolved when `module`, the file's own module
    name, is given, and skipped otherwise.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = None
    if module is not None:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level > 0:
                if package is None:
                    continue
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                parent = ".".join(parts[: len(parts) - (node.level - 1)])
                base = ".".join(part for part in (parent, node.module) if part)
            if not base:
                continue
            yield base
            # `from package import module` imports a module too.
            for alias in node.names:
                yield f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def _module_file(name: str, root: Path) -> Path | None:
    """The file of module `name` under `root` (a module or a package's __init__), if any."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, roots: Mapping[str, Path]) -> str | None:
    """The module name of `path` under one of `roots` (package name -> folder holding it)."""
    for root in roots.values():
        if path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts) or None
    return None


@cache
def _walk(entry: Path, roots: tuple[tuple[str, Path], ...], local: Path | None) -> tuple[Path, ...]:
    """Files reached from `entry` through imports of the packages in `roots` (and of the
    single-name modules in `local`, the folder of a script or of a top-level module)."""
    packages = dict(roots)
    found: set[Path] = set()
    pending = [entry]
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.add(path)
        for name in imported_names(path, _module_name(path, packages)):
            parts = name.split(".")
            if parts[0] in packages:
                # The package and every subpackage on the way run their __init__.py.
                for depth in range(1, len(parts) + 1):
                    module = _module_file(".".join(parts[:depth]), packages[parts[0]])
                    if module is not None:
                        pending.append(module)
            elif local is not None and len(parts) == 1 and path.parent == local:
                helper = local / f"{name}.py"
                if helper.is_file() and helper != entry:
                    pending.append(helper)
    return tuple(sorted(found))


def import_closure(entry: str | Path, *, root: str | Path = ROOT) -> list[Path]:
    """The files `entry` (a script or module file) imports, transitively (module docstring).

    `root` is the folder holding the `src` package. The entry itself is not included.
    """
    path = Path(entry).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: no script to read imports from")
    found = _walk(path, ((PACKAGE, Path(root).resolve()),), path.parent)
    return [file for file in found if file != path]


def _installed(path: Path) -> bool:
    """Whether `path` belongs to the Python installation (stdlib or installed distributions)."""
    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.is_relative_to(Path(folder).resolve()) for folder in folders)


def _find_module(name: str) -> Path | None:
    """The file of module `name` on `sys.path`, found without importing anything."""
    for folder in sys.path:
        base = Path(folder or ".").resolve()
        if base.is_dir():
            found = _module_file(name, base)
            if found is not None:
                return found
    return None


def module_closure(module: str, *, root: str | Path = ROOT) -> list[Path]:
    """The files of the user's module `module`: its own file, what it imports from its own
    top-level package (or, for a top-level module, the modules next to it), and the `src`
    files under `root` it imports. Empty for a module of the Python installation."""
    path = _find_module(module)
    if path is None or _installed(path.resolve()):
        return []
    path = path.resolve()
    parts = module.split(".")
    top = path.parents[len(parts) - (0 if path.name == "__init__.py" else 1)]
    roots = ((PACKAGE, Path(root).resolve()),)
    local = None
    if len(parts) == 1 and path.name != "__init__.py":
        local = path.parent  # a top-level module imports its neighbours by their names
    else:
        roots = (*roots, (parts[0], top))
    # Importing the module runs the __init__.py of every package on its way.
    entries = [_module_file(".".join(parts[:depth]), top) for depth in range(1, len(parts))]
    files = {file for entry in (*entries, path) if entry for file in _walk(entry, roots, local)}
    return sorted(files)


def component_code(
    closure: Sequence[Path],
    *,
    envs: Mapping[str, Any],
    algos: Mapping[str, str],
    root: str | Path = ROOT,
) -> list[Path]:
    """The user's files a job may run, given its script's `closure`: the modules of the tasks
    `envs` (`custom_envs` entries: an import path or `{factory, cost}`) if the closure
    reaches the env registry, those of the algorithms `algos` if it reaches the algorithm
    registry. Sorted, without duplicates."""
    base = Path(root).resolve()
    reached = {Path(path).resolve() for path in closure}
    paths: list[str] = []
    if base / _ENV_REGISTRY in reached:
        for value in envs.values():
            entry = value if isinstance(value, Mapping) else {"factory": value}
            paths += [entry["factory"], entry.get("cost") or ""]
    if base / _ALGO_REGISTRY in reached:
        paths += list(algos.values())
    files: set[Path] = set()
    for entry in paths:
        if ":" in entry:  # an import path; a cost function's bare name lives in src
            files.update(module_closure(entry.split(":", 1)[0], root=base))
    return sorted(files)
