"""Tests of `RecordVideo` for a ParallelEnv.

Every case of Gymnasium's own RecordVideo test suite (tests/wrappers/test_record_video.py) is
restated on a tiny ParallelEnv with fixed-length episodes, so the expected files and frame
counts are exact; then the faults fixed over PettingZoo's RecordVideoParallel, the atomic
write and the argument checks.
"""

import doctest
import gc
import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled
from gymnasium.spaces import Box, Discrete
from moviepy.video.io.ffmpeg_reader import ffmpeg_parse_infos
from moviepy.video.io.ImageSequenceClip import ImageSequenceClip
from moviepy.video.io.VideoFileClip import VideoFileClip
from mpe2 import simple_spread_v3
from pettingzoo import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper, RecordVideoParallel

import src.core.wrappers.record_video_parallel as record_video_module
from src.core.wrappers import infer_episode_cap
from src.core.wrappers.record_video_parallel import RecordVideo

FRAME_SIZE = 32
RENDER_FPS = 4


def frame_value(t: int) -> int:
    """Grey level of the frame rendered after `t` steps of an episode."""
    return (40 * t) % 256


class TinyParallelEnv(ParallelEnv):
    """Two agents, episodes of exactly `max_steps` steps, 32x32 frames coloured by step."""

    metadata: ClassVar[dict] = {
        "name": "tiny_v0",
        "render_modes": ["rgb_array"],
        "render_fps": RENDER_FPS,
    }

    def __init__(self, render_mode="rgb_array", max_steps=5):
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents = []
        self._t = 0

    def observation_space(self, agent):
        return Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    def action_space(self, agent):
        return Discrete(2)

    def _observations(self):
        return {
            agent: np.array([i / 2], dtype=np.float32)
            for i, agent in enumerate(self.possible_agents)
        }

    def reset(self, seed=None, options=None):
        self._t = 0
        self.agents = list(self.possible_agents)
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions):
        self._t += 1
        done = self._t >= self.max_steps
        agents = list(self.agents)
        if done:
            self.agents = []
        return (
            self._observations(),
            dict.fromkeys(agents, 0.0),
            dict.fromkeys(agents, False),
            dict.fromkeys(agents, done),
            {agent: {} for agent in agents},
        )

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return np.full((FRAME_SIZE, FRAME_SIZE, 3), frame_value(self._t), dtype=np.uint8)


class NoFpsEnv(TinyParallelEnv):
    metadata: ClassVar[dict] = {"name": "tiny_no_fps_v0", "render_modes": ["rgb_array"]}


class RenderCollectionParallel(BaseParallelWrapper):
    """Gymnasium's RenderCollection for a ParallelEnv: `render()` returns the frames so far."""

    def __init__(self, env):
        super().__init__(env)
        self.render_mode = "rgb_array_list"
        self.frames = []

    def reset(self, seed=None, options=None):
        out = self.env.reset(seed=seed, options=options)
        self.frames.append(self.env.render())
        return out

    def step(self, actions):
        out = self.env.step(actions)
        self.frames.append(self.env.render())
        return out

    def render(self):
        frames, self.frames = self.frames, []
        return frames


def run_steps(env, n_steps, seed=123):
    """Step `n_steps` times, resetting whenever the episode ends; return the number of resets."""
    env.reset(seed=seed)
    resets = 0
    for _ in range(n_steps):
        env.step(dict.fromkeys(env.agents, 0))
        if not env.agents:
            env.reset()
            resets += 1
    return resets


def mp4_files(folder):
    return {name for name in os.listdir(folder) if name.endswith(".mp4")}


def n_frames(path):
    return ffmpeg_parse_infos(str(path))["video_n_frames"]


@pytest.fixture
def video_folder(tmp_path):
    """A folder that does not exist yet (an existing one triggers the overwrite warning)."""
    return tmp_path / "videos"


# ------------------------------------------------------------- the seed API, restated exactly

