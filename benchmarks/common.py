"""What every benchmark shares: its section of BENCHMARKS.md, rewritten in place on each run."""

from __future__ import annotations

from pathlib import Path

from src.analysis.files import write_text

BENCHMARKS_MD = Path(__file__).with_name("BENCHMARKS.md")


def markers(name: str) -> tuple[str, str]:
    """The HTML comments that delimit benchmark `name`'s block in BENCHMARKS.md."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


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
