"""REINFORCE, written from scratch against `src.algos.api` alone (docs/algorithms.md).

Every agent acts with one shared policy, a small MLP over its observation and a one-hot of
its index. Each update plays `rollouts` steps in every env copy, then follows the policy
gradient of the discounted reward-to-go:

    loss = -mean(log pi(a | o) * A) - ent_coef * entropy,   A = standardised G_t,
    G_t = r_t + gamma * G_{t+1}   (0 after the episode's last step and after the rollout's)

The reward-to-go stops where the rollout stops (no critic bootstraps it), and standardising
it over the rollout is the baseline. It learns from the reward only (`constrained = False`):
the cost reaches the pipeline through the episodes it logs, as the unconstrained `ippo`'s.

It reads `gamma`, `learning_rate`, `ent_coef`, `max_grad_norm`, `hidden_sizes`, `num_envs`,
`rollouts` and the update count from the run config's `ppo` section (so a config's
`algo_params.<name>` tunes them). Run it with the built-in ones:

    snakemake --cores 2 --configfile examples/reinforce.yaml
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from src.algos.api import (
    POLICY_CONFIG,
    EpisodeLog,
    EpisodeTracker,
    RunConfig,
    TrainingCallback,
    VectorEnv,
    copy_seeds,
    metrics,
    update_row,
)


def policy_network(
    obs_dim: int, n_agents: int, n_actions: int, hidden: Sequence[int]
) -> torch.nn.Sequential:
    """The shared policy: `[..., obs_dim + n_agents]` inputs to `[..., n_actions]` logits."""
    layers: list[torch.nn.Module] = []
    width = obs_dim + n_agents
    for size in hidden:
        layers += [torch.nn.Linear(width, size), torch.nn.Tanh()]
        width = size
    layers.append(torch.nn.Linear(width, n_actions))
    return torch.nn.Sequential(*layers)


def with_agent_ids(obs: np.ndarray) -> torch.Tensor:
    """Observations `[..., A, D]` with each agent's one-hot appended: `[..., A, D + A]`."""
    obs = torch.as_tensor(np.asarray(obs, dtype=np.float32))
    n_agents = obs.shape[-2]
    ids = torch.eye(n_agents).expand(*obs.shape[:-1], n_agents)
    return torch.cat([obs, ids], dim=-1)


def sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One action per row of `logits` `[..., n_actions]`, drawn from `generator`: `[...]`."""
    probs = torch.softmax(logits, dim=-1)
    flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
    return flat.reshape(probs.shape[:-1])


def reward_to_go(rewards: np.ndarray, done: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted reward-to-go `[T, E, A]` of rewards `[T, E, A]`; `done` `[T, E]` ends an
    episode after step t (its next step belongs to the next episode).

    >>> reward_to_go(np.ones((3, 1, 1)), np.array([[False], [True], [False]]), 0.5)[:, 0, 0]
    array([1.5, 1. , 1. ])
    """
    returns = np.zeros_like(rewards, dtype=np.float64)
    following = np.zeros(rewards.shape[1:], dtype=np.float64)
    for t in reversed(range(len(rewards))):
        following = rewards[t] + gamma * following * ~done[t][:, None]
        returns[t] = following
    return returns


class ReinforceActor:
    """The trained policy for the evaluation and the videos (no shield)."""

    shielded = False
    last_intervened = None

    def __init__(self, net: torch.nn.Module) -> None:
        """Act with `net`; call `reset` before `act`."""
        self.net = net.eval()
        self.generator = torch.Generator()

    def reset(self, num_envs: int, seed: int) -> None:
        """Sample from a generator seeded with `seed`."""
        self.generator = torch.Generator().manual_seed(int(seed))

    @torch.inference_mode()
    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray:
        """Actions `[E, A]` for observations `[E, A, D]`."""
        return sample(self.net(with_agent_ids(obs)), self.generator).numpy().astype(np.int64)


