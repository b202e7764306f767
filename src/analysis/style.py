"""One look for every figure: a colour per algorithm (Okabe-Ito, colour-blind safe), labels, saving.

Okabe & Ito (2008), "Color Universal Design": eight colours distinguishable under the common
forms of colour blindness. Each algorithm keeps its colour in every figure; a policy evaluated
with its shield off keeps the algorithm's colour and is drawn dashed.
"""

from __future__ import annotations

import textwrap
import zlib
from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

from src.algos.registry import algorithm_names, get_algorithm
from src.core.io import atomic_output
from src.plotting import plt

__all__ = [
    "ALGO_COLORS",
    "FIGURE_FORMATS",
    "OKABE_ITO",
    "algo_color",
    "figure_title",
    "has_shield",
    "new_figure",
    "policy_label",
    "policy_linestyle",
    "save_figure",
]

OKABE_ITO: dict[str, str] = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "bluish_green": "#009E73",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "sky_blue": "#56B4E9",
    "yellow": "#F0E442",
    "black": "#000000",
}

ALGO_COLORS: dict[str, str] = {
    "ippo": OKABE_ITO["blue"],
    "ippo_lag": OKABE_ITO["orange"],
    "shield": OKABE_ITO["bluish_green"],
    "shield_dec": OKABE_ITO["reddish_purple"],
}

# Colours left for algorithms added later; yellow is last because it is faint on white.
_SPARE_COLORS = tuple(OKABE_ITO[name] for name in ("vermillion", "sky_blue", "black", "yellow"))

FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf")


def algo_color(algo: str) -> str:
    """The colour of an algorithm; unknown names get a spare colour fixed by their name."""
    if algo in ALGO_COLORS:
        return ALGO_COLORS[algo]
    # A hash of the name (not the order of appearance) keeps the colour the same in every figure.
    return _SPARE_COLORS[zlib.crc32(algo.encode("utf-8")) % len(_SPARE_COLORS)]


def has_shield(algo: str) -> bool:
    """Whether `algo` is a registered algorithm (built in or given by import path) whose
    actions pass through a shield."""
    return algo in algorithm_names() and get_algorithm(algo).shielded


def policy_label(algo: str, shielded: bool) -> str:
    """Legend label of a policy: the algorithm, marked when a shielded one is shown unshielded."""
    return f"{algo} (shield off)" if has_shield(algo) and not shielded else algo


def policy_linestyle(algo: str, shielded: bool) -> str:
    """Solid for deployed policies, dashed for a shielded algorithm's base policy."""
    return "--" if has_shield(algo) and not shielded else "-"


def new_figure(
    n_panels: int, *, rows: int = 1, panel_size: tuple[float, float] = (4.2, 3.2)
) -> tuple[Figure, list]:
    """A figure with `rows` x `n_panels` axes (one column per env), returned as a flat list."""
    if n_panels < 1 or rows < 1:
        raise ValueError(f"need at least one panel and row, got {n_panels} x {rows}")
    fig, axes = plt.subplots(
        rows,
        n_panels,
        # A minimum width leaves room for the title and legend of single-panel figures.
        figsize=(max(panel_size[0] * n_panels, 6.0), panel_size[1] * rows),
        squeeze=False,
        layout="constrained",
    )
    return fig, list(axes.flat)


def figure_title(fig: Figure, text: str, *, fontsize: float = 9.0) -> None:
    """Set the figure title, wrapped to the figure's width so it is never cut off."""
    # About 1.6 characters per inch per point of font size is what DejaVu Sans needs.
    width = max(20, int(fig.get_figwidth() * 120 / fontsize))
    fig.suptitle(textwrap.fill(text, width=width), fontsize=fontsize)


def save_figure(
    fig: Figure, directory: str | Path, name: str, formats: Iterable[str] = FIGURE_FORMATS
) -> list[Path]:
    """Save `fig` as `directory/name.{png,pdf}` atomically, close it, and return the paths."""
    paths = []
    try:
        for fmt in formats:
            path = Path(directory) / f"{name}.{fmt}"
            with atomic_output(path) as tmp:
                # No creation date in PDFs: the same results give the same bytes.
                metadata = {"CreationDate": None} if fmt == "pdf" else None
                fig.savefig(tmp, format=fmt, dpi=150, metadata=metadata)
            paths.append(path)
    finally:
        plt.close(fig)
    return paths
