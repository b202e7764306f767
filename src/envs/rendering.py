"""NumPy drawing of grid tasks into uint8 frames (no display, no pygame)."""

from __future__ import annotations

import numpy as np

__all__ = ["AGENT_COLOURS", "agent_colours", "draw_grid"]

# Distinct, colour-blind friendly agent colours (Okabe-Ito palette), cycled beyond eight agents.
AGENT_COLOURS = np.array(
    [
        [0, 114, 178],
        [230, 159, 0],
        [0, 158, 115],
        [204, 121, 167],
        [86, 180, 233],
        [213, 94, 0],
        [240, 228, 66],
        [0, 0, 0],
    ],
    dtype=np.uint8,
)
_LINE = np.array([200, 200, 200], dtype=np.uint8)


def agent_colours(n_agents: int) -> np.ndarray:
    """``[A, 3]`` uint8 colours, one per agent."""
    return AGENT_COLOURS[np.arange(n_agents) % len(AGENT_COLOURS)]


def draw_grid(
    *,
    size: int,
    cell_pixels: int,
    floor: np.ndarray,
    hazard: np.ndarray,
    hazard_colour: np.ndarray,
    cells: np.ndarray,
    goals: np.ndarray,
    colours: np.ndarray,
) -> np.ndarray:
    """Draw one grid copy as an ``[size * px, size * px, 3]`` uint8 frame.

    ``floor`` is ``[C, 3]`` uint8 (per-cell floor colour), ``hazard`` ``[C]`` bool, ``cells`` and
    ``goals`` ``[A]`` flat cell indices, ``colours`` ``[A, 3]`` uint8. Goals are drawn as pale
    cells in the agent's colour, agents as inset squares; an agent on top of another hides it.
    """
    px = cell_pixels
    base = np.where(hazard[:, None], hazard_colour[None, :], floor)  # [C, 3]
    # Goal cells: the agent colour blended halfway towards white.
    base[goals] = (colours.astype(np.uint16) + 255) // 2
    image = np.repeat(np.repeat(base.reshape(size, size, 3), px, axis=0), px, axis=1)
    image[::px, :] = _LINE
    image[:, ::px] = _LINE
    margin = max(1, px // 6)
    rows, cols = np.divmod(cells, size)
    for r, c, colour in zip(rows.tolist(), cols.tolist(), colours, strict=True):
        image[
            r * px + margin : (r + 1) * px - margin + 1, c * px + margin : (c + 1) * px - margin + 1
        ] = colour
    return image