SEED_CONSTRUCTOR = (
    "(env: ParallelEnv, video_folder: str, episode_trigger: Callable[[int], bool] | None = None, "
    "step_trigger: Callable[[int], bool] | None = None, video_length: int = 0, "
    "name_prefix: str = rl-video, fps: int | None = None, disable_logger: bool = True, "
    "gc_trigger: Callable[[int], bool] | None = <lambda>)"
)
SEED_METHODS = {
    "reset": ["self", "seed=None", "options=None"],
    "step": ["self", "actions"],
    "render": ["self"],
    "close": ["self"],
    "start_recording": ["self", "video_name"],
    "stop_recording": ["self"],
    "__del__": ["self"],
}


def test_constructor_signature_matches_the_seed_document():
    signature = inspect.signature(RecordVideo)
    gc_default = signature.parameters["gc_trigger"].default
    text = str(signature.replace(return_annotation=inspect.Signature.empty))
    text = text.replace("'", "").replace(repr(gc_default), "<lambda>")
    assert text == SEED_CONSTRUCTOR
    assert all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in signature.parameters.values()
    )
    # `gc_trigger=lambda episode: True`
    assert gc_default.__name__ == "<lambda>"
    assert list(inspect.signature(gc_default).parameters) == ["episode"]
    assert all(gc_default(episode) is True for episode in (0, 1, 7, 1000))


@pytest.mark.parametrize("name", sorted(SEED_METHODS))
def test_method_signatures_match_the_seed_document(name):
    method = getattr(RecordVideo, name)
    parameters = [
        p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
        for p in inspect.signature(method).parameters.values()
    ]
    assert parameters == SEED_METHODS[name]
    assert method.__doc__


def test_bases():
    assert issubclass(RecordVideo, RecordVideoParallel)
    assert issubclass(RecordVideo, BaseParallelWrapper)


def test_docstring_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(RecordVideo, "RecordVideo", globs={"RecordVideo": RecordVideo}):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted >= 5
    assert results.failed == 0
    assert mp4_files(tmp_path / "videos") == {"rl-video-episode-0.mp4"}
    # Reset frame plus max_cycles=5 steps.
    assert n_frames(tmp_path / "videos" / "rl-video-episode-0.mp4") == 6


# ------------------------------------------------ Gymnasium's RecordVideo tests, restated


def test_video_folder_and_filenames(video_folder):
    env = RecordVideo(
        TinyParallelEnv(max_steps=5),
        video_folder=str(video_folder),
        name_prefix="video-prefix",
        episode_trigger=lambda x: x in [1, 4],
        step_trigger=lambda x: x in [0, 22],
    )
    run_steps(env, 30)
    env.close()

    assert os.path.isdir(video_folder)
    # Episode k is steps 5k..5k+4. step-0 runs to the reset of episode 1; episode-4 is cut
    # short when step 22 starts a new recording, which runs to the reset of episode 5.
    frames = {name: n_frames(video_folder / name) for name in mp4_files(video_folder)}
    assert frames == {
        "video-prefix-step-0.mp4": 5,
        "video-prefix-episode-1.mp4": 6,
        "video-prefix-episode-4.mp4": 3,
        "video-prefix-step-22.mp4": 3,
    }


@pytest.mark.parametrize(
    "episode_trigger", [None, lambda x: x in [0, 3, 5, 10, 12]], ids=["default", "custom"]
)
def test_episodic_trigger(video_folder, episode_trigger):
    env = RecordVideo(
        TinyParallelEnv(max_steps=2), str(video_folder), episode_trigger=episode_trigger
    )
    episode_count = run_steps(env, 30)
    env.close()

    assert episode_count == 15
    assert env.episode_trigger is not None
    recorded = [i for i in range(episode_count + 1) if env.episode_trigger(i)]
    # The default schedule records episodes 0, 1, 8, 27, ... (cubes below 1000).
    assert recorded == ([0, 1, 8] if episode_trigger is None else [0, 3, 5, 10, 12])
    assert mp4_files(video_folder) == {f"rl-video-episode-{i}.mp4" for i in recorded}


def test_default_trigger_schedule(video_folder):
    trigger = RecordVideo(TinyParallelEnv(), str(video_folder)).episode_trigger
    assert [i for i in range(3000) if trigger(i)] == [
        *[n**3 for n in range(10)],
        1000,
        2000,
    ]


