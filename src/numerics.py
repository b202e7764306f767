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
- OpenBLAS, NumPy's matrix library: its Haswell kernels (`OPENBLAS_CORETYPE`; AVX2 and FMA,
  the same instructions on every CPU that has them) on one thread. `linear` (every network's
  layers, forward and backward), `baddbmm` and `bmm` (the shield's stacked models without a
  gradient) send their products there, which MKL's `COMPATIBLE` branch runs on slower, older
  instructions (the cost of both: BENCHMARKS.md, "Numerics").

The variables must be set before torch runs its first operation, MKL its first product and NumPy is
imported (OpenBLAS picks its kernels when it loads): `src/__init__.py` calls `pin_kernels`, so
importing anything from `src` first is enough (a process that imported NumPy before is refused at
its first `baddbmm`; the processes it starts inherit the variables). A variable already set in the
environment is left as it is (set `ATEN_CPU_CAPABILITY=default` or `MKL_CBWR=AUTO` to run on the
machine's own kernels). Other machines (ARM) have one code path and are left alone; an x86-64 CPU
without AVX2 and FMA keeps OpenBLAS's own choice (`kernels` records it). `kernels` reports what a
process runs on, with `probe_fingerprint`: a hash of the bits of a fixed set of the operations
training uses, equal on two machines exactly when they compute those operations alike. Every run
records both (`src.algos.train.run_metadata`) and the results page names the fingerprint it was made
with.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "PINNED",
    "adam",
    "baddbmm",
    "bmm",
    "kernels",
    "linear",
    "openblas_core",
    "pin_kernels",
    "probe_fingerprint",
]

PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "1",
}
"""The environment variables `pin_kernels` sets on x86-64 and their values (OpenBLAS's core
only on a CPU with AVX2 and FMA: its Haswell kernels would not run on another)."""

_CORENAME_SYMBOLS = (
    "scipy_openblas_get_corename64_",
    "scipy_openblas_get_corename",
    "openblas_get_corename",
)


