"""Benchmarks of the pipeline. Importing them imports `src` first, which pins the numerical
code path (`src.numerics`) before torch or NumPy load."""

import src  # noqa: F401