def test_step_trigger(video_folder):
    env = RecordVideo(
        TinyParallelEnv(max_steps=4), str(video_folder), step_trigger=lambda x: x % 10 == 0
    )
    run_steps(env, 19)
    env.close()
    frames = {name: n_frames(video_folder / name) for name in mp4_files(video_folder)}
    # step-0 runs to the end of episode 0 (steps 0-3); step-10 to the end of episode 2.
    assert frames == {"rl-video-step-0.mp4": 4, "rl-video-step-10.mp4": 2}


def test_both_episodic_and_step_trigger(video_folder):
    env = RecordVideo(
        TinyParallelEnv(max_steps=4),
        str(video_folder),
        step_trigger=lambda x: x == 9,
        episode_trigger=lambda x: x in (0, 3),
    )
    # Episode resets at steps 0, 4, 8, 12, 16; recorded: episode 0, steps 9-11, episode 3.
    run_steps(env, 19)
    env.close()
    frames = {name: n_frames(video_folder / name) for name in mp4_files(video_folder)}
    assert frames == {
        "rl-video-episode-0.mp4": 5,
        "rl-video-step-9.mp4": 3,
        "rl-video-episode-3.mp4": 5,
    }


def test_video_length(video_folder, video_length=3):
    env = RecordVideo(
        TinyParallelEnv(max_steps=10),
        str(video_folder),
        step_trigger=lambda x: x == 0,
        video_length=video_length,
    )
    env.reset(seed=123)
    for _ in range(video_length):
        env.step(dict.fromkeys(env.agents, 0))

    # Still recording; one more step takes the frame count past video_length.
    assert env.recording
    env.step(dict.fromkeys(env.agents, 0))
    assert not env.recording
    env.close()

    assert mp4_files(video_folder) == {"rl-video-step-0.mp4"}
    # Gymnasium's rule: a recording stops once it holds more than video_length frames.
    assert n_frames(video_folder / "rl-video-step-0.mp4") == video_length + 1


def test_video_length_spans_episodes(video_folder):
    env = RecordVideo(
        TinyParallelEnv(max_steps=2),
        str(video_folder),
        episode_trigger=lambda x: x == 0,
        video_length=6,
    )
    run_steps(env, 8)
    env.close()
    assert mp4_files(video_folder) == {"rl-video-episode-0.mp4"}
    # Reset and two steps of episodes 0 and 1, then the reset frame of episode 2.
    assert n_frames(video_folder / "rl-video-episode-0.mp4") == 7


def test_with_rgb_array_list(tmp_path, n_steps=10):
    def check_render_collection(env):
        env.reset(seed=123)
        for _ in range(n_steps):
            env.step(dict.fromkeys(env.agents, 0))
        render_out = env.render()
        assert isinstance(render_out, list)
        assert len(render_out) == n_steps + 1
        assert all(isinstance(frame, np.ndarray) and frame.ndim == 3 for frame in render_out)
        assert [int(frame[0, 0, 0]) for frame in render_out] == [
            frame_value(t) for t in range(n_steps + 1)
        ]
        assert env.render() == []
        env.close()

    check_render_collection(
        RecordVideo(RenderCollectionParallel(TinyParallelEnv(max_steps=50)), str(tmp_path / "a"))
    )
    # In reverse order.
    check_render_collection(
        RenderCollectionParallel(RecordVideo(TinyParallelEnv(max_steps=50), str(tmp_path / "b")))
    )
    for folder in ("a", "b"):
        assert n_frames(tmp_path / folder / "rl-video-episode-0.mp4") == n_steps + 1


def test_recorded_frames_are_the_rendered_frames(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=5), str(video_folder))
    run_steps(env, 5)
    env.close()
    with VideoFileClip(str(video_folder / "rl-video-episode-0.mp4")) as clip:
        levels = [float(frame.mean()) for frame in clip.iter_frames()]
    # Lossy encoding of flat frames: each level within a few grey values.
    assert len(levels) == 6
    assert np.allclose(levels, [frame_value(t) for t in range(6)], atol=4)


def test_reset_returns_observations_and_infos(video_folder):
    env = RecordVideo(TinyParallelEnv(), str(video_folder), step_trigger=lambda x: x % 100 == 0)
    observations, infos = env.reset(seed=0)
    env.close()
    assert os.path.isdir(video_folder)
    assert set(observations) == set(env.possible_agents)
    assert all(env.observation_space(a).contains(o) for a, o in observations.items())
    assert infos == {agent: {} for agent in env.possible_agents}


