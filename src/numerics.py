"""One floating-point code path for torch on every x86-64 machine, and its fingerprint.

torch picks its vectorised kernels by the CPU it runs on (AVX-512 where there is one, AVX2
elsewhere) and so does MKL, which does its matrix products; the kernels sum in different
orders, so the same config and seed train to different numbers on two machines with
different CPUs. `pin_kernels` selects one path that every x86-64 CPU runs alike:

- MKL: conditional numerical reproducibility in its `COMPATIBLE` branch (`MKL_CBWR`). It is
  the only branch MKL runs on every x86-64 CPU: a branch named after an instruction set
  (`AVX2`, `AVX512`) holds on Intel CPUs only, and on others MKL falls back to its automatic
  dispatch, which picks kernels by the CPU (so an AMD machine computed other products than an
  Intel one under `MKL_CBWR=AVX2`).
- ATen, torch's own kernels: the AVX2 build (`ATEN_CPU_CAPABILITY=avx2`). It is compiled code
  that runs the same instructions on every CPU with AVX2, Intel or AMD, with or without
  AVX-512; a CPU without AVX2 cannot run it, and torch falls back to its default kernels there
  (`kernels` records what ran).
- oneDNN: capped at AVX2 (`ONEDNN_MAX_CPU_ISA`), for the few operations torch sends to it.

The variables must be set before torch runs its first operation and MKL its first product:
`src/__init__.py` calls `pin_kernels`, so importing anything from `src` first is enough; a
variable already set in the environment is left as it is (set `ATEN_CPU_CAPABILITY=default`
or `MKL_CBWR=AUTO` to run on the machine's own kernels). Other machines (ARM) have one code
path and are left alone. `kernels` reports what a process runs on, with `probe_fingerprint`:
a hash of the bits of a fixed set of the operations training uses, equal on two machines
exactly when they compute those operations alike. Every run records both
(`src.algos.train.run_metadata`) and the results page names the fingerprint it was made with.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["PINNED", "adam", "kernels", "pin_kernels", "probe_fingerprint"]

PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""The environment variables `pin_kernels` sets on x86-64 and their values."""


def pin_kernels() -> None:
    """On x86-64, set each variable of `PINNED` that the environment does not set already."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        for name, value in PINNED.items():
            os.environ.setdefault(name, value)


def adam(params: Iterable[torch.nn.Parameter], *, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam as every trainer of the pipeline builds it: torch's fused CPU kernel.

    The fused step takes its square roots with ATen's vector kernels, exact and equal on every
    CPU; the per-tensor and `foreach` steps send them to MKL's vector maths, whose `COMPATIBLE`
    branch rounds some of them differently from one code path to another. It is also one call
    per step for all parameters.
    """
    import torch

    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


def probe_fingerprint() -> str:
    """16 hex digits of the SHA-256 of the bits of a fixed computation: matrix products of
    uneven shapes (MKL), a linear layer's forward and backward pass, tanh, softmax,
    log-softmax, exp, sums and a step of `adam` (ATen's kernels), on one thread, from a fixed
    generator. Two processes print the same fingerprint when they compute these alike; the
    caller's torch state (threads, global generator) is left as it was."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(20261205)
        x = torch.randn(257, 67, generator=gen)
        weight = torch.randn(67, 131, generator=gen).requires_grad_()
        bias = torch.randn(131, generator=gen).requires_grad_()
        hidden = torch.tanh(torch.nn.functional.linear(x, weight.T, bias))
        logits = hidden @ torch.randn(131, 9, generator=gen)
        loss = -torch.log_softmax(logits, -1)[:, 0].mean() + hidden.pow(2).sum(0).mean()
        loss.backward()
        optimizer = adam([weight, bias], lr=1e-3)
        optimizer.step()
        parts = (
            x @ x.T,
            logits,
            torch.softmax(logits, -1),
            logits.exp().sum(0),
            loss.detach(),
            weight.detach(),
            bias.detach(),
        )
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part.detach().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]
    finally:
        torch.set_num_threads(threads)


def kernels() -> dict[str, str | None]:
    """The code path this process runs on: torch's CPU capability, the variables of `PINNED`
    as the environment has them (None: unset) and the fingerprint of `probe_fingerprint`."""
    import torch

    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{name: os.environ.get(name) for name in PINNED},
        "fingerprint": probe_fingerprint(),
    }