class Reinforce:
    """REINFORCE with a parameter-shared MLP policy and a standardised reward-to-go."""

    constrained = False
    shielded = False
    multiplier = False
    sections = ("ppo",)
    action_kinds = ("discrete",)

    def __init__(self, config: RunConfig, env: VectorEnv) -> None:
        """The policy, its optimiser and the episode bookkeeping, from the run config."""
        self.config, self.env = config, env
        self.ppo = config.ppo
        self.num_updates, self.steps_per_update = self.ppo.num_updates, self.ppo.steps_per_update
        torch.manual_seed(config.seed)  # the network's first weights
        self.net = policy_network(env.obs_dim, env.n_agents, env.n_actions, self.ppo.hidden_sizes)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.ppo.learning_rate)
        self.generator = torch.Generator().manual_seed(config.seed)  # the actions
        self.tracker = EpisodeTracker(
            num_envs=env.num_envs,
            n_agents=env.n_agents,
            env=config.env_name,
            algo=config.algo,
            run=config.run_idx,
        )
        self.history: list[EpisodeLog] = []
        self.updates: list[dict[str, Any]] = []
        self.update = self.vector_step = 0
        self.wall_time = 0.0
        self.obs: np.ndarray | None = None

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        """Run the remaining updates; after each, its row and the callbacks (checkpoints)."""
        if self.obs is None:
            self.obs = self.env.reset(seed=copy_seeds(self.config.seed, self.env.num_envs))
        while self.update < self.num_updates:
            started, finished = time.perf_counter(), len(self.history)
            inputs, actions, rewards, done = self.collect()
            losses = self.learn(inputs, actions, reward_to_go(rewards, done, self.ppo.gamma))
            self.wall_time += time.perf_counter() - started
            self.updates.append(
                update_row(
                    update=self.update,
                    global_step=self.vector_step * self.env.num_envs,
                    wall_time=self.wall_time,
                    episodes=self.history[finished:],
                    extra=losses,
                )
            )
            self.update += 1
            for callback in callbacks:
                callback.on_update_end(self)

    @torch.no_grad()
    def collect(self) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Play `rollouts` steps in every copy: inputs `[T, E, A, D + A]`, actions `[T, E, A]`,
        rewards `[T, E, A]` and episode ends `[T, E]`."""
        no_shield = np.zeros((self.env.num_envs, self.env.n_agents), dtype=bool)
        inputs, actions, rewards, done = [], [], [], []
        for _ in range(self.ppo.rollouts):
            x = with_agent_ids(self.obs)
            action = sample(self.net(x), self.generator)
            result = self.env.step(action.numpy().astype(np.int64))
            _, episodes = self.tracker.record(result, no_shield, self.vector_step)
            self.history += episodes
            self.vector_step += 1
            self.obs = result.obs
            inputs.append(x)
            actions.append(action)
            rewards.append(result.reward)
            done.append(result.terminated.any(axis=1) | result.truncated.any(axis=1))
        return torch.stack(inputs), torch.stack(actions), np.stack(rewards), np.stack(done)

    def learn(
        self, inputs: torch.Tensor, actions: torch.Tensor, returns: np.ndarray
    ) -> dict[str, float]:
        """One gradient step on the rollout; returns the update's metrics."""
        advantages = torch.as_tensor(returns, dtype=torch.float32)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_probs = torch.log_softmax(self.net(inputs), dim=-1)
        chosen = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        loss = -(chosen * advantages).mean() - self.ppo.ent_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.ppo.max_grad_norm)
        self.optimizer.step()
        return {
            metrics.POLICY_LOSS: float(loss.detach()),
            metrics.ENTROPY: float(entropy.detach()),
            metrics.LEARNING_RATE: self.ppo.learning_rate,
        }

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs to go on exactly as if never stopped."""
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "update": self.update,
            "vector_step": self.vector_step,
            "wall_time": self.wall_time,
            "obs": self.obs,
            "env": self.env.get_state(),
            "tracker": self.tracker.state_dict(),
            "history": [episode.to_dict() for episode in self.history],
            "updates": list(self.updates),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state()` returned."""
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.update, self.vector_step = int(state["update"]), int(state["vector_step"])
        self.wall_time = float(state["wall_time"])
        self.obs = state["obs"]
        self.env.set_state(state["env"])
        self.tracker.load_state_dict(state["tracker"])
        self.history = [EpisodeLog.from_dict(entry) for entry in state["history"]]
        self.updates = list(state["updates"])

    def policy_state(self) -> dict[str, Any]:
        """policy.pt: the run config, the network's shape and its weights."""
        return {
            POLICY_CONFIG: self.config.to_dict(),
            "shape": [self.env.obs_dim, self.env.n_agents, self.env.n_actions],
            "policy": self.net.state_dict(),
        }

    @classmethod
    def load_actor(
        cls, policy_state: dict[str, Any], config: RunConfig, *, shielded: bool = True
    ) -> ReinforceActor:
        """The final policy of a policy.pt content (it has no shield to switch)."""
        obs_dim, n_agents, n_actions = (int(n) for n in policy_state["shape"])
        net = policy_network(obs_dim, n_agents, n_actions, config.ppo.hidden_sizes)
        net.load_state_dict(policy_state["policy"])
        return ReinforceActor(net)
