"""The code a workflow job runs: the import closure of its script, computed from the source.

Snakemake reruns a job when its script changes, but it does not see the modules the script
imports. `import_closure(script)` reads the script and every module it reaches through
`import` / `from ... import` statements (at any depth of the code, so imports inside
functions count) and `importlib.import_module("...")` calls with a literal name, and returns
their files: every `src` module reached, with the `__init__.py` of each package on the way,
and the script's own helper modules next to it. The workflow makes these files inputs of the
job's rule, so that changing a module reruns exactly the jobs whose code runs it.

>>> closure = import_closure(ROOT / "workflow" / "scripts" / "export.py")
>>> names = {p.relative_to(ROOT).as_posix() for p in closure}
>>> sorted(names & {"workflow/scripts/job.py", "src/__init__.py", "src/analysis/export.py"})
['src/__init__.py', 'src/analysis/export.py', 'workflow/scripts/job.py']
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

__all__ = ["PACKAGE", "ROOT", "import_closure", "imported_names"]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "src"


def imported_names(path: Path) -> Iterator[str]:
    """Every module name the file at `path` imports, as written (absolute names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            # `from package import module` imports a module too.
            for alias in node.names:
                yield f"{node.module}.{alias.name}"
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


@cache
def _closure(entry: Path, root: Path) -> tuple[Path, ...]:
    found: set[Path] = set()
    pending = [entry]
    local = entry.parent
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.add(path)
        for name in imported_names(path):
            parts = name.split(".")
            if parts[0] == PACKAGE:
                # The package and every subpackage on the way run their __init__.py.
                for depth in range(1, len(parts) + 1):
                    module = _module_file(".".join(parts[:depth]), root)
                    if module is not None:
                        pending.append(module)
            elif len(parts) == 1 and path.parent == local:
                helper = local / f"{name}.py"
                if helper.is_file() and helper != entry:
                    pending.append(helper)
    found.discard(entry)
    return tuple(sorted(found))


def import_closure(entry: str | Path, *, root: str | Path = ROOT) -> list[Path]:
    """The files `entry` (a script or module file) imports, transitively (module docstring).

    `root` is the folder holding the `src` package. The entry itself is not included.
    """
    path = Path(entry).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: no script to read imports from")
    return list(_closure(path, Path(root).resolve()))
