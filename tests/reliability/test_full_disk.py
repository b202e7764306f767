"""A full disk: writes fail with an error naming the file and ENOSPC; the previous file survives.

Each test mounts a 1 MiB tmpfs (`small_disk`), writes a small file, fills the disk, then tries
to overwrite the file with something larger. The failed write must raise
`src.core.io.FileAccessError` (an `OSError`) whose errno is ENOSPC and whose message names the
file, leave the previous file byte for byte (and loadable), and leave no temporary file behind.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium.spaces import Box, Discrete
from pettingzoo.utils.env import ParallelEnv

from src.core.io import FileAccessError, load_from_file, save_to_file
from src.core.wrappers.record_video_parallel import RecordVideo
from tests.reliability.helpers import fill_disk, folder_state

# Larger than the whole 1 MiB disk, so the write cannot succeed even before filling it.
BIG = 300_000


def _small_and_big(suffix: str) -> tuple[Any, Any]:
    """A small object to write first and a large one (more than 1 MiB) to write over it."""
    rng = np.random.default_rng(0)
    if suffix == ".json":
        return {"step": 1}, {"values": rng.random(BIG).tolist()}
    if suffix == ".parquet":
        return pd.DataFrame({"x": [1.0, 2.0]}), pd.DataFrame({"x": rng.random(BIG)})
    if suffix == ".npz":
        return {"x": np.arange(3.0)}, {"x": rng.random(BIG)}
    if suffix == ".pt":
        return {"w": torch.zeros(3)}, {"w": torch.from_numpy(rng.random(BIG))}
    raise AssertionError(suffix)


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or "tmp" in p.name)


@pytest.mark.parametrize("suffix", [".json", ".parquet", ".npz", ".pt"])
def test_save_to_file_on_a_full_disk_keeps_the_previous_file(small_disk: Path, suffix: str):
    small, big = _small_and_big(suffix)
    name = f"state{suffix}"
    target = save_to_file(small, small_disk, name)
    previous = target.read_bytes()
    filler = fill_disk(small_disk)

    with pytest.raises(FileAccessError) as excinfo:
        save_to_file(big, small_disk, name)

    error = excinfo.value
    assert isinstance(error, OSError)
    assert error.errno == errno.ENOSPC
    assert error.path == target and error.format == suffix
    message = str(error)
    assert str(target) in message and "No space left on device" in message
    assert "\n" not in message
    assert target.read_bytes() == previous
    assert _temps(small_disk) == []

    # Once space is free again the same call succeeds: the failure left nothing in the way.
    filler.unlink()
    save_to_file(small, small_disk, name)
    assert load_from_file(small_disk, name) is not None


def test_save_to_file_into_a_new_subfolder_of_a_full_disk(small_disk: Path):
    fill_disk(small_disk)
    with pytest.raises(FileAccessError) as excinfo:
        save_to_file({"x": np.arange(BIG)}, small_disk, "run0/new.npz")
    assert excinfo.value.errno == errno.ENOSPC
    assert str(small_disk / "run0" / "new.npz") in str(excinfo.value)
    assert not (small_disk / "run0" / "new.npz").exists()


# ------------------------------------------------------------------------------ video

FRAME = 64


class NoiseEnv(ParallelEnv):
    """Two agents, episodes of `max_steps` steps, frames of seeded noise (hard to compress)."""

    metadata: ClassVar[dict] = {"name": "noise_v0", "render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, max_steps: int) -> None:
        self.render_mode = "rgb_array"
        self.max_steps = max_steps
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self._t = 0
        self._rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> Box:
        return Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    def action_space(self, agent: str) -> Discrete:
        return Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        self._t = 0
        self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        obs = {agent: np.zeros(1, dtype=np.float32) for agent in self.agents}
        return obs, {agent: {} for agent in self.agents}

    def step(self, actions: dict) -> tuple:
        self._t += 1
        agents = list(self.agents)
        done = self._t >= self.max_steps
        if done:
            self.agents = []
        obs = {agent: np.zeros(1, dtype=np.float32) for agent in agents}
        return (
            obs,
            dict.fromkeys(agents, 0.0),
            dict.fromkeys(agents, False),
            dict.fromkeys(agents, done),
            {agent: {} for agent in agents},
        )

    def render(self) -> np.ndarray:
        return self._rng.integers(0, 256, size=(FRAME, FRAME, 3), dtype=np.uint8)


def _record_episode(folder: Path, steps: int) -> RecordVideo:
    """Record episode 0 of a NoiseEnv into `folder`; returns the still open wrapper."""
    env = RecordVideo(NoiseEnv(steps), str(folder), episode_trigger=lambda e: True, name_prefix="v")
    env.reset(seed=steps)
    while env.agents:
        env.step(dict.fromkeys(env.agents, 0))
    return env


def _frame_count(path: Path) -> int:
    from moviepy.video.io.ffmpeg_reader import ffmpeg_parse_infos

    return int(ffmpeg_parse_infos(str(path))["video_n_frames"])


@pytest.mark.filterwarnings("ignore:.*(Overwriting existing videos|Unable to save last video)")
def test_record_video_on_a_full_disk_keeps_the_previous_video(small_disk: Path):
    folder = small_disk / "videos"
    first = _record_episode(folder, steps=3)
    first.close()
    video = folder / "v-episode-0.mp4"
    previous = video.read_bytes()
    assert _frame_count(video) == 4
    filler = fill_disk(small_disk)

    env = _record_episode(folder, steps=60)
    with pytest.raises(FileAccessError) as excinfo:
        env.close()

    error = excinfo.value
    assert isinstance(error, OSError)
    assert error.errno == errno.ENOSPC
    assert error.path == video and error.format == ".mp4"
    message = str(error)
    assert str(video) in message and "No space left on device" in message
    # One line, without MoviePy's advice about codecs, which has nothing to do with a full disk.
    assert "\n" not in message and "codec" not in message
    assert folder_state(folder) == {"v-episode-0.mp4": previous}
    assert _frame_count(video) == 4

    # The frames are kept: with space again, closing once more writes the new video.
    filler.unlink()
    env.close()
    assert _frame_count(video) == 61
    assert sorted(p.name for p in folder.iterdir()) == ["v-episode-0.mp4"]


def test_stale_video_temp_of_a_dead_writer_is_removed(tmp_path: Path):
    # A render job killed while ffmpeg wrote leaves its hidden temp; the next write clears it.
    import subprocess

    from src.core.io import _HOST

    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = tmp_path / "videos"
    folder.mkdir()
    stale = folder / f".v-episode-0.mp4.{_HOST}.{dead.pid}.0a1b2c3d.tmp.mp4"
    stale.write_bytes(b"half a video")
    other_host = folder / f".v-episode-0.mp4.elsewhere.{dead.pid}.0a1b2c3d.tmp.mp4"
    other_host.write_bytes(b"another node's temp")

    with pytest.warns(UserWarning, match="Overwriting existing videos"):
        env = _record_episode(folder, steps=2)
    env.close()

    assert not stale.exists()
    assert other_host.exists()  # a pid says nothing about processes on other hosts
    assert _frame_count(folder / "v-episode-0.mp4") == 3
