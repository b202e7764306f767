"""Videos of a run's final policy and a poster (a grid of frames) for reports.

The policy acts in a single `rgb_array` env wrapped in `SafetyOverlay` (`src.evaluation.
overlay`: each frame over a strip that marks the agents that incur a cost, the agents whose
action the shield changed, the step and the running violation count) and then in
`RecordVideo`, one mp4 per episode; episode i is seeded like the run's evaluation episode i
(`final_policy_eval_seed_offset + run * N + i`). The poster shows evenly spaced frames of the first
episode, marks included.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from src.algos.policy import load_actor
from src.config.recorded import read_run_config
from src.core.io import atomic_output
from src.core.wrappers import apply_hidden_episode_cap, infer_episode_cap
from src.core.wrappers.record_video_parallel import RecordVideo
from src.envs.registry import make_env
from src.envs.task import agent_actions, observation_sizes, stack_observations
from src.evaluation.overlay import SafetyOverlay
from src.evaluation.run_inputs import check_policy
from src.plotting import plt

__all__ = ["POSTER_NAME", "EvenFrames", "make_poster", "render_run"]

POSTER_NAME = "poster.png"
POSTER_GRID = (2, 4)


class EvenFrames:
    """Keeps about `keep` evenly spaced frames of an episode of unknown length in bounded memory.

    Frames are offered at steps that are multiples of `stride`; when more than 2 * `keep` are
    held, the stride doubles and every frame off the new stride is dropped.
    """

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = keep
        self.stride = 1
        self.frames: list[tuple[int, np.ndarray]] = []

    def wants(self, step: int) -> bool:
        """Whether the frame of `step` would be kept (render only those)."""
        return step % self.stride == 0

    def add(self, step: int, frame: np.ndarray) -> None:
        """Add the frame of `step` (steps must increase)."""
        self.frames.append((step, np.asarray(frame)))
        if len(self.frames) > 2 * self.keep:
            self.stride *= 2
            # The final frame of an episode may sit off the stride; keep the latest frame too.
            last = self.frames[-1]
            self.frames = [(s, f) for s, f in self.frames[:-1] if s % self.stride == 0] + [last]

    def select(self) -> list[tuple[int, np.ndarray]]:
        """Up to `keep` frames, evenly spaced, always the first and the last one."""
        if len(self.frames) <= self.keep:
            return list(self.frames)
        index = np.unique(np.round(np.linspace(0, len(self.frames) - 1, self.keep)).astype(int))
        return [self.frames[i] for i in index]


def make_poster(frames: Sequence[tuple[int, np.ndarray]], path: str | Path, *, title: str) -> Path:
    """Write a 2 x 4 grid of (step, frame) pairs as a PNG; empty tiles stay blank."""
    if len(frames) == 0:
        raise ValueError("a poster needs at least one frame")
    rows, cols = POSTER_GRID
    if len(frames) > rows * cols:
        raise ValueError(f"a poster holds at most {rows * cols} frames, got {len(frames)}")
    images = [np.asarray(frame) for _, frame in frames]
    for (step, _), image in zip(frames, images, strict=True):
        if image.ndim != 3 or image.shape[2] not in (3, 4):
            raise ValueError(f"frame of step {step} must be [H, W, 3|4], got shape {image.shape}")
    # Tiles keep the frames' aspect (the status strip makes them taller than wide), plus room
    # for each tile's title.
    aspect = max(image.shape[0] / max(image.shape[1], 1) for image in images)
    tile = 2.4
    fig, axes = plt.subplots(
        rows, cols, figsize=(tile * cols, (tile * aspect + 0.5) * rows), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    for ax, (step, _), image in zip(axes.flat, frames, images, strict=False):
        ax.axis("on")  # a thin frame separates frames with white backgrounds
        ax.imshow(image)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"step {step}", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    target = Path(path)
    try:
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format="png", dpi=120)
    finally:
        plt.close(fig)
    return target


def render_run(run_dir: str | Path, video_dir: str | Path, *, episodes: int) -> list[Path]:
    """Record `episodes` episodes of the run's final policy as mp4 files plus `poster.png`.

    Returns the mp4 paths in episode order followed by the poster path. `shield` runs are
    recorded with the shield on (the deployed policy), its interventions marked.
    """
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    _, config = read_run_config(run_dir)
    check_policy(run_dir, config)  # before load_actor builds its network
    video_path = Path(video_dir)
    prefix = f"{config.env_name}-{config.algo}-run{config.run_idx}"
    seed_offset = config.evaluation.first_seed(config.run_idx)
    params = config.env.constructor_params()

    actor = load_actor(run_dir, shielded=True)
    overlay = SafetyOverlay(
        make_env(config.env_name, render_mode="rgb_array", **params), shielded=actor.shielded
    )
    env = RecordVideo(
        overlay,
        str(video_path),
        episode_trigger=lambda _: True,
        name_prefix=prefix,
    )
    poster = EvenFrames(POSTER_GRID[0] * POSTER_GRID[1])
    try:
        cap = infer_episode_cap(env)
        agents = list(env.possible_agents)
        # Agents observing fewer entries are zero-padded, as in the vector envs.
        obs_dim = max(observation_sizes(env))
        for episode in range(episodes):
            seed = seed_offset + episode
            obs, _ = env.reset(seed=seed)
            actor.reset(num_envs=1, seed=seed)
            if episode == 0:
                poster.add(0, env.render())
            step = 0
            while env.agents:
                joint = stack_observations(obs, agents, obs_dim)[None]  # [1, A, D]
                # The actor takes the 1-based index of the step its actions take.
                actions = actor.act(joint, np.array([step + 1], dtype=np.int64))  # [1, A]
                if actor.last_intervened is not None:
                    overlay.set_interventions(actor.last_intervened[0])
                live = list(env.agents)
                obs, _, terminations, truncations, _ = env.step(
                    agent_actions(actions[0], agents, live)
                )
                step += 1
                truncations, _ = apply_hidden_episode_cap(
                    active_agents=live,
                    terminations=terminations,
                    truncations=truncations,
                    episode_steps=step,
                    episode_cap=cap,
                )
                done = all(terminations.get(a, False) or truncations.get(a, False) for a in live)
                if episode == 0 and (done or poster.wants(step)):
                    poster.add(step, env.render())
                if done:
                    break
    finally:
        env.close()

    videos = [video_path / f"{prefix}-episode-{episode}.mp4" for episode in range(episodes)]
    empty = [str(v) for v in videos if not v.is_file() or v.stat().st_size == 0]
    if empty:
        raise RuntimeError(f"RecordVideo did not write these videos: {empty}")
    title = f"{config.env_name} / {config.algo} / run {config.run_idx} (seed {seed_offset})"
    return [*videos, make_poster(poster.select(), video_path / POSTER_NAME, title=title)]