@pytest.mark.parametrize("render_mode", [None, "human", "ansi"])
def test_render_mode_incompatible(video_folder, monkeypatch, render_mode):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(ValueError) as excinfo:
        RecordVideo(TinyParallelEnv(render_mode=render_mode), str(video_folder))
    args = excinfo.value.args
    # The traceback holds the half-built wrapper; drop it so `__del__` runs now.
    del excinfo
    gc.collect()

    # One message (PettingZoo's error carries two arguments and prints as a tuple).
    assert len(args) == 1
    assert f"Render mode is {render_mode!r}, which is incompatible with RecordVideo" in args[0]
    assert "rgb_array" in args[0]
    # `__del__` of the half-built wrapper raised nothing, and nothing was written.
    assert unraisable == []
    assert not video_folder.exists()


def test_no_moviepy(video_folder, monkeypatch):
    # A None entry in sys.modules makes the import fail, as if MoviePy were not installed; the
    # submodule is listed too because an imported submodule is found without its parent.
    monkeypatch.setitem(sys.modules, "moviepy", None)
    monkeypatch.setitem(sys.modules, "moviepy.video.io.ImageSequenceClip", None)
    with pytest.raises(DependencyNotInstalled, match="MoviePy is not installed"):
        RecordVideo(TinyParallelEnv(), str(video_folder))
    assert not video_folder.exists()


def test_no_moviepy_when_saving(video_folder, monkeypatch):
    env = RecordVideo(TinyParallelEnv(), str(video_folder))
    env.reset(seed=0)
    env.step(dict.fromkeys(env.agents, 0))
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "moviepy", None)
        patch.setitem(sys.modules, "moviepy.video.io.ImageSequenceClip", None)
        with pytest.raises(DependencyNotInstalled, match="MoviePy is not installed"):
            env.stop_recording()
    # The frames are kept, so the video can still be saved once MoviePy imports again.
    assert env.recording
    assert mp4_files(video_folder) == set()
    env.close()
    assert n_frames(video_folder / "rl-video-episode-0.mp4") == 2


def test_fps_from_metadata(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=3), str(video_folder))
    assert env.frames_per_sec == RENDER_FPS
    run_steps(env, 3)
    env.close()
    info = ffmpeg_parse_infos(str(video_folder / "rl-video-episode-0.mp4"))
    assert info["video_fps"] == RENDER_FPS
    assert info["video_n_frames"] == 4


def test_fps_override(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=3), str(video_folder), fps=7)
    assert env.frames_per_sec == 7
    run_steps(env, 3)
    env.close()
    assert ffmpeg_parse_infos(str(video_folder / "rl-video-episode-0.mp4"))["video_fps"] == 7


def test_fps_default_without_metadata(video_folder):
    env = RecordVideo(NoFpsEnv(), str(video_folder))
    assert env.frames_per_sec == 30
    env.close()


def test_fractional_render_fps_is_truncated(video_folder, monkeypatch):
    monkeypatch.setitem(TinyParallelEnv.metadata, "render_fps", 12.5)
    assert RecordVideo(TinyParallelEnv(), str(video_folder)).frames_per_sec == 12


@pytest.mark.parametrize("fps", [0, -5, 2.5, True, "30"])
def test_bad_fps(video_folder, fps):
    with pytest.raises(ValueError, match="fps must be a positive int or None"):
        RecordVideo(TinyParallelEnv(), str(video_folder), fps=fps)
    assert not video_folder.exists()


@pytest.mark.parametrize("render_fps", [0, 0.5, "fast", True])
def test_bad_metadata_render_fps(video_folder, monkeypatch, render_fps):
    monkeypatch.setitem(TinyParallelEnv.metadata, "render_fps", render_fps)
    with pytest.raises(ValueError, match=r'env.metadata\["render_fps"\] must be a number >= 1'):
        RecordVideo(TinyParallelEnv(), str(video_folder))


