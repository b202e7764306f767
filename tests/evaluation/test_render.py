"""Poster frames: bounded, evenly spaced selection and the PNG grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
