"""Benchmarks of the pipeline. They report single-core numbers: the BLAS and OpenMP pools are
pinned to one thread here, before anything loads NumPy; then `src` is imported, which pins the
numerical code path (`src.numerics`) before torch or NumPy load."""

import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_variable] = "1"

import src  # noqa: E402, F401 - after the thread pinning above
