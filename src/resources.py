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

from src.config.run import RunConfig
from src.config.shield import CEM_ITERATIONS, CEM_SAMPLES, ShieldConfig

__all__ = ["INTERPRETER_MB", "eval_memory_mb", "mlp_params", "train_memory_mb"]

INTERPRETER_MB = 500.0
"""Python, torch, NumPy, PettingZoo and the envs, before the first allocation of the job."""
_MB = 1024.0**2
_FLOAT = 4  # float32 bytes
_EPISODE_RECORD = 1536  # bytes of one EpisodeLog in memory plus its share of history.json
_SHORTEST_EPISODE = 4  # steps; bounds the number of episodes of a run


def mlp_params(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> int:
    """Weights and biases of an MLP `in_dim -> hidden... -> out_dim`.

    >>> mlp_params(3, (4,), 2)
    26
    """
    sizes = (in_dim, *hidden, out_dim)
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def _imagined_rows(
    shield: ShieldConfig, *, copies: int, n_agents: int, n_actions: int, box: bool = False
) -> int:
    """Rows (member, state, joint action) of the shield's largest batch of model calls, on the
    large side: per copy the proposal and its one-agent changes (a step of the search's
    descent judges fewer), or the decentralised shield's actions of every agent against their
    completions of the others' (valued for every agent); the critic's backup of both ends of
    its batch over as many joint actions (a turn of its descent judges fewer). With Box
    actions (`box`), the joint actions judged are sampled: per copy the proposal,
    `candidates` and the cross-entropy search's rounds (each agent's proposal and
    `candidates` against `opponent_samples` completions when decentralised), and the
    backup's recorded action with `candidates` draws."""
    a, n = n_agents, n_actions
    if box:
        options = 1 + shield.candidates
        if shield.coordination == "decentralised":
            decisions = copies * a * options * shield.opponent_samples * a
        else:
            decisions = copies * (options + CEM_ITERATIONS * CEM_SAMPLES)
        backup = 2 * shield.critic_batch_size * options
        return shield.ensemble_size * max(decisions, backup)
    options = 1 + a * (n - 1)
    if shield.coordination == "decentralised":
        decisions = copies * a * n * min(shield.opponent_samples, n ** (a - 1)) * a
    else:
        decisions = copies * options
    backup = 2 * shield.critic_batch_size * options
    return shield.ensemble_size * max(decisions, backup)


def _imagined_row_bytes(shield: ShieldConfig, *, joint_dim: int, n_agents: int) -> float:
    """Bytes of one imagined row: the activations of the dynamics' and of every agent's cost
    model's hidden layers, the critic's, the successor and the outputs."""
    hidden = sum(shield.wm_hidden)
    floats = (1 + n_agents) * hidden + sum(shield.critic_hidden) + 2 * joint_dim + n_agents + 1
    return floats * _FLOAT


def train_memory_mb(
    config: RunConfig, *, obs_dim: int, n_actions: int, box: bool = False
) -> dict[str, float]:
    """Estimated peak memory (MB) of training `config`, by part; `total` sums them. `box`:
    the env's actions are a Box (`n_actions` the width of an agent's action)."""
    ppo = config.ppo
    t, e, a, d = ppo.rollouts, ppo.num_envs, config.env.n_agents, obs_dim
    samples = t * e * a
    width = d + a
    hidden = ppo.hidden_sizes
    nets = 3 if config.lagrange is not None else 2
    params = mlp_params(width, hidden, n_actions) + (nets - 1) * mlp_params(width, hidden, 1)
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
        rows = _imagined_rows(shield, copies=e, n_agents=a, n_actions=n_actions, box=box)
        parts["shield replay"] = shield.replay_size * row / _MB
        parts["shield imagination"] = (
            rows * _imagined_row_bytes(shield, joint_dim=joint, n_agents=a) / _MB
        )
        # The dynamics, the agents' cost model, the critic with its target and the opponent
        # model.
        model_params = shield.ensemble_size * (
            mlp_params(joint + a * n_actions, shield.wm_hidden, joint + a + 1)
            + mlp_params(d + a * n_actions + a, shield.wm_hidden, 1)
            + 2 * mlp_params(joint + 1 + a, shield.critic_hidden, 1)
        ) + mlp_params(d + a, shield.om_hidden, n_actions)
        parts["shield models"] = 4 * model_params * _FLOAT / _MB
    parts["total"] = sum(parts.values())
    return parts


def eval_memory_mb(
    config: RunConfig, *, obs_dim: int, n_actions: int, box: bool = False
) -> dict[str, float]:
    """Estimated peak memory (MB) of evaluating `config`'s final policy, by part (`box` as in
    `train_memory_mb`)."""
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
        rows = _imagined_rows(config.shield, copies=batch, n_agents=a, n_actions=n_actions, box=box)
        row_bytes = _imagined_row_bytes(config.shield, joint_dim=a * obs_dim, n_agents=a)
        parts["shield imagination"] = rows * row_bytes / _MB
    parts["total"] = sum(parts.values())
    return parts
