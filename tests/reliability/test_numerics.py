"""src.numerics: torch's CPU kernels pinned to one code path on x86-64, and recorded."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from src import numerics

ROOT = Path(__file__).resolve().parents[2]
X86 = platform.machine().lower() in ("x86_64", "amd64")


def _has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _intel() -> bool:
    try:
        return "GenuineIntel" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in numerics.PINNED}


def _kernels_of_a_fresh_process(env: dict[str, str]) -> dict[str, str | None]:
    """`numerics.kernels()` in a new interpreter that imports src, then runs torch."""
    code = (
        "import json, src, torch; from src.numerics import kernels; "
        "torch.ones(64, 64) @ torch.ones(64, 64); print(json.dumps(kernels()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _unpinned(monkeypatch, *, machine: str = "x86_64", avx2_fma: bool = True) -> None:
    """No variable of PINNED set, on `machine`."""
    for name in numerics.PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(numerics.platform, "machine", lambda: machine)
    monkeypatch.setattr(numerics, "_has_avx2_fma", lambda: avx2_fma)


def test_pin_kernels_sets_what_is_unset_and_keeps_what_is_set(monkeypatch) -> None:
    _unpinned(monkeypatch)
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    numerics.pin_kernels()
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert os.environ["MKL_CBWR"] == "AUTO"  # the user's choice stands


def test_openblas_keeps_its_own_kernels_on_a_cpu_without_avx2(monkeypatch) -> None:
    """OpenBLAS's Haswell kernels would not run there (torch falls back by itself)."""
    _unpinned(monkeypatch, avx2_fma=False)
    numerics.pin_kernels()
    assert "OPENBLAS_CORETYPE" not in os.environ
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"


def test_products_in_an_openblas_on_other_kernels_are_refused(monkeypatch) -> None:
    """NumPy imported before src: its OpenBLAS runs the CPU's own kernels, named in one line."""
    import torch

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setattr(numerics, "openblas_core", lambda: "SkylakeX")
    numerics._check_openblas.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"runs its SkylakeX kernels, not .*=Haswell"):
            numerics.bmm(torch.ones(1, 2, 2), torch.ones(1, 2, 2))
    finally:
        numerics._check_openblas.cache_clear()


@pytest.mark.skipif(not (X86 and _has_avx2()), reason="OpenBLAS is pinned on x86-64 with AVX2")
def test_a_process_that_imports_numpy_first_is_refused_at_its_first_product() -> None:
    code = (
        "import numpy, torch, src; from src import numerics; "
        "numerics.bmm(torch.ones(1, 2, 2), torch.ones(1, 2, 2))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_clean_environment(),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "numpy was imported before src" in done.stderr


def test_stacked_products_match_torch_and_keep_gradients() -> None:
    """`baddbmm` and `bmm` compute torch's products (to float rounding) in NumPy without a
    gradient to track, and in torch (with its gradient) with one."""
    import torch

    gen = torch.Generator().manual_seed(0)
    bias, x, weight = (
        torch.randn(*shape, generator=gen) for shape in ((3, 1, 5), (3, 7, 4), (3, 4, 5))
    )
    assert torch.allclose(
        numerics.baddbmm(bias, x, weight), torch.baddbmm(bias, x, weight), atol=1e-6
    )
    assert torch.allclose(numerics.bmm(x, weight), torch.bmm(x, weight), atol=1e-6)
    out = torch.empty(3, 7, 5)
    assert numerics.baddbmm(bias, x, weight, out=out) is out
    assert torch.allclose(out, torch.baddbmm(bias, x, weight), atol=1e-6)
    weight.requires_grad_()
    numerics.baddbmm(bias, x, weight).sum().backward()
    assert torch.allclose(weight.grad, x.sum(1).unsqueeze(-1).expand(3, 4, 5))
    with torch.no_grad():
        assert not numerics.bmm(x, weight).requires_grad


def test_pin_kernels_leaves_other_machines_alone(monkeypatch) -> None:
    _unpinned(monkeypatch, machine="aarch64")
    numerics.pin_kernels()
    assert not any(name in os.environ for name in numerics.PINNED)


@pytest.mark.skipif(not (X86 and _has_avx2()), reason="ATen is pinned to AVX2 on x86-64")
def test_importing_src_pins_torch_to_one_path_unless_told_otherwise() -> None:
    """MKL in its COMPATIBLE branch (the one it runs alike on every vendor's CPU), ATen on
    AVX2; another path prints another fingerprint."""
    pinned = _kernels_of_a_fresh_process(_clean_environment())
    assert pinned["torch_cpu_capability"] == "AVX2" and pinned["openblas_core"] == "Haswell"
    assert pinned["MKL_CBWR"] == "COMPATIBLE" and pinned["ATEN_CPU_CAPABILITY"] == "avx2"
    own = _kernels_of_a_fresh_process({**_clean_environment(), "MKL_CBWR": "AUTO"})
    assert own["MKL_CBWR"] == "AUTO"
    assert own["fingerprint"] != pinned["fingerprint"]


def _adam_bits(env: dict[str, str], *, fused: bool) -> str:
    """The hash of two Adam steps (`numerics.adam`, or torch's per-tensor Adam) in a new
    interpreter with `env`."""
    make = "adam([w], lr=1e-3)" if fused else "torch.optim.Adam([w], lr=1e-3)"
    code = (
        "import hashlib, src, torch; from src.numerics import adam; "
        "g = torch.Generator().manual_seed(0); "
        "w = torch.nn.Parameter(torch.randn(4096, generator=g)); "
        f"opt = {make}; "
        "exec('for _ in range(2): w.grad = torch.randn(4096, generator=g); opt.step()'); "
        "print(hashlib.sha256(w.detach().numpy().tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not (X86 and _has_avx2()), reason="MKL's branches exist on x86-64")
def test_adam_steps_do_not_depend_on_mkls_branch() -> None:
    """`numerics.adam` takes its square roots outside MKL: the same bits under MKL's
    COMPATIBLE and AVX2 branches. On an Intel CPU torch's per-tensor Adam differs between them
    (the control: the test sees the branch); on an AMD EPYC both branches gave torch's Adam the
    same bits, so there the control has nothing to show."""
    compatible = {**_clean_environment(), "MKL_CBWR": "COMPATIBLE"}
    avx2 = {**_clean_environment(), "MKL_CBWR": "AVX2"}
    assert _adam_bits(compatible, fused=True) == _adam_bits(avx2, fused=True)
    if _intel():
        assert _adam_bits(compatible, fused=False) != _adam_bits(avx2, fused=False)
