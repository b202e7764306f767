"""Safety marks on rendered frames: a status strip under each frame of a policy's video.

Under the env's frame a dark strip holds one box per agent in its colour
(`src.envs.rendering.agent_colours`, in `possible_agents` order) and a line of text:

- a red ring around an agent's box when that agent incurred a cost at this step, and a red
  border around the whole frame when any agent did (a violation, docs/design.md);
- a yellow bar under an agent's box when the shield changed that agent's proposed action at
  this step;
- `STEP t  VIOLATIONS v` (and `SHIELD s` for shielded policies): the step within the episode,
  the steps so far at which some agent incurred a cost, and the agent-steps so far whose action
  the shield changed.

Everything is drawn with NumPy and a 5 x 7 bitmap font, so frames are exactly reproducible.
`SafetyOverlay` is a ParallelEnv wrapper whose `render` returns the marked frame; put it
between the env and `RecordVideo`, and tell it the shield's flags before each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers.base_parallel import BaseParallelWrapper

from src.config.base import LIMITS
from src.core.wrappers import infer_episode_cap
from src.envs.rendering import agent_colours

__all__ = [
    "INTERVENTION_COLOUR",
    "MARKS_LEGEND",
    "STRIP_COLOUR",
    "TEXT_COLOUR",
    "VIOLATION_COLOUR",
    "SafetyOverlay",
    "StripLayout",
    "annotate_frame",
    "draw_text",
    "status_text",
    "text_width",
]

MARKS_LEGEND = (
    "Under each frame, one box per agent in its colour: a red ring marks an agent that "
    "incurred a cost at that step (and a red border the whole frame), a yellow bar an agent "
    "whose proposed action the shield changed. STEP is the step within the episode, "
    "VIOLATIONS the steps so far at which some agent incurred a cost, SHIELD (shielded "
    "policies) the agent-steps so far whose action the shield changed."
)
"""What the marks mean, for pages and captions that show the videos."""

STRIP_COLOUR = np.array([32, 32, 32], dtype=np.uint8)
TEXT_COLOUR = np.array([255, 255, 255], dtype=np.uint8)
VIOLATION_COLOUR = np.array([230, 20, 20], dtype=np.uint8)
INTERVENTION_COLOUR = np.array([255, 215, 0], dtype=np.uint8)

# 5 x 7 glyphs of the characters the status line uses ('#' = ink).
_GLYPHS: dict[str, tuple[str, ...]] = {
    " ": ("     ",) * 7,
    "0": (" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
    "1": ("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    "2": (" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
    "3": ("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
    "4": ("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
    "5": ("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
    "6": ("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
    "7": ("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
    "8": (" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
    "9": (" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "),
    "A": (" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"),
    "D": ("#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "),
    "E": ("#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"),
    "H": ("#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"),
    "I": (" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    "L": ("#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"),
    "N": ("#   #", "##  #", "# # #", "#  ##", "#   #", "#   #", "#   #"),
    "O": (" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "),
    "P": ("#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "),
    "S": (" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "),
    "T": ("#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "),
    "V": ("#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "),
}
_GLYPH_BITMAPS = {
    char: np.array([[c == "#" for c in row] for row in rows], dtype=bool)
    for char, rows in _GLYPHS.items()
}
GLYPH_WIDTH, GLYPH_HEIGHT = 5, 7
_ADVANCE = GLYPH_WIDTH + 1  # one column of space between characters


def text_width(text: str, scale: int) -> int:
    """Width in pixels of `text` drawn at `scale` (no trailing space)."""
    return max(0, len(text) * _ADVANCE - 1) * scale


def draw_text(
    image: np.ndarray, text: str, *, top: int, left: int, scale: int, colour: np.ndarray
) -> None:
    """Draw `text` into `image` ([H, W, 3] uint8, in place); ink outside the image is cut off.

    Characters: digits, space and the capitals of `STEP`, `VIOLATIONS` and `SHIELD`.
    """
    unknown = sorted({c for c in text if c not in _GLYPH_BITMAPS})
    if unknown:
        raise ValueError(f"no glyph for {unknown}; the font has {sorted(_GLYPH_BITMAPS)}")
    height, width = image.shape[:2]
    for index, char in enumerate(text):
        ink = np.kron(_GLYPH_BITMAPS[char], np.ones((scale, scale), dtype=bool))
        y0, x0 = top, left + index * _ADVANCE * scale
        y1, x1 = min(y0 + ink.shape[0], height), min(x0 + ink.shape[1], width)
        if y0 >= height or x0 >= width or y1 <= 0 or x1 <= 0:
            continue
        region = image[max(y0, 0) : y1, max(x0, 0) : x1]
        region[ink[max(-y0, 0) : y1 - y0, max(-x0, 0) : x1 - x0]] = colour


def status_text(*, step: int, violations: int, interventions: int | None) -> list[str]:
    """The items of the status line (the shield's count only for shielded policies)."""
    items = [f"STEP {step}", f"VIOLATIONS {violations}"]
    if interventions is not None:
        items.append(f"SHIELD {interventions}")
    return items


class StripLayout:
    """Sizes and positions of the status strip for a frame `width` pixels wide.

    With `widest` (the items with the largest numbers the episode can reach), scale and line
    breaks are chosen for those, so the strip keeps its size while the numbers grow (a video
    needs frames of one size; narrow frames would otherwise gain a line mid-episode).
    """

    def __init__(
        self,
        *,
        width: int,
        n_agents: int,
        items: Sequence[str],
        widest: Sequence[str] | None = None,
    ) -> None:
        if width < 1 or n_agents < 1:
            raise ValueError(f"need width >= 1 and n_agents >= 1, got {width} and {n_agents}")
        sizing = list(items if widest is None else widest)
        if len(sizing) != len(items):
            raise ValueError(f"widest has {len(sizing)} items, the status line {len(items)}")
        # Large frames (mpe2 draws 700 pixels) get larger marks; every item must fit a line.
        scale = int(np.clip(width // 160, 1, 4))
        while scale > 1 and max(text_width(item, scale) for item in sizing) + 4 * scale > width:
            scale -= 1
        self.scale = scale
        self.pad = 3 * scale
        self.ring = max(2, scale)
        self.box = 8 * scale
        self.bar = 2 * self.ring
        self.cell = self.box + 2 * self.ring + 2 * scale  # one agent's column, with its gap
        # Items share a line while they fit, separated by two spaces' width.
        groups: list[list[int]] = []
        for index, item in enumerate(sizing):
            joined = "  ".join([*(sizing[i] for i in groups[-1]), item]) if groups else item
            if groups and text_width(joined, scale) + 2 * self.pad <= width:
                groups[-1].append(index)
            else:
                groups.append([index])
        self.lines = ["  ".join(items[i] for i in group) for group in groups]
        self.boxes_top = self.pad
        self.bar_top = self.boxes_top + self.box + 2 * self.ring + scale
        self.text_top = self.bar_top + self.bar + self.pad
        line_height = (GLYPH_HEIGHT + 2) * scale
        height = self.text_top + len(self.lines) * line_height + self.pad - 2 * scale
        self.height = height + height % 2  # video encoders want even frame sizes

    def box_left(self, agent: int) -> int:
        """Left pixel of agent `agent`'s box (inside its ring)."""
        return self.pad + agent * self.cell + self.ring


def annotate_frame(
    frame: np.ndarray,
    *,
    step: int,
    violations: int,
    costs: np.ndarray,
    intervened: np.ndarray | None,
    interventions: int | None = None,
    colours: np.ndarray | None = None,
    widest: Sequence[str] | None = None,
) -> np.ndarray:
    """The frame with a red border if some agent has a cost > 0, over its status strip.

    `costs` `[A]` are the agents' costs at this step; `intervened` `[A]` bool the shield's flags
    (None for unshielded policies); `interventions` the shield's running count (None to leave
    it out of the text); `colours` `[A, 3]` uint8 the boxes' colours (default
    `agent_colours(A)`); `widest` the status items to lay the strip out for (`StripLayout`).
    Returns a new `[H + strip, W, 3]` uint8 array.
    """
    image = np.asarray(frame)
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"frame must be [H, W, 3|4], got shape {image.shape}")
    image = image[..., :3].astype(np.uint8, copy=True)
    costs = np.asarray(costs, dtype=np.float64)
    n_agents = costs.shape[0]
    if costs.ndim != 1 or n_agents < 1:
        raise ValueError(f"costs must be [A] with A >= 1, got shape {costs.shape}")
    flags = np.zeros(n_agents, dtype=bool) if intervened is None else np.asarray(intervened, bool)
    if flags.shape != (n_agents,):
        raise ValueError(f"intervened must be [A] = [{n_agents}], got shape {flags.shape}")
    palette = agent_colours(n_agents) if colours is None else np.asarray(colours, np.uint8)
    width = image.shape[1]
    items = status_text(step=step, violations=violations, interventions=interventions)
    layout = StripLayout(width=width, n_agents=n_agents, items=items, widest=widest)

    violated = costs > 0
    if violated.any():
        edge = layout.ring
        image[:edge] = VIOLATION_COLOUR
        image[-edge:] = VIOLATION_COLOUR
        image[:, :edge] = VIOLATION_COLOUR
        image[:, -edge:] = VIOLATION_COLOUR

    strip = np.empty((layout.height, width, 3), dtype=np.uint8)
    strip[:] = STRIP_COLOUR
    ring, box = layout.ring, layout.box
    for agent in range(n_agents):
        left = layout.box_left(agent)
        top = layout.boxes_top + ring
        if violated[agent]:
            strip[top - ring : top + box + ring, left - ring : left + box + ring] = VIOLATION_COLOUR
        strip[top : top + box, left : left + box] = palette[agent]
        if flags[agent]:
            strip[layout.bar_top : layout.bar_top + layout.bar, left - ring : left + box + ring] = (
                INTERVENTION_COLOUR
            )
    for index, line in enumerate(layout.lines):
        top = layout.text_top + index * (GLYPH_HEIGHT + 2) * layout.scale
        draw_text(strip, line, top=top, left=layout.pad, scale=layout.scale, colour=TEXT_COLOUR)
    return np.concatenate([image, strip], axis=0)


class SafetyOverlay(BaseParallelWrapper):
    """A ParallelEnv whose `render` returns the env's frame marked by `annotate_frame`.

    It counts the steps and violations of the current episode from `infos[agent]["cost"]`.
    With `shielded`, call `set_interventions(flags)` with the shield's per-agent flags
    (`Actor.last_intervened[0]`) before each `step`; the frame of that step marks them.

    Example:
        >>> from src.envs.registry import make_env
        >>> env = SafetyOverlay(make_env("hazard_grid", render_mode="rgb_array"), shielded=False)
        >>> obs, infos = env.reset(seed=0)
        >>> frame = env.render()  # the grid over its status strip
    """

    def __init__(self, env: ParallelEnv, *, shielded: bool) -> None:
        super().__init__(env)
        self.shielded = bool(shielded)
        self.n_agents = len(env.possible_agents)
        self.colours = agent_colours(self.n_agents)
        # The largest counts an episode can reach, so that every frame has the same strip.
        cap = infer_episode_cap(env) or LIMITS["final_policy_eval_horizon"]
        self.widest = status_text(
            step=cap, violations=cap, interventions=cap * self.n_agents if self.shielded else None
        )
        self._clear()

    def _clear(self) -> None:
        self.episode_step = 0
        self.violations = 0
        self.interventions = 0
        self.costs = np.zeros(self.n_agents, dtype=np.float64)
        self.intervened = np.zeros(self.n_agents, dtype=bool)
        self._pending: np.ndarray | None = None

    def set_interventions(self, flags: np.ndarray) -> None:
        """The shield's per-agent flags `[A]` for the next step (in `possible_agents` order)."""
        values = np.asarray(flags, dtype=bool)
        if values.shape != (self.n_agents,):
            raise ValueError(f"flags must be [A] = [{self.n_agents}], got shape {values.shape}")
        self._pending = values

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict, dict]:
        """Reset the env and the counts."""
        result = self.env.reset(seed=seed, options=options)
        self._clear()
        return result

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        """Step the env and record each agent's cost and the shield's flags of this step."""
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        self.episode_step += 1
        self.costs = np.array(
            [float(infos.get(agent, {}).get("cost", 0.0)) for agent in self.possible_agents]
        )
        self.violations += int(bool((self.costs > 0).any()))
        pending = self._pending
        self.intervened = np.zeros(self.n_agents, bool) if pending is None else pending
        self.interventions += int(self.intervened.sum())
        self._pending = None
        return obs, rewards, terminations, truncations, infos

    def render(self) -> Any:
        """The env's frame with the safety marks of the last step (other outputs unchanged)."""
        frame = self.env.render()
        if not isinstance(frame, np.ndarray):
            return frame
        return annotate_frame(
            frame,
            step=self.episode_step,
            violations=self.violations,
            costs=self.costs,
            intervened=self.intervened if self.shielded else None,
            interventions=self.interventions if self.shielded else None,
            colours=self.colours,
            widest=self.widest,
        )
