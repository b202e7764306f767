"""Poster frames (bounded, evenly spaced selection, the PNG grid) and the safety marks."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import imageio_ffmpeg
import numpy as np
import pytest
from pettingzoo import ParallelEnv

from src.core.wrappers.record_video_parallel import RecordVideo
from src.evaluation.overlay import (
    INTERVENTION_COLOUR,
    STRIP_COLOUR,
    TEXT_COLOUR,
    VIOLATION_COLOUR,
    SafetyOverlay,
    StripLayout,
    annotate_frame,
    draw_text,
    text_width,
)
from src.evaluation.render import EvenFrames, make_poster


def frame(value: int) -> np.ndarray:
    return np.full((6, 8, 3), value % 256, dtype=np.uint8)


@pytest.mark.parametrize("length", [0, 1, 5, 8, 9, 37, 200, 1000])
def test_even_frames_are_bounded_spread_and_keep_first_and_last(length: int) -> None:
    keeper = EvenFrames(8)
    kept_max = 0
    for step in range(length + 1):
        if keeper.wants(step) or step == length:
            keeper.add(step, frame(step))
        kept_max = max(kept_max, len(keeper.frames))
    assert kept_max <= 2 * 8 + 1  # memory stays bounded whatever the episode length
    chosen = [step for step, _ in keeper.select()]
    assert chosen[0] == 0 and chosen[-1] == length
    assert chosen == sorted(set(chosen))
    assert len(chosen) == min(8, length + 1)
    if length >= 100:
        gaps = np.diff(chosen)
        assert gaps.max() <= 3 * length / 7  # roughly even, no large hole


def test_make_poster_writes_a_png(tmp_path: Path) -> None:
    path = make_poster([(s, frame(40 * s)) for s in range(5)], tmp_path / "poster.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_make_poster_rejects_bad_frames(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        make_poster([], tmp_path / "p.png", title="t")
    with pytest.raises(ValueError, match="at most 8"):
        make_poster([(s, frame(s)) for s in range(9)], tmp_path / "p.png", title="t")
    with pytest.raises(ValueError, match=r"\[H, W, 3\|4\]"):
        make_poster([(0, np.zeros((4, 4)))], tmp_path / "p.png", title="t")
    assert not (tmp_path / "p.png").exists()
    with pytest.raises(ValueError, match="keep"):
        EvenFrames(0)


# ---------------------------------------------------------------- safety marks on frames

COLOURS = np.array([[0, 114, 178], [230, 159, 0], [0, 158, 115]], dtype=np.uint8)
GREY = np.array([200, 200, 200], dtype=np.uint8)


def grey_frame(height: int = 60, width: int = 120) -> np.ndarray:
    return np.broadcast_to(GREY, (height, width, 3)).copy()


def expected_text(layout: StripLayout, width: int) -> np.ndarray:
    """The strip's text rows as `annotate_frame` should draw them for `layout.lines`."""
    strip = np.broadcast_to(STRIP_COLOUR, (layout.height, width, 3)).copy()
    for index, line in enumerate(layout.lines):
        top = layout.text_top + index * 9 * layout.scale
        draw_text(strip, line, top=top, left=layout.pad, scale=layout.scale, colour=TEXT_COLOUR)
    return strip[layout.text_top :]


def test_annotated_frame_marks_the_costly_agent_the_shielded_agent_and_the_counts() -> None:
    frame = grey_frame()
    out = annotate_frame(
        frame,
        step=12,
        violations=3,
        costs=np.array([0.0, 1.0, 0.0]),
        intervened=np.array([True, False, False]),
        interventions=5,
        colours=COLOURS,
    )
    layout = StripLayout(width=120, n_agents=3, items=["STEP 12", "VIOLATIONS 3", "SHIELD 5"])
    assert out.shape == (60 + layout.height, 120, 3) and out.dtype == np.uint8
    assert layout.height % 2 == 0
    image, strip = out[:60], out[60:]
    # A violation at this step: a red border around the env's frame, its inside untouched.
    ring = layout.ring
    for edge in (image[:ring], image[-ring:], image[:, :ring], image[:, -ring:]):
        assert (edge == VIOLATION_COLOUR).all()
    assert (image[ring:-ring, ring:-ring] == GREY).all()
    top, box = layout.boxes_top + ring, layout.box
    for agent in range(3):
        left = layout.box_left(agent)
        # Each agent's box in its colour.
        assert (strip[top : top + box, left : left + box] == COLOURS[agent]).all()
        # A red ring only around the agent that incurred the cost (agent 1).
        ring_pixels = strip[top - ring : top, left - ring : left + box + ring]
        expected = VIOLATION_COLOUR if agent == 1 else STRIP_COLOUR
        assert (ring_pixels == expected).all(), agent
        # A yellow bar only under the agent whose action the shield changed (agent 0).
        bar = strip[layout.bar_top : layout.bar_top + layout.bar, left : left + box]
        expected = INTERVENTION_COLOUR if agent == 0 else STRIP_COLOUR
        assert (bar == expected).all(), agent
    # The text says step 12, 3 violations and 5 interventions, pixel for pixel.
    np.testing.assert_array_equal(strip[layout.text_top :], expected_text(layout, 120))
    other = StripLayout(width=120, n_agents=3, items=["STEP 13", "VIOLATIONS 3", "SHIELD 5"])
    assert not np.array_equal(strip[layout.text_top :], expected_text(other, 120))


