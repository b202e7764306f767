"""Same bits on every machine: the short runs of `fingerprints.py` hash to the committed values.

A machine whose CPU, libraries or code path compute one bit differently fails here, naming the
runs that differ and the code path it ran on. The values are regenerated, after a change that
is meant to change the numbers, by `python -m tests.reliability.fingerprints --write`.

Under `FINGERPRINT_CPU` (set by .ci/run) the runs are also trained inside `qemu-x86_64`
emulating that CPU (e.g. `EPYC-Rome`, an AMD EPYC without AVX-512): another vendor's
processor, in CI. Emulation is about 70 times slower than the machine, so it trains the runs
matching `FINGERPRINT_RUNS` (default `intersection/*`: every algorithm on one task).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src import numerics
from tests.reliability import fingerprints

X86 = numerics.platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="the fingerprints are x86-64's code path")


def _committed() -> dict:
    return json.loads(fingerprints.STORE.read_text(encoding="utf-8"))


def _differences(found: dict[str, str], committed: dict[str, str]) -> list[str]:
    return [
        f"{run}: {found.get(run)} != committed {want}"
        for run, want in committed.items()
        if found.get(run) != want
    ]


def test_every_run_covers_every_built_in_task_and_algorithm() -> None:
    from src.algos.registry import ALGORITHMS
    from src.envs.registry import ENVS, make_vector_env

    def discrete(task: str) -> bool:
        env = make_vector_env(task, num_envs=1)
        try:
            return not getattr(env, "continuous_actions", False)
        finally:
            env.close()

    # The fingerprinted runs are those of the built-in tasks with discrete actions (by their
    # default parameters); mamujoco's Box actions are not among them.
    runs = set(_committed()["runs"])
    tasks = [task for task in ENVS if discrete(task)]
    assert runs == {f"{task}/{algo}" for task in tasks for algo in ALGORITHMS}


def test_the_code_path_has_its_committed_fingerprint() -> None:
    committed = _committed()["kernels"]
    found = numerics.kernels()
    assert found["fingerprint"] == committed["fingerprint"], (
        f"this machine's code path {found} computes other bits than the committed {committed}"
    )


def test_short_runs_train_to_their_committed_fingerprints(tmp_path: Path) -> None:
    committed = _committed()["runs"]
    found = {
        run: fingerprints.train_and_fingerprint(*run.split("/"), tmp_path) for run in committed
    }
    differ = _differences(found, committed)
    assert not differ, (
        f"on code path {numerics.kernels()}, runs trained to other numbers: " + "; ".join(differ)
    )


@pytest.mark.skipif(
    not os.environ.get("FINGERPRINT_CPU") or shutil.which("qemu-x86_64") is None,
    reason="set FINGERPRINT_CPU (a qemu CPU model) with qemu-user installed",
)
def test_an_emulated_cpu_of_another_vendor_trains_to_the_same_fingerprints() -> None:
    cpu = os.environ["FINGERPRINT_CPU"]
    runs = os.environ.get("FINGERPRINT_RUNS", "intersection/*").split()
    module = [sys.executable, "-m", "tests.reliability.fingerprints", "--runs", *runs]
    out = subprocess.run(
        ["qemu-x86_64", "-cpu", cpu, *module],
        cwd=fingerprints.ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, f"emulated {cpu} failed: {out.stderr[-2000:]}"
    record = json.loads(out.stdout[out.stdout.index("{\n") :])
    committed = {run: _committed()["runs"][run] for run in record["runs"]}
    differ = _differences(record["runs"], committed)
    where = f"emulated {cpu} ({record['kernels']})"
    assert record["runs"] and not differ, f"{where}: " + "; ".join(differ)
