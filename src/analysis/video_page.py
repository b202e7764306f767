"""An HTML page that plays the videos of every run, for the Snakemake report.

The report registers the page's folder with `report(directory(...), htmlindex="index.html")`;
the folder is self-contained (videos and posters are copied in), so it plays the same from the
report zip as from the results tree. The page says what the safety marks on the frames mean
(`src.evaluation.overlay.MARKS_LEGEND`).

Only regular files are copied: a video folder that is a symlink, or a video or poster that is
a symlink, FIFO or device (a link to `/dev/zero` would be copied until the disk is full), is
refused with a `ContainmentError` naming it before anything is copied (`src.containment`).
Videos are bounded before any is copied (`run_videos`, shared with the wandb upload): at most
`max_videos` per run (the config's `render.episodes`, one video per episode) and each at most
`src.containment.archive_limit()` bytes (half the job's `mem_mb`), so a folder of 2,000 files
or a sparse 4 GB "video" is refused in one line naming it.
"""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from src.containment import (
    ContainmentError,
    archive_limit,
    copy_file,
    inside,
    regular_file,
    remove_tree,
    replace,
)
from src.evaluation.overlay import MARKS_LEGEND

__all__ = ["MAX_VIDEOS", "run_videos", "write_video_page"]

POSTER_NAME = "poster.png"
MAX_VIDEOS = 100
"""The most videos of one run that the page shows or wandb uploads, unless the caller says
fewer: the largest `render.episodes` the config accepts (the workflow passes its own)."""

_MB = 1024.0**2


def run_videos(
    root: str | Path, folder: str | Path, *, max_videos: int = MAX_VIDEOS, limit: int | None = None
) -> list[Path]:
    """The `*.mp4` files (not hidden) of the video folder `inside(root, folder)`, by name, after
    checking all of them: at most `max_videos`, each a regular file (no link, FIFO or device)
    of at most `limit` bytes (default `archive_limit()`, half the job's `mem_mb`). Raises
    `ContainmentError` in one line naming the folder or the file and the limit, before any
    video is read; `FileNotFoundError` if the folder does not exist.
    """
    path = inside(root, folder)
    size_limit, why = archive_limit() if limit is None else (limit, "the caller's limit")
    names = []
    with os.scandir(path) as entries:
        for entry in entries:
            # Hidden names are the temp files of a writer (src.core.io), never shown.
            if entry.name.endswith(".mp4") and not entry.name.startswith("."):
                names.append(entry.name)
                if len(names) > max_videos:
                    raise ContainmentError(
                        f"{path} holds more than {max_videos} .mp4 files, the most a run "
                        "renders (render.episodes): none of them is copied or uploaded",
                        path=path,
                    )
    videos = []
    for name in sorted(names):
        video = regular_file(path, name)
        size = os.lstat(video).st_size
        if size > size_limit:
            raise ContainmentError(
                f"{video} holds {size / _MB:.1f} MB, above the limit of {size_limit / _MB:.1f} "
                f"MB for a video ({why}): none of the videos is copied or uploaded",
                path=video,
            )
        videos.append(video)
    return videos


def _slug(label: str) -> str:
    """A folder name from a label: letters, digits, '_' and '.', other runs become one '-'."""
    kept = "".join(ch if ch.isalnum() or ch in "_." else "-" for ch in label)
    return "-".join(part for part in kept.split("-") if part)


def _section(label: str, folder: str, videos: list[str], poster: str | None) -> str:
    poster_attr = f' poster="{html.escape(folder)}/{html.escape(poster)}"' if poster else ""
    players = "\n".join(
        f'    <figure><video controls preload="metadata"{poster_attr} width="360">'
        f'<source src="{html.escape(folder)}/{html.escape(name)}" type="video/mp4">'
        f"</video><figcaption>{html.escape(name)}</figcaption></figure>"
        for name in videos
    )
    return f"  <section>\n    <h2>{html.escape(label)}</h2>\n{players}\n  </section>"


def write_video_page(
    video_dirs: Sequence[str | Path],
    labels: Sequence[str],
    out_dir: str | Path,
    *,
    title: str,
    max_videos: int = MAX_VIDEOS,
) -> Path:
    """Copy each run's `*.mp4` and `poster.png` into `out_dir` and write `out_dir/index.html`.

    `video_dirs[i]` is the render output of one run and `labels[i]` its heading. Every folder
    must exist and hold at least one mp4 and at most `max_videos`, each no larger than
    `archive_limit()` (`run_videos`). The page is built in a temporary sibling folder and
    moved into place at the end, so a killed job leaves no half page. Returns the index path.
    """
    if isinstance(video_dirs, (str, Path)) or isinstance(labels, str):
        raise TypeError("video_dirs and labels must be sequences, one entry per run")
    if len(video_dirs) != len(labels):
        raise ValueError(
            f"got {len(video_dirs)} video folders but {len(labels)} labels; one label per run"
        )
    if not video_dirs:
        raise ValueError("video_dirs is empty: there are no videos to show")
    limit = archive_limit()[0]
    runs = []
    for folder, label in zip(video_dirs, labels, strict=True):
        path = Path(folder)
        inside(path.parent, path.name)  # the folder itself is no symlink to elsewhere
        if not path.is_dir():
            raise FileNotFoundError(f"video folder {path} does not exist")
        # Every file is checked before the first copy; copy_file checks again as it opens.
        videos = [video.name for video in run_videos(path.parent, path.name, max_videos=max_videos)]
        if not videos:
            raise ValueError(f"video folder {path} holds no .mp4 file")
        poster = POSTER_NAME if os.path.lexists(path / POSTER_NAME) else None
        if poster:
            regular_file(path, poster)
        runs.append((path, str(label), videos, poster))

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        sections = []
        used: set[str] = set()
        for index, (path, label, videos, poster) in enumerate(runs):
            folder = _slug(label) or f"run{index}"
            if folder in used:
                folder = f"{folder}-{index}"
            used.add(folder)
            (staging / folder).mkdir()
            for name in [*videos, *([poster] if poster else [])]:
                copy_file(path, name, staging / folder / name, limit=limit)
            sections.append(_section(label, folder, videos, poster))
        page = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n'
            f"  <title>{html.escape(title)}</title>\n"
            "  <style>body{font-family:sans-serif;margin:1em}figure{display:inline-block;"
            "margin:0 1em 1em 0}section{margin-bottom:2em}</style>\n</head>\n<body>\n"
            f"  <h1>{html.escape(title)}</h1>\n"
            f'  <p class="legend">{html.escape(MARKS_LEGEND)}</p>\n'
            + "\n".join(sections)
            + "\n</body>\n</html>\n"
        )
        (staging / "index.html").write_text(page, encoding="utf-8")
        # Through descriptors of the folders: a page folder that is (or is swapped for) a link
        # is refused, not followed.
        remove_tree(out.parent, out.name)
        replace(out.parent, staging.name, out.name)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_tree(out.parent, staging.name)
        raise
    return out / "index.html"
