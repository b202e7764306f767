"""Gymnasium's RecordVideo for a PettingZoo ParallelEnv.

Built on PettingZoo 1.27's `RecordVideoParallel`, which has the right behaviour (triggers,
file names, `video_length`, fps, `gc_trigger`, warnings), with what it gets wrong fixed:

- an incompatible render mode raises a `ValueError` with one message (PettingZoo passes two
  arguments, so the error prints as a tuple);
- `__del__` works on an object whose `__init__` never ran or stopped early (PettingZoo's reads
  `recorded_frames` through `BaseParallelWrapper.__getattr__`, which recurses forever when
  `env` was never set);
- videos are written to a temporary file in the video folder and moved into place with
  `os.replace`, so a killed job never leaves a truncated mp4 under the final name (temporary
  files of writers on this host that no longer run are removed at the next write);
- a write that the operating system refuses (full disk, quota, permissions) raises
  `src.core.io.FileAccessError` naming the video and the cause, with its `errno` (MoviePy
  reports a full disk as a broken pipe followed by advice about codecs);
- constructor arguments are checked up front, before anything is created on disk.
"""

from __future__ import annotations

import errno
import gc
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium.error import DependencyNotInstalled
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers.record_video_parallel import RecordVideoParallel

from src.core.io import FileAccessError, atomic_output

__all__ = ["DEFAULT_FPS", "INCOMPATIBLE_RENDER_MODES", "RecordVideo"]

DEFAULT_FPS = 30
"""Frames per second when neither `fps` nor `metadata["render_fps"]` is given."""

INCOMPATIBLE_RENDER_MODES = frozenset({None, "human", "ansi"})
"""Render modes that return no image per render call."""

_MOVIEPY_MISSING = 'MoviePy is not installed, run `pip install moviepy` (or "gymnasium[other]")'


def _require_moviepy() -> None:
    """Raise DependencyNotInstalled unless MoviePy can be imported."""
    try:
        import moviepy  # noqa: F401
    except ImportError as e:
        raise DependencyNotInstalled(_MOVIEPY_MISSING) from e


