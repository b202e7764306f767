"""Wrappers and helpers around PettingZoo environments.

`infer_episode_cap` and `apply_hidden_episode_cap` enforce the hidden episode cap;
`src.core.wrappers.record_video_parallel.RecordVideo` records videos of a ParallelEnv (import
it from its module, so that code which needs only the caps does not load the video stack).
"""

from src.core.wrappers.episode_cap import apply_hidden_episode_cap, infer_episode_cap

__all__ = ["apply_hidden_episode_cap", "infer_episode_cap"]