def _has_avx2_fma() -> bool:
    """Whether the CPU reports AVX2 and FMA (/proc/cpuinfo; False where there is none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = line.split()
                    return "avx2" in flags and "fma" in flags
    except OSError:
        pass
    return False


def pin_kernels() -> None:
    """On x86-64, set each variable of `PINNED` that the environment does not set already
    (OpenBLAS's core only on a CPU with AVX2 and FMA). Processes started from this one inherit
    them; this one's OpenBLAS has them only if NumPy was not imported yet (`baddbmm` checks)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return
    for name, value in PINNED.items():
        if name != "OPENBLAS_CORETYPE" or _has_avx2_fma():
            os.environ.setdefault(name, value)


@functools.cache
def _check_openblas() -> None:
    """Raise RuntimeError when OpenBLAS runs other kernels than `OPENBLAS_CORETYPE` asks
    (NumPy was imported before `src` set it): this process would compute other numbers than a
    pinned one. Checked once per process."""
    wanted = os.environ.get("OPENBLAS_CORETYPE")
    core = openblas_core()
    if wanted and core and core.lower() != wanted.lower():
        raise RuntimeError(
            f"NumPy's OpenBLAS runs its {core} kernels, not OPENBLAS_CORETYPE={wanted}: numpy "
            "was imported before src; import src (or any module of it) first, or set "
            "OPENBLAS_CORETYPE in the environment"
        )


def baddbmm(
    bias: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`torch.baddbmm(bias, x, weight)`: bias [B or 1, 1 or N, P] + x [B, N, K] @ weight
    [B, K, P], per batch element. Without a gradient to track, the products run in NumPy's
    OpenBLAS (module docstring) and the result shares its memory; with one, in torch.

    `out` [B, N, P], if given, receives the result (it must not overlap the inputs).
    """
    import numpy as np
    import torch

    if torch.is_grad_enabled() and (bias.requires_grad or x.requires_grad or weight.requires_grad):
        if out is None:
            return torch.baddbmm(bias, x, weight)
        return torch.baddbmm(bias, x, weight, out=out)
    _check_openblas()
    if out is None:
        result = np.matmul(x.detach().numpy(), weight.detach().numpy())
        result += bias.detach().numpy()
        return torch.from_numpy(result)
    target = out.detach().numpy()
    np.matmul(x.detach().numpy(), weight.detach().numpy(), out=target)
    target += bias.detach().numpy()
    return out


def bmm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`torch.bmm(x, weight)`, x [B, N, K] @ weight [B, K, P], as `baddbmm` computes it."""
    import numpy as np
    import torch

    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return torch.bmm(x, weight)
    _check_openblas()
    return torch.from_numpy(np.matmul(x.detach().numpy(), weight.detach().numpy()))


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`torch.nn.functional.linear(x, weight, bias)`, x [..., in] @ weight[out, in].T + bias,
    with its products (forward and, through `_OpenBLASLinear`, backward) in NumPy's OpenBLAS.

    `out` [..., out], if given and no gradient is tracked, receives the result.
    """
    import torch

    tracked = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or bias.requires_grad
    )
    if tracked:
        return _linear_function().apply(x, weight, bias)
    return _affine(x.detach(), weight.detach(), bias.detach(), out)


def _affine(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None
) -> torch.Tensor:
    """x [..., in] @ weight.T + bias in OpenBLAS, into `out` if given."""
    import numpy as np
    import torch

    _check_openblas()
    flat = x.reshape(-1, x.shape[-1]).numpy()
    if out is None:
        result = np.matmul(flat, weight.numpy().T)
        result += bias.numpy()
        return torch.from_numpy(result).view(*x.shape[:-1], weight.shape[0])
    target = out.view(-1, weight.shape[0]).numpy()
    np.matmul(flat, weight.numpy().T, out=target)
    target += bias.numpy()
    return out


@functools.cache
def _linear_function() -> type:
    """The autograd function of `linear`: products in OpenBLAS both ways, the bias's gradient
    summed by torch (torch imported lazily, as everywhere in this module: importing it loads
    NumPy, which must come after `pin_kernels`)."""
    import numpy as np
    import torch

    class OpenBLASLinear(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
        ) -> torch.Tensor:
            ctx.save_for_backward(x, weight)
            return _affine(x.detach(), weight.detach(), bias.detach(), None)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            x, weight = ctx.saved_tensors
            g = grad.reshape(-1, weight.shape[0]).contiguous().numpy()
            grad_x = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = torch.from_numpy(np.matmul(g, weight.detach().numpy())).view(x.shape)
            if ctx.needs_input_grad[1]:
                flat = x.detach().reshape(-1, x.shape[-1]).numpy()
                grad_weight = torch.from_numpy(np.matmul(g.T, flat))
            if ctx.needs_input_grad[2]:
                grad_bias = grad.reshape(-1, weight.shape[0]).sum(0)
            return grad_x, grad_weight, grad_bias

    return OpenBLASLinear


def openblas_core() -> str | None:
    """The kernels NumPy's OpenBLAS runs on (e.g. "Haswell"), or None where it cannot say
    (another BLAS, or no OpenBLAS symbol to ask)."""
    import numpy  # noqa: F401  (loads the library)

    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    libraries = sorted({line.split()[-1] for line in maps if "openblas" in line.split()[-1]})
    for library in libraries:
        handle = ctypes.CDLL(library)
        for symbol in _CORENAME_SYMBOLS:
            getter = getattr(handle, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_char_p
                return getter().decode().strip()
    return None


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
    uneven shapes (MKL, and OpenBLAS through `baddbmm`), a linear layer's forward and backward
    pass, tanh, softmax, log-softmax, exp, sums and a step of `adam` (ATen's kernels), on one
    thread, from a fixed generator. Two processes print the same fingerprint when they compute
    these alike; the caller's torch state (threads, global generator) is left as it was."""
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
        stacked = x[:256].reshape(4, 64, 67)
        parts = (
            x @ x.T,
            baddbmm(bias.detach()[:64].view(1, 1, 64), stacked, stacked.mT.contiguous()),
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
    """The code path this process runs on: torch's CPU capability, OpenBLAS's kernels, the
    variables of `PINNED` as the environment has them (None: unset) and the fingerprint of
    `probe_fingerprint`."""
    import torch

    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "openblas_core": openblas_core(),
        **{name: os.environ.get(name) for name in PINNED},
        "fingerprint": probe_fingerprint(),
    }