def _check_trigger(value: object, name: str) -> None:
    """Raise TypeError unless `value` is None or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a callable taking an int, or None, got {value!r}")


def _resolve_fps(env: ParallelEnv, fps: int | None) -> int:
    """Return the video fps: `fps`, else `env.metadata["render_fps"]`, else DEFAULT_FPS."""
    if fps is not None:
        if isinstance(fps, bool) or not isinstance(fps, numbers.Integral) or fps < 1:
            raise ValueError(f"fps must be a positive int or None, got {fps!r}")
        return int(fps)
    metadata = getattr(env, "metadata", None) or {}
    render_fps = metadata.get("render_fps")
    if render_fps is None:
        return DEFAULT_FPS
    # PettingZoo truncates a fractional render_fps to an int; a value below 1 would then be 0.
    if isinstance(render_fps, bool) or not isinstance(render_fps, numbers.Real) or render_fps < 1:
        raise ValueError(
            f'env.metadata["render_fps"] must be a number >= 1 or absent, got {render_fps!r}'
        )
    return int(render_fps)


# Causes that ffmpeg reports only as text (MoviePy raises EPIPE once ffmpeg has exited).
_OS_CAUSES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO)


def _describe_write_error(error: OSError) -> tuple[int | None, str]:
    """Return (errno, one-line cause) of a failed video write."""
    text = str(error)
    for code in (error.errno, *_OS_CAUSES):
        if code is not None and code != errno.EPIPE and os.strerror(code) in text:
            return code, f"{os.strerror(code)} [{errno.errorcode.get(code, code)}]"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = lines[0] if lines else type(error).__name__
    marker = "FFMPEG encountered the following error"
    for index, line in enumerate(lines[:-1]):
        if marker in line:
            cause = f"{cause}; ffmpeg: {lines[index + 1]}"
            break
    return error.errno, cause


class RecordVideo(RecordVideoParallel):
    """Record videos of a ParallelEnv's episodes with Gymnasium's RecordVideo semantics.

    A recording starts when `episode_trigger(episode_id)` is true at a reset or
    `step_trigger(step_id)` is true at a step (`step_id` counts steps over all episodes, from 0).
    With `video_length=0` a recording ends at the next reset; otherwise it ends after
    `video_length + 1` frames and may span episodes. Files are
    `{video_folder}/{name_prefix}-episode-{i}.mp4` and `{name_prefix}-step-{i}.mp4`; each is
    written to a hidden temporary file in `video_folder` and renamed into place. Without
    triggers, episodes 0, 1, 8, 27, ..., 729, 1000, 2000, ... are recorded.

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> env = simple_spread_v3.parallel_env(render_mode="rgb_array", max_cycles=5)
        >>> env = RecordVideo(env, video_folder="videos", episode_trigger=lambda e: e == 0)
        >>> observations, infos = env.reset(seed=0)
        >>> while env.agents:
        ...     actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        ...     observations, rewards, terminations, truncations, infos = env.step(actions)
        >>> env.close()  # writes videos/rl-video-episode-0.mp4
    """

    def __init__(
        self,
        env: ParallelEnv,
        video_folder: str,
        episode_trigger: Callable[[int], bool] | None = None,
        step_trigger: Callable[[int], bool] | None = None,
        video_length: int = 0,
        name_prefix: str = "rl-video",
        fps: int | None = None,
        disable_logger: bool = True,
        gc_trigger: Callable[[int], bool] | None = lambda episode: True,
    ) -> None:
        """Wrap a ParallelEnv to record videos of chosen episodes or step intervals.

        Args:
            env: The parallel environment that will be trapped.
            video_folder: The folder where the recordings will be stored (created if missing;
                a path-like object is accepted too).
            episode_trigger: Function that accepts an integer and returns `True` to start
                recording an episode.
            step_trigger: Function that accepts an integer that should return `True` on the
                n-th environment step that the recording should be started, where n sums over
                all previous episodes.
            video_length: The length of recorded episodes. If 0, entire episodes are recorded.
                Otherwise, snippets of the specified length are captured.
            name_prefix: Will be prepended to the filename of the recordings.
            fps: The frame per second in the video. If `None`, the environment metadata
                `render_fps` key is used if it exists, otherwise a default value of 30 is used.
            disable_logger: Whether to disable the MoviePy logger.
            gc_trigger: Function that accepts an integer and returns `True` iff garbage
                collection should be performed after this episode.

        Raises:
            ValueError: If the render_mode is not suitable (an image must be returned per
                render step), or an argument has a bad value.
            TypeError: If `env` is not a ParallelEnv or an argument has the wrong type.
            DependencyNotInstalled: If `MoviePy` is not installed.
        """
        # Every check runs before PettingZoo's constructor, which creates the folder and would
        # raise its own two-argument ValueError.
        if not isinstance(env, ParallelEnv):
            raise TypeError(
                f"RecordVideo wraps a PettingZoo ParallelEnv, got {type(env).__name__}; "
                "convert an AECEnv with pettingzoo.utils.conversions.aec_to_parallel"
            )
        render_mode = getattr(env, "render_mode", None)
        if render_mode in INCOMPATIBLE_RENDER_MODES:
            raise ValueError(
                f"Render mode is {render_mode!r}, which is incompatible with RecordVideo. "
                "Initialize your environment with a render_mode that returns an image, "
                "such as rgb_array."
            )
        if not isinstance(video_folder, str | os.PathLike):
            raise TypeError(f"video_folder must be a str or path-like, got {video_folder!r}")
        if not os.fspath(video_folder):
            raise ValueError("video_folder must be a non-empty path, got ''")
        _check_trigger(episode_trigger, "episode_trigger")
        _check_trigger(step_trigger, "step_trigger")
        _check_trigger(gc_trigger, "gc_trigger")
        if isinstance(video_length, bool) or not isinstance(video_length, numbers.Integral):
            raise TypeError(f"video_length must be an int, got {video_length!r}")
        if video_length < 0:
            raise ValueError(
                f"video_length must be >= 0 (0 records whole episodes), got {video_length}"
            )
        if not isinstance(name_prefix, str):
            raise TypeError(f"name_prefix must be a str, got {name_prefix!r}")
        if any(sep and sep in name_prefix for sep in (os.sep, os.altsep, "\0")):
            raise ValueError(
                f"name_prefix is prepended to a file name and cannot hold a path separator, "
                f"got {name_prefix!r}"
            )
        if not isinstance(disable_logger, bool):
            raise TypeError(f"disable_logger must be a bool, got {disable_logger!r}")
        frames_per_sec = _resolve_fps(env, fps)
        _require_moviepy()

        super().__init__(
            env,
            os.fspath(video_folder),
            episode_trigger=episode_trigger,
            step_trigger=step_trigger,
            video_length=int(video_length),
            name_prefix=name_prefix,
            fps=frames_per_sec,
            disable_logger=disable_logger,
            gc_trigger=gc_trigger,
        )

    def _capture_frame(self) -> None:
        """Append the env's current frame to the recording (Gymnasium's version and warnings)."""
        if not self.recording:
            raise RuntimeError("Cannot capture a frame, recording wasn't started.")

        frame = self.env.render()
        if isinstance(frame, list):
            if len(frame) == 0:
                # PettingZoo drops this case silently; Gymnasium tells the user why a frame is
                # missing from the video.
                gymnasium.logger.warn(
                    "Trying to capture render frame but 'env.render()' has just been called. "
                    "The frame cannot be captured."
                )
                return
            self.render_history += frame
            frame = frame[-1]

        if isinstance(frame, np.ndarray):
            self.recorded_frames.append(frame)
        else:
            self.stop_recording()
            gymnasium.logger.warn(
                "Recording stopped: expected type of frame returned by render to be a numpy "
                f"array, got instead {type(frame)}."
            )

    def stop_recording(self) -> None:
        """Stop current recording and saves the video.

        Raises:
            RuntimeError: If no recording was started.
            DependencyNotInstalled: If `MoviePy` is not installed.
        """
        if not self.recording:
            raise RuntimeError("stop_recording was called, but no recording was started")

        if len(self.recorded_frames) == 0:
            gymnasium.logger.warn("Ignored saving a video as there were zero frames to save.")
        else:
            self._write_video(self.recorded_frames, f"{self._video_name}.mp4")

        self.recorded_frames = []
        self.recording = False
        self._video_name = None

        if self.gc_trigger and self.gc_trigger(self.episode_id):
            gc.collect()

    def _write_video(self, frames: list[np.ndarray], filename: str) -> None:
        """Encode `frames` into `video_folder/filename` atomically."""
        try:
            from moviepy.video.io.ImageSequenceClip import ImageSequenceClip
        except ImportError as e:
            raise DependencyNotInstalled(_MOVIEPY_MISSING) from e

        path = os.path.join(self.video_folder, filename)
        clip = ImageSequenceClip(frames, fps=self.frames_per_sec)
        try:
            # A hidden temp beside the target, ending in .mp4 (MoviePy picks the codec and
            # ffmpeg the container from the extension), renamed into place once complete.
            with atomic_output(path) as tmp_path:
                clip.write_videofile(str(tmp_path), logger=None if self.disable_logger else "bar")
        except FileAccessError as error:
            # ffmpeg reports a full disk as a broken pipe: name the real cause.
            if not isinstance(error.__cause__, OSError):
                raise
            code, cause = _describe_write_error(error.__cause__)
            failure = FileAccessError(
                f"cannot write video {path}: {cause}", path=Path(path), format=".mp4"
            )
            failure.errno = code
            raise failure from error.__cause__
        finally:
            clip.close()

    def __del__(self) -> None:
        """Warn the user in case last video wasn't saved."""
        # Read the instance dict: on an object whose __init__ never ran, attribute access falls
        # through to BaseParallelWrapper.__getattr__, which recurses without `env`.
        state: dict[str, Any] = vars(self)
        if state.get("recorded_frames"):
            gymnasium.logger.warn("Unable to save last video! Did you call close()?")
