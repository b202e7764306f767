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


def test_pin_kernels_sets_what_is_unset_and_keeps_what_is_set(monkeypatch) -> None:
    for name in numerics.PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.setattr(numerics.platform, "machine", lambda: "x86_64")
    numerics.pin_kernels()
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert os.environ["MKL_CBWR"] == "AUTO"  # the user's choice stands


def test_pin_kernels_leaves_other_machines_alone(monkeypatch) -> None:
    for name in numerics.PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(numerics.platform, "machine", lambda: "aarch64")
    numerics.pin_kernels()
    assert not any(name in os.environ for name in numerics.PINNED)


@pytest.mark.skipif(not (X86 and _has_avx2()), reason="ATen is pinned to AVX2 on x86-64")
def test_importing_src_pins_torch_to_one_path_unless_told_otherwise() -> None:
    """MKL in its COMPATIBLE branch (the one it runs alike on every vendor's CPU), ATen on
    AVX2; another path prints another fingerprint."""
    pinned = _kernels_of_a_fresh_process(_clean_environment())
    assert pinned["torch_cpu_capability"] == "AVX2"
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
    COMPATIBLE and AVX2 branches, where torch's per-tensor Adam differs."""
    compatible = {**_clean_environment(), "MKL_CBWR": "COMPATIBLE"}
    avx2 = {**_clean_environment(), "MKL_CBWR": "AVX2"}
    assert _adam_bits(compatible, fused=True) == _adam_bits(avx2, fused=True)
    assert _adam_bits(compatible, fused=False) != _adam_bits(avx2, fused=False)