def test_unable_to_save_last_video_warning(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=10), str(video_folder))
    env.reset(seed=0)
    env.step(dict.fromkeys(env.agents, 0))
    with pytest.warns(UserWarning, match=r"Unable to save last video! Did you call close\(\)\?"):
        del env
        gc.collect()
    assert mp4_files(video_folder) == set()


def test_no_warning_after_close(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=10), str(video_folder))
    env.reset(seed=0)
    env.step(dict.fromkeys(env.agents, 0))
    env.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del env
        gc.collect()
    assert mp4_files(video_folder) == {"rl-video-episode-0.mp4"}


# ------------------------------------------------------ faults fixed over RecordVideoParallel


def test_del_on_object_whose_init_never_ran():
    wrapper = RecordVideo.__new__(RecordVideo)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapper.__del__()


def test_pettingzoo_del_fails_where_ours_does_not(monkeypatch):
    # Guards the point of the override: PettingZoo's own __del__ still fails here.
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    broken = RecordVideoParallel.__new__(RecordVideoParallel)
    with pytest.raises(RecursionError):
        broken.__del__()
    ours = RecordVideo.__new__(RecordVideo)
    ours.__del__()
    del ours
    gc.collect()
    assert unraisable == []


def test_del_after_constructor_failed_midway(video_folder, monkeypatch):
    # The env is set by the base constructor, then the MoviePy check fails after it.
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(record_video_module, "_require_moviepy", lambda: None)
    monkeypatch.setitem(sys.modules, "moviepy", None)
    with pytest.raises(DependencyNotInstalled) as excinfo:
        RecordVideo(TinyParallelEnv(), str(video_folder))
    del excinfo
    gc.collect()
    assert unraisable == []


# ------------------------------------------------------------------------- atomic writes


def test_no_temporary_files_left(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=2), str(video_folder))
    run_steps(env, 4)
    env.close()
    assert sorted(os.listdir(video_folder)) == ["rl-video-episode-0.mp4", "rl-video-episode-1.mp4"]


def test_failed_write_leaves_no_file(video_folder, monkeypatch):
    env = RecordVideo(TinyParallelEnv(max_steps=10), str(video_folder))
    final = Path(video_folder) / "rl-video-episode-0.mp4"
    final.write_bytes(b"previous video")
    written = []

    def failing_write(self, filename, **kwargs):
        written.append(filename)
        Path(filename).write_bytes(b"half a video")
        raise OSError("disk full")

    monkeypatch.setattr(ImageSequenceClip, "write_videofile", failing_write)
    env.reset(seed=0)
    env.step(dict.fromkeys(env.agents, 0))
    with pytest.raises(OSError, match="disk full"):
        env.stop_recording()

    # MoviePy wrote to a hidden .mp4 name in the same folder, which was removed; the file
    # under the final name was never touched.
    (tmp_name,) = written
    assert Path(tmp_name).parent == Path(video_folder)
    assert Path(tmp_name).name.startswith(".rl-video-episode-0.")
    assert tmp_name.endswith(".mp4")
    assert os.listdir(video_folder) == ["rl-video-episode-0.mp4"]
    assert final.read_bytes() == b"previous video"

    monkeypatch.undo()
    env.close()
    assert n_frames(final) == 2


# ---------------------------------------------------------------------- other behaviour


def test_overwrite_warning_for_existing_folder(tmp_path):
    with pytest.warns(UserWarning, match="Overwriting existing videos"):
        RecordVideo(TinyParallelEnv(), str(tmp_path))


def test_path_like_video_folder(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=2), video_folder)
    run_steps(env, 2)
    env.close()
    assert mp4_files(video_folder) == {"rl-video-episode-0.mp4", "rl-video-episode-1.mp4"}


def test_zero_frames_warning(video_folder):
    env = RecordVideo(TinyParallelEnv(), str(video_folder))
    env.start_recording("empty")
    with pytest.warns(UserWarning, match="zero frames"):
        env.stop_recording()
    assert mp4_files(video_folder) == set()


def test_stop_without_recording(video_folder):
    env = RecordVideo(TinyParallelEnv(), str(video_folder))
    with pytest.raises(RuntimeError, match="no recording was started"):
        env.stop_recording()


