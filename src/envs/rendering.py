"""NumPy drawing of the native tasks into uint8 frames (no display, no pygame)."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["AGENT_COLOURS", "agent_colours", "draw_grid", "paint_disc"]

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


@functools.lru_cache(maxsize=64)
def _disc_mask(radius: int, inner: int) -> np.ndarray:
    """``[2 r, 6 r]`` bool: the pixels of a disc (or ring) of a ``[H, 3 W]`` frame view."""
    offsets = np.arange(-radius, radius, dtype=np.float64) + 0.5  # pixel centres
    d2 = offsets[:, None] * offsets[:, None] + offsets[None, :] * offsets[None, :]
    mask = d2 <= radius * radius
    if inner > 0:
        mask &= d2 > inner * inner
    mask = np.repeat(mask, 3, axis=1)  # one entry per byte of a pixel row
    mask.flags.writeable = False
    return mask


def paint_disc(
    frame: np.ndarray, x: int, y: int, radius: int, colour: np.ndarray, *, inner: int = 0
) -> None:
    """Paint a disc of ``radius`` whole pixels centred on the pixel corner ``(x, y)`` in place.

    ``frame`` is a C-contiguous ``[H, W, 3]`` uint8 array, ``x`` a column and ``y`` a row; pixel
    ``(r, c)`` is painted when its centre ``(c + 0.5, r + 0.5)`` lies within ``radius`` of
    ``(x, y)`` (pygame's rule for integer centres and radii). With ``inner > 0`` only the ring
    beyond ``inner`` is painted. Parts outside the frame are clipped.
    """
    if frame.dtype != np.uint8 or frame.ndim != 3 or not frame.flags.c_contiguous:
        raise ValueError("frame must be a C-contiguous [H, W, 3] uint8 array")
    height, width = frame.shape[:2]
    if radius <= 0:
        return
    row0, col0 = y - radius, x - radius
    top, left = max(0, row0), max(0, col0)
    bottom, right = min(height, y + radius), min(width, x + radius)
    if top >= bottom or left >= right:
        return
    mask = _disc_mask(radius, max(0, inner))[
        top - row0 : bottom - row0, 3 * (left - col0) : 3 * (right - col0)
    ]
    rows = frame.reshape(height, 3 * width)  # a view: contiguous bytes per row
    region = rows[top:bottom, 3 * left : 3 * right]
    np.copyto(region, np.tile(np.asarray(colour, dtype=np.uint8), right - left), where=mask)