def test_a_safe_step_leaves_the_frame_as_rendered() -> None:
    frame = grey_frame()
    out = annotate_frame(
        frame, step=0, violations=0, costs=np.zeros(3), intervened=None, colours=COLOURS
    )
    np.testing.assert_array_equal(out[:60], frame)
    layout = StripLayout(width=120, n_agents=3, items=["STEP 0", "VIOLATIONS 0"])
    strip = out[60:]
    assert not (strip == VIOLATION_COLOUR).all(axis=-1).any()
    assert not (strip == INTERVENTION_COLOUR).all(axis=-1).any()
    np.testing.assert_array_equal(strip[layout.text_top :], expected_text(layout, 120))


def test_draw_text_hand_checked_glyph() -> None:
    image = np.zeros((16, 14, 3), dtype=np.uint8)
    draw_text(image, "1", top=1, left=2, scale=2, colour=np.array([9, 9, 9], np.uint8))
    ink = image[..., 0] == 9
    # "1" is a 5 x 7 glyph: its foot is the row " ### ", doubled at scale 2.
    assert ink[13:15, 4:10].all() and not ink[13:15, 2:4].any()
    assert ink.sum() == 4 * (1 + 2 + 1 + 1 + 1 + 1 + 3)  # glyph pixels x scale^2
    assert text_width("STEP 1", 2) == (6 * 6 - 1) * 2
    with pytest.raises(ValueError, match="no glyph"):
        draw_text(image, "step", top=0, left=0, scale=1, colour=TEXT_COLOUR)


def test_long_text_wraps_and_small_frames_keep_one_scale() -> None:
    items = ["STEP 100", "VIOLATIONS 100", "SHIELD 1000"]
    narrow = StripLayout(width=64, n_agents=2, items=items)
    assert narrow.scale == 1 and narrow.lines == items  # one item per line
    wide = StripLayout(width=700, n_agents=3, items=items)
    assert wide.scale > 1
    assert all(text_width(line, wide.scale) <= 700 for line in wide.lines)


class ScriptedEnv(ParallelEnv):
    """Two agents; the costs of each step come from a script; frames are plain grey."""

    def __init__(self, costs: list[tuple[float, float]]) -> None:
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": 4, "name": "scripted"}
        self.script = costs
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.render_mode = "rgb_array"
        self.t = 0

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents, self.t = list(self.possible_agents), 0
        return dict.fromkeys(self.agents, np.zeros(1)), {a: {} for a in self.agents}

    def step(self, actions: dict):
        cost = self.script[self.t]
        self.t += 1
        done = self.t == len(self.script)
        infos = {a: {"cost": c} for a, c in zip(self.possible_agents, cost, strict=True)}
        obs = dict.fromkeys(self.agents, np.zeros(1))
        ends = dict.fromkeys(self.agents, done)
        rewards = dict.fromkeys(self.agents, 0.0)
        if done:
            self.agents = []
        return obs, rewards, ends, dict.fromkeys(ends, False), infos

    def render(self) -> np.ndarray:
        return grey_frame(64, 96)

    def observation_space(self, agent: str):
        return gymnasium.spaces.Box(-1, 1, (1,))

    def action_space(self, agent: str):
        return gymnasium.spaces.Discrete(2)


def test_overlay_counts_violations_and_marks_the_step_it_rendered() -> None:
    env = SafetyOverlay(ScriptedEnv([(0, 0), (1, 0), (0, 0), (1, 1)]), shielded=True)
    env.reset(seed=0)
    assert env.render().shape[0] > 64  # frames carry the strip from the first one
    seen = []
    for flags in ([False, False], [False, True], [True, True], [False, False]):
        env.set_interventions(np.array(flags))
        env.step({"a": 0, "b": 0})
        seen.append((env.episode_step, env.violations, env.interventions))
        frame = env.render()
        border = (frame[0, :, :] == VIOLATION_COLOUR).all()
        assert border == bool(env.costs.any())
    assert seen == [(1, 0, 0), (2, 1, 1), (3, 1, 3), (4, 2, 3)]
    env.reset(seed=1)
    assert (env.episode_step, env.violations, env.interventions) == (0, 0, 0)
    with pytest.raises(ValueError, match="flags must be"):
        env.set_interventions(np.array([True]))


def test_recorded_video_carries_the_marks(tmp_path: Path) -> None:
    # Violations at steps 2 and 4 of 5: the written mp4's frames 2 and 4 have a red border.
    script = [(0, 0), (1, 0), (0, 0), (0, 1), (0, 0)]
    env = RecordVideo(
        SafetyOverlay(ScriptedEnv(script), shielded=False),
        str(tmp_path / "videos"),
        episode_trigger=lambda _: True,
        name_prefix="marks",
    )
    env.reset(seed=0)
    while env.agents:
        env.step({"a": 0, "b": 0})
    env.close()
    reader = imageio_ffmpeg.read_frames(str(tmp_path / "videos" / "marks-episode-0.mp4"))
    width, height = next(reader)["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]
    red = [
        bool((np.abs(f[1, 8:-8].astype(int) - VIOLATION_COLOUR).max(axis=-1) < 60).mean() > 0.9)
        for f in frames
    ]
    # Frame 0 is the reset, frame t the step t.
    assert len(frames) >= 5
    assert red[:5] == [False, False, True, False, True]
