"""Run the benchmark modules: ``python -m benchmarks.run_all [names...]`` (``make bench``).

Each name in :data:`BENCHMARKS` is a module ``benchmarks.<name>`` with a ``main()`` that
measures and writes its section of ``benchmarks/BENCHMARKS.md``. Without names, all run; like
every benchmark they report single-core numbers (``benchmarks/__init__.py`` pins the thread
pools before NumPy loads).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS: tuple[str, ...] = ("envs", "mamujoco", "evaluation", "algos", "shield", "paper_grid")
"""Benchmark modules under ``benchmarks/``, run in this order."""


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmark modules (all of :data:`BENCHMARKS` if none); return 0."""
    names = list(argv) if argv else list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmarks {unknown}; known benchmarks: {', '.join(BENCHMARKS)}")
    for name in names:
        print(f"== benchmarks.{name}", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
