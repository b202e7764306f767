"""What every benchmark shares: its section of BENCHMARKS.md, rewritten in place on each run."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from src.analysis.files import write_text

BENCHMARKS_MD = Path(__file__).with_name("BENCHMARKS.md")
OUT = Path(__file__).with_name("out")


def markers(name: str) -> tuple[str, str]:
    """The HTML comments that delimit benchmark `name`'s block in BENCHMARKS.md."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def machine_info(load_before: Sequence[float]) -> dict[str, Any]:
    """The machine a benchmark ran on, with the load average before it and now."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
    }


def write_section(
    name: str, body: str, *, heading: str = "", intro: str = "", path: Path = BENCHMARKS_MD
) -> None:
    """Replace the block of benchmark `name` in `path` atomically, leaving the others alone.

    A missing file or block is created: the block is appended, after `heading` and `intro` when
    given (a body may carry its own heading instead).
    """
    start, end = markers(name)
    block = f"{start}\n{body}\n{end}"
    text = (
        path.read_text() if path.exists() else "# Benchmarks\n\nRun them all with `make bench`.\n"
    )
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        preface = "".join(f"{part}\n\n" for part in (heading, intro) if part)
        text = text.rstrip("\n") + f"\n\n{preface}{block}\n"
    write_text(text, path)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1, or an error that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def save_results(
    name: str,
    results: Mapping[str, Any],
    markdown: str,
    *,
    quick: bool,
    out: Path = OUT,
    path: Path = BENCHMARKS_MD,
) -> None:
    """Print benchmark `name`'s `markdown`, save its `results` as `<out>/<name>.json`
    (`<name>_quick.json` for a smoke run) atomically and, unless `quick`, make `markdown` its
    section of `path`."""
    print(markdown)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2, default=float) + "\n"
    write_text(text, out / f"{name}{'_quick' if quick else ''}.json")
    if not quick:
        write_section(name, markdown, path=path)
