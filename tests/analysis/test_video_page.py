"""write_video_page: a self-contained page of <video> players, one section per run."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.analysis.video_page import write_video_page


def _run_videos(root: Path, name: str, episodes: int, poster: bool = True) -> Path:
    folder = root / name / "videos"
    folder.mkdir(parents=True)
    for episode in range(episodes):
        (folder / f"{name}-episode-{episode}.mp4").write_bytes(b"mp4 bytes " + bytes([episode]))
    if poster:
        (folder / "poster.png").write_bytes(b"png")
    return folder


def test_page_plays_every_video_from_its_own_folder(tmp_path: Path):
    first = _run_videos(tmp_path, "a", 2)
    second = _run_videos(tmp_path, "b", 1, poster=False)
    out = tmp_path / "page"

    index = write_video_page(
        [first, second], ["grid ippo run0", "grid shield run0"], out, title="T"
    )

    page = index.read_text()
    assert index == out / "index.html"
    assert page.count("<video") == 3
    assert '<source src="grid-ippo-run0/a-episode-1.mp4" type="video/mp4">' in page
    assert 'poster="grid-ippo-run0/poster.png"' in page
    assert "grid-shield-run0/b-episode-0.mp4" in page and "grid-shield-run0/poster.png" not in page
    # Self-contained: the copies are byte-identical to the originals.
    assert (out / "grid-ippo-run0" / "a-episode-1.mp4").read_bytes() == (
        first / "a-episode-1.mp4"
    ).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "page"]  # no staging left
    # The page says what the safety marks on the frames mean.
    assert "a red ring marks an agent that incurred a cost" in page


def test_rewriting_replaces_the_old_page(tmp_path: Path):
    out = tmp_path / "page"
    write_video_page([_run_videos(tmp_path, "a", 2)], ["old"], out, title="T")
    write_video_page([_run_videos(tmp_path, "b", 1)], ["new"], out, title="T")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "new"]


def test_labels_are_escaped(tmp_path: Path):
    index = write_video_page(
        [_run_videos(tmp_path, "a", 1)], ["<b>x</b>"], tmp_path / "page", title="a & b"
    )
    page = index.read_text()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<title>a &amp; b</title>" in page


def test_bad_inputs_are_named(tmp_path: Path):
    videos = _run_videos(tmp_path, "a", 1)
    with pytest.raises(ValueError, match="1 video folders but 2 labels"):
        write_video_page([videos], ["x", "y"], tmp_path / "p", title="T")
    with pytest.raises(ValueError, match="no videos"):
        write_video_page([], [], tmp_path / "p", title="T")
    with pytest.raises(FileNotFoundError, match="missing"):
        write_video_page([tmp_path / "missing"], ["x"], tmp_path / "p", title="T")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"holds no \.mp4"):
        write_video_page([empty], ["x"], tmp_path / "p", title="T")
    with pytest.raises(TypeError, match="sequences"):
        write_video_page(videos, ["x"], tmp_path / "p", title="T")
    assert not (tmp_path / "p").exists()
