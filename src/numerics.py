"""One floating-point code path for torch on every x86-64 machine.

torch picks its vectorised kernels by the CPU it runs on (AVX-512 where there is one, AVX2
elsewhere) and so does MKL, which does its matrix products; the kernels sum in different
orders, so the same config and seed train to different numbers on two machines with
different CPUs. `pin_kernels` asks both for their AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`;
MKL's conditional numerical reproducibility, `MKL_CBWR=AVX2`; oneDNN's
`ONEDNN_MAX_CPU_ISA=AVX2`), which every x86-64 CPU of the last decade has, so that runs agree
across machines as they agree on one. The variables must be set before torch runs its first
operation and MKL its first product: `src/__init__.py` calls it, so importing anything from
`src` first is enough; a variable already set in the environment is left as it is (set
`ATEN_CPU_CAPABILITY=default` to run on the machine's own kernels). Other machines (ARM) have
one code path and are left alone. `kernels` reports what a process runs on, and every run
records it (`src.algos.train.run_metadata`).
"""

from __future__ import annotations

import os
import platform

__all__ = ["PINNED", "kernels", "pin_kernels"]

PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""The environment variables `pin_kernels` sets on x86-64 and their values."""


def pin_kernels() -> None:
    """On x86-64, set each variable of `PINNED` that the environment does not set already."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        for name, value in PINNED.items():
            os.environ.setdefault(name, value)


def kernels() -> dict[str, str | None]:
    """The kernels this process runs on: torch's CPU capability and the variables of `PINNED`
    as the environment has them (None: unset)."""
    import torch

    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{name: os.environ.get(name) for name in PINNED},
    }
