"""The code a workflow job runs: the import closure of its script, computed from the source.

Snakemake reruns a job when its script changes, but it does not see the modules the script
imports. `import_closure(script)` reads the script and every module it reaches through
`import` / `from ... import` statements (at any depth of the code, so imports inside
functions count) and `importlib.import_module("...")` calls with a literal name, and returns
their files: every `src` module reached, with the `__init__.py` of each package on the way,
and the script's own helper modules next to it. The workflow makes these files the code input
of the job's rule (through its fingerprint, below), so that changing a module reruns exactly
the jobs whose code runs it.

Tasks and algorithms given by import path are code of the jobs too: `component_code` adds the
user's modules (`module_closure`: the module, what it imports from its own package, and the
`src` files it imports) to the rules whose closure reaches the registry that imports them: a
task's factory and cost function for rules reaching `src/envs/registry.py`, an algorithm's
class for rules reaching `src/algos/registry.py`. Modules of installed distributions (mpe2,
say) and the standard library are the software environment, pinned in requirements.lock and
recorded in every config.json, and are not listed.

A job's code is one input of its rule, a fingerprint in the results folder rather than every
file (which a dry run would list for every job): `job_code` names the code a job runs and
lists its files (the script, its closure and the user's modules the job reaches), and the
fingerprint `{results}/.code/{name}.sha256` (`fingerprint_path`) holds one `sha256  path` line
per file (`code_listing`, the format of `sha256sum`). The workflow's rule `code_fingerprint`
takes the files as inputs and writes the fingerprint (`write_fingerprint`), so it is written
again exactly when Snakemake sees one of the files changed (newer than the fingerprint, and
with another checksum than the one it recorded), and then the jobs that take it rerun. Only
that rule lists the files, and only when it is about to run.

>>> closure = import_closure(ROOT / "workflow" / "scripts" / "export.py")
>>> names = {p.relative_to(ROOT).as_posix() for p in closure}
>>> sorted(names & {"workflow/scripts/job.py", "src/__init__.py", "src/analysis/export.py"})
['src/__init__.py', 'src/analysis/export.py', 'workflow/scripts/job.py']
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from src.algos.registry import SHIELD_LOADER, builtin_entries
from src.containment import ContainmentError, inside
from src.core.io import atomic_output

__all__ = [
    "FINGERPRINTS",
    "PACKAGE",
    "ROOT",
    "code_listing",
    "component_code",
    "fingerprint_path",
    "import_closure",
    "imported_names",
    "job_code",
    "module_closure",
    "parse_code_name",
    "write_fingerprint",
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
def _imports_of(path: Path, module: str | None, stamp: tuple[int, int]) -> tuple[str, ...]:
    """`imported_names(path, module)`, read once per version of the file (`stamp`: its
    modification time in ns and its size): every walk of a workflow's jobs passes through
    the same modules."""
    return tuple(imported_names(path, module))


@cache
def _walk(entry: Path, roots: tuple[tuple[str, Path], ...], local: Path | None) -> tuple[Path, ...]:
    """Files reached from `entry` through imports of the packages in `roots` (and of the
    single-name modules in `local`, the folder of a script or of a top-level module)."""
    packages = dict(roots)
    found: set[Path] = set()
    pending = [entry]
    files: dict[str, Path | None] = {}  # module name -> its file, as resolved in this walk
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.add(path)
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        for name in _imports_of(path, _module_name(path, packages), stamp):
            parts = name.split(".")
            if parts[0] in packages:
                # The package and every subpackage on the way run their __init__.py.
                for depth in range(1, len(parts) + 1):
                    prefix = ".".join(parts[:depth])
                    if prefix not in files:
                        files[prefix] = _module_file(prefix, packages[parts[0]])
                    module = files[prefix]
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
    algos: Mapping[str, str | Sequence[str]],
    root: str | Path = ROOT,
) -> list[Path]:
    """The files of the components a job may run, given its script's `closure`: the modules
    of the tasks `envs` (`custom_envs` entries: an import path or `{factory, cost}`) if the
    closure reaches the env registry, those of the algorithms `algos` (an import path or
    several per algorithm) if it reaches the algorithm registry. Sorted, without
    duplicates."""
    base = Path(root).resolve()
    reached = {Path(path).resolve() for path in closure}
    paths: list[str] = []
    if base / _ENV_REGISTRY in reached:
        for value in envs.values():
            entry = value if isinstance(value, Mapping) else {"factory": value}
            paths += [entry["factory"], entry.get("cost") or ""]
    if base / _ALGO_REGISTRY in reached:
        for value in algos.values():
            paths += [value] if isinstance(value, str) else list(value)
    files: set[Path] = set()
    for entry in paths:
        if ":" in entry:  # an import path; a cost function's bare name lives in src
            files.update(module_closure(entry.split(":", 1)[0], root=base))
    return sorted(files)


# ---------------------------------------------------------------------- fingerprints

FINGERPRINTS = ".code"
"""The folder of a results folder (`{results_dir}/{experiment_tag}`) holding the code
fingerprints of its jobs."""


def job_code(
    script: str | Path,
    *,
    envs: Mapping[str, Any],
    algos: Mapping[str, str],
    env: str | None = None,
    algo: str | None = None,
    root: str | Path = ROOT,
) -> tuple[str, list[Path]]:
    """The name and the files of the code a job of `script` runs (a workflow script, the
    job's `env` and `algo` wildcards if it has them; `envs` and `algos`: the config's
    `custom_envs` and `custom_algos`).

    The files are the script, its import closure and the components' modules its code
    reaches (`component_code`: the user's tasks and algorithms, and the built-in algorithms'
    own modules, which their runs import by import path, `src.algos.registry.
    builtin_entries`; only the job's own env and algorithm where it has them). The name is
    the script's name, followed by the job's env and algorithm (``train-walk-toy``) when the
    script reaches any of these modules, so that jobs running different code have
    different names and `parse_code_name` gives back what `job_code` was given.
    """
    path = Path(script).resolve()
    closure = import_closure(path, root=root)
    # The user's algorithms with the built-in shield's loader, which `actor_from_state` imports
    # for a shielded one.
    every_algo = {
        **builtin_entries(),
        **{name: (entry, SHIELD_LOADER) for name, entry in algos.items()},
    }

    def components(env: str | None, algo: str | None) -> list[Path]:
        return component_code(
            closure,
            envs={name: entry for name, entry in envs.items() if env in (None, name)},
            algos={name: entry for name, entry in every_algo.items() if algo in (None, name)},
            root=root,
        )

    scope = [wildcard for wildcard in (env, algo) if wildcard is not None]
    name = path.stem
    if scope and components(None, None):
        name = "-".join([name, *scope])
    return name, sorted({path, *closure, *components(env, algo)})


def parse_code_name(name: str) -> tuple[str, str | None, str | None]:
    """(script, env, algo) of a name made by `job_code` (env and algo None where absent).

    >>> parse_code_name("train-walk-toy"), parse_code_name("figures")
    (('train', 'walk', 'toy'), ('figures', None, None))
    """
    parts = name.split("-")
    if len(parts) > 3 or not all(parts):
        raise ValueError(f"{name!r} is not the name of a job's code (script[-env[-algo]])")
    script, env, algo = [*parts, None, None][:3]
    return script, env, algo


def code_listing(files: Iterable[str | Path], *, root: str | Path = ROOT) -> str:
    """One ``sha256  path`` line per file (`sha256sum`'s format), sorted by path; paths
    below `root` relative to it (so the listing does not depend on where the repository
    is), others absolute."""
    base = Path(root).resolve()
    lines = {}
    for file in files:
        path = Path(file).resolve()
        shown = path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
        lines[shown] = f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {shown}"
    return "".join(f"{lines[shown]}\n" for shown in sorted(lines))


def fingerprint_path(name: str) -> str:
    """The fingerprint of the code `name`, relative to the results folder.

    >>> fingerprint_path("train-walk-toy")
    '.code/train-walk-toy.sha256'
    """
    return f"{FINGERPRINTS}/{name}.sha256"


def write_fingerprint(
    results: str | Path, path: str | Path, listing: str, *, log: str | Path | None = None
) -> Path:
    """Write `listing` to the fingerprint `path` inside the results folder `results`,
    atomically (a killed writer leaves the previous one); `log`, if given (a file inside
    `results` too), records what was written.

    The results folder may come from elsewhere: every path written is checked to lie inside
    it, through no symbolic link (`src.containment`). Returns the path written.
    """
    target = inside(results, Path(path).absolute())
    if target.parent.name != FINGERPRINTS or target.suffix != ".sha256":
        raise ContainmentError(f"{target} is not a code fingerprint ({FINGERPRINTS}/<name>.sha256)")
    with atomic_output(target) as tmp:
        tmp.write_text(listing, encoding="utf-8")
    if log is not None:
        with atomic_output(inside(results, Path(log).absolute())) as tmp:
            tmp.write_text(f"{target}: {listing.count(chr(10))} files\n", encoding="utf-8")
    return target