def test_start_recording_while_recording_saves_the_first(video_folder):
    env = RecordVideo(
        TinyParallelEnv(max_steps=10), str(video_folder), episode_trigger=lambda x: x == 0
    )
    env.reset(seed=0)
    env.start_recording("manual")
    env.step(dict.fromkeys(env.agents, 0))
    env.close()
    assert mp4_files(video_folder) == {"rl-video-episode-0.mp4", "manual.mp4"}


def test_non_array_frame_stops_recording(video_folder):
    class TextFrames(TinyParallelEnv):
        def render(self):
            return "not a frame"

    env = RecordVideo(TextFrames(), str(video_folder))
    with pytest.warns(UserWarning) as record:
        env.reset(seed=0)
    messages = [str(warning.message) for warning in record]
    assert any("zero frames" in message for message in messages)
    assert any("Recording stopped: expected type of frame" in message for message in messages)
    assert not env.recording
    assert mp4_files(video_folder) == set()


def test_empty_frame_list_warning(video_folder):
    class NoResetFrame(RenderCollectionParallel):
        def reset(self, seed=None, options=None):
            return self.env.reset(seed=seed, options=options)

    env = RecordVideo(NoResetFrame(TinyParallelEnv(max_steps=3)), str(video_folder))
    with pytest.warns(UserWarning, match="The frame cannot be captured"):
        env.reset(seed=0)
    assert env.recording
    for _ in range(3):
        env.step(dict.fromkeys(env.agents, 0))
    env.close()
    # The episode lost its reset frame only.
    assert n_frames(video_folder / "rl-video-episode-0.mp4") == 3


def test_gc_trigger(video_folder, monkeypatch):
    collections = []
    monkeypatch.setattr(record_video_module.gc, "collect", lambda: collections.append(True))
    episodes = []
    env = RecordVideo(
        TinyParallelEnv(max_steps=1),
        str(video_folder),
        episode_trigger=lambda x: True,
        gc_trigger=lambda episode: episodes.append(episode) or episode == 1,
    )
    run_steps(env, 3)
    env.close()
    assert episodes == [1, 2, 3, 3]
    assert collections == [True]


def test_gc_trigger_none(video_folder):
    env = RecordVideo(TinyParallelEnv(max_steps=1), str(video_folder), gc_trigger=None)
    run_steps(env, 2)
    env.close()
    assert mp4_files(video_folder) == {"rl-video-episode-0.mp4", "rl-video-episode-1.mp4"}


def test_episode_cap_of_wrapped_env(video_folder):
    assert infer_episode_cap(RecordVideo(TinyParallelEnv(max_steps=5), str(video_folder))) == 5


@pytest.mark.parametrize(
    ("make_env", "kwargs", "error", "match"),
    [
        (
            lambda: simple_spread_v3.env(render_mode="rgb_array"),
            {},
            TypeError,
            "wraps a PettingZoo ParallelEnv",
        ),
        (TinyParallelEnv, {"video_folder": 3}, TypeError, "video_folder must be a str or path"),
        (TinyParallelEnv, {"video_folder": ""}, ValueError, "video_folder must be a non-empty"),
        (TinyParallelEnv, {"episode_trigger": 5}, TypeError, "episode_trigger must be a callable"),
        (TinyParallelEnv, {"step_trigger": "x"}, TypeError, "step_trigger must be a callable"),
        (TinyParallelEnv, {"gc_trigger": True}, TypeError, "gc_trigger must be a callable"),
        (TinyParallelEnv, {"video_length": -1}, ValueError, "video_length must be >= 0"),
        (TinyParallelEnv, {"video_length": 1.5}, TypeError, "video_length must be an int"),
        (TinyParallelEnv, {"name_prefix": 7}, TypeError, "name_prefix must be a str"),
        (TinyParallelEnv, {"name_prefix": "a/b"}, ValueError, "path separator"),
        (TinyParallelEnv, {"disable_logger": "yes"}, TypeError, "disable_logger must be a bool"),
    ],
)
def test_bad_arguments(video_folder, make_env, kwargs, error, match):
    arguments = {"video_folder": str(video_folder), **kwargs}
    with pytest.raises(error, match=match):
        RecordVideo(make_env(), **arguments)
    assert not video_folder.exists()
