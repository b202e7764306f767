"""Peak memory of a training or evaluation job, estimated from its config before any job runs.

The workflow compares these estimates with the `resources.{train,evaluate}.mem_mb` the job
asks for (locally and on SLURM) and refuses a config whose job cannot fit, naming the key,
the value and the estimate, instead of letting the job die of an allocator error later. The
estimate adds up what a job allocates by its config: the interpreter with torch and the envs,
the rollout buffer and the update's batch tensors, the networks with their gradients and Adam
moments, the training history, the shield's replay and imagination, the evaluation's
per-episode arrays. It errs on the large side.
"""

from __future__ import annotations

import itertools
import math

from src.config.run import RunConfig

__all__ = ["INTERPRETER_MB", "eval_memory_mb", "train_memory_mb"]

INTERPRETER_MB = 500.0
"""Python, torch, NumPy, PettingZoo and the envs, before the first allocation of the job."""
_MB = 1024.0**2
_FLOAT = 4  # float32 bytes
_EPISODE_RECORD = 1536  # bytes of one EpisodeLog in memory plus its share of history.json
_SHORTEST_EPISODE = 4  # steps; bounds the number of episodes of a run


def _mlp_params(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> int:
    sizes = (in_dim, *hidden, out_dim)
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def train_memory_mb(config: RunConfig, *, obs_dim: int, n_actions: int) -> dict[str, float]:
    """Estimated peak memory (MB) of training `config`, by part; `total` sums them."""
    ppo = config.ppo
    t, e, a, d = ppo.rollouts, ppo.num_envs, config.env.n_agents, obs_dim
    samples = t * e * a
    width = d + a
    hidden = ppo.hidden_sizes
    nets = 3 if config.lagrange is not None else 2
    params = _mlp_params(width, hidden, n_actions) + (nets - 1) * _mlp_params(width, hidden, 1)
    parts = {
        "interpreter": INTERPRETER_MB,
        # inputs and final inputs, actions, log-probs, rewards, costs, flags
        "rollout buffer": samples * (2 * width * _FLOAT + 8 + 3 * _FLOAT + 3) / _MB,
        # values, returns, advantages (and the cost ones), a shuffled copy of the batch, and
        # the critics' activations over the whole rollout
        "update batch": samples
        * (8 * _FLOAT + (width + 8) * _FLOAT + 2 * sum(hidden) * _FLOAT)
        / _MB,
        "minibatch activations": samples / ppo.mini_batches * sum(hidden) * _FLOAT * 3 * nets / _MB,
        # parameters, gradients and two Adam moments
        "networks": 4 * params * _FLOAT / _MB,
        "history": ppo.timesteps / _SHORTEST_EPISODE * _EPISODE_RECORD / _MB,
    }
    if config.shield is not None:
        shield = config.shield
        joint = a * d
        row = (2 * joint + 2 * a + 1) * _FLOAT + a * 8
        wm_width = max((joint + a * n_actions, *shield.wm_hidden, joint + a + 1))
        imagined = e * a * n_actions * math.ceil(shield.rollout_count * 8)
        parts["shield replay"] = shield.replay_size * row / _MB
        parts["shield imagination"] = imagined * (4 * wm_width + 2 * joint) * _FLOAT / _MB
        wm_params = shield.ensemble_size * _mlp_params(
            joint + a * n_actions, shield.wm_hidden, joint + a + 1
        )
        parts["shield models"] = 4 * wm_params * _FLOAT / _MB
    parts["total"] = sum(parts.values())
    return parts


def eval_memory_mb(config: RunConfig, *, obs_dim: int) -> dict[str, float]:
    """Estimated peak memory (MB) of evaluating `config`'s final policy, by part."""
    settings = config.evaluation
    n, horizon = settings.episodes, settings.max_horizon
    batch = settings.batch_size
    a = config.env.n_agents
    parts = {
        "interpreter": INTERPRETER_MB,
        # team reward and cost (float64) and the violation flag of every episode and step
        "episode arrays": n * horizon * (8 + 8 + 1) / _MB,
        "batch": batch * a * (obs_dim + a) * _FLOAT * 8 / _MB,
    }
    if config.shield is not None:
        parts["shield imagination"] = (
            batch * a * 5 * config.shield.rollout_count * 8 * 4 * a * obs_dim * _FLOAT / _MB
        )
    parts["total"] = sum(parts.values())
    return parts
