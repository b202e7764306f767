"""Replay of real transitions for the shield's models, with a held-out validation part.

Each transition goes, with probability `valid_fraction` (drawn from the replay's own seeded
generator), to the validation ring, otherwise to the training ring. The world model trains on
(joint obs, joint action) -> (next joint obs, per-agent cost, done); the opponent model on the
per-agent (obs, action) pairs contained in the same rows, so one replay serves both.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TransitionReplay"]

_FIELDS = ("obs", "action", "next_obs", "cost", "done")


class _Ring:
    """Fixed-capacity ring of transitions stored as preallocated tensors."""

    def __init__(self, capacity: int, joint_dim: int, n_agents: int) -> None:
        self.capacity = capacity
        self.obs = torch.zeros(capacity, joint_dim)  # [C, A*D]
        self.action = torch.zeros(capacity, n_agents, dtype=torch.int64)  # [C, A]
        self.next_obs = torch.zeros(capacity, joint_dim)  # [C, A*D]
        self.cost = torch.zeros(capacity, n_agents)  # [C, A] 1 if the agent's cost > 0
        self.done = torch.zeros(capacity)  # [C] 1 if the episode terminated
        self.size = 0
        self.ptr = 0

    def add(self, rows: dict[str, torch.Tensor]) -> None:
        n = rows["obs"].shape[0]
        for start in range(0, n, self.capacity):
            chunk = {k: v[start : start + self.capacity] for k, v in rows.items()}
            m = chunk["obs"].shape[0]
            idx = (self.ptr + torch.arange(m)) % self.capacity
            for name in _FIELDS:
                getattr(self, name)[idx] = chunk[name].to(getattr(self, name).dtype)
            self.ptr = (self.ptr + m) % self.capacity
            self.size = min(self.size + m, self.capacity)

    def latest(self, n: int) -> dict[str, torch.Tensor]:
        n = min(n, self.size)
        idx = (self.ptr - n + torch.arange(n)) % self.capacity
        return {name: getattr(self, name)[idx] for name in _FIELDS}

    def gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name)[idx] for name in _FIELDS}

    def state_dict(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name)[: self.size].clone() for name in _FIELDS},
            "size": self.size,
            "ptr": self.ptr,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"replay state holds {size} rows, capacity is {self.capacity}")
        for name in _FIELDS:
            getattr(self, name)[:size] = state[name]
        self.size = size
        self.ptr = int(state["ptr"])


class TransitionReplay:
    """Training and validation rings of real transitions (see the module docstring)."""

    def __init__(
        self,
        *,
        capacity: int,
        n_agents: int,
        obs_dim: int,
        valid_fraction: float,
        seed: int,
    ) -> None:
        """Allocate `capacity` rows split as valid_fraction : 1 - valid_fraction."""
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        if not 0.0 < valid_fraction < 1.0:
            raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
        self.n_agents = n_agents
        self.obs_dim = obs_dim
        self.valid_fraction = valid_fraction
        valid_capacity = min(capacity - 1, max(1, round(capacity * valid_fraction)))
        self.train = _Ring(capacity - valid_capacity, n_agents * obs_dim, n_agents)
        self.valid = _Ring(valid_capacity, n_agents * obs_dim, n_agents)
        self.generator = torch.Generator().manual_seed(seed)
        self.added_since_fit = 0

    def add(
        self,
        *,
        obs: torch.Tensor,
        action: torch.Tensor,
        next_obs: torch.Tensor,
        cost: torch.Tensor,
        done: torch.Tensor,
    ) -> None:
        """Add E transitions: obs/next_obs [E, A*D], action [E, A], cost [E, A], done [E]."""
        e = obs.shape[0]
        joint = self.n_agents * self.obs_dim
        expected = {
            "obs": (e, joint),
            "action": (e, self.n_agents),
            "next_obs": (e, joint),
            "cost": (e, self.n_agents),
            "done": (e,),
        }
        rows = {"obs": obs, "action": action, "next_obs": next_obs, "cost": cost, "done": done}
        for name, shape in expected.items():
            if tuple(rows[name].shape) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {tuple(rows[name].shape)}")
        to_valid = torch.rand(e, generator=self.generator) < self.valid_fraction
        if to_valid.any():
            self.valid.add({k: v[to_valid] for k, v in rows.items()})
        if (~to_valid).any():
            self.train.add({k: v[~to_valid] for k, v in rows.items()})
        self.added_since_fit += e

    def sample_train(self, shape: tuple[int, ...], generator: torch.Generator) -> dict:
        """Training rows at uniform random indices of the given shape (e.g. [members, batch])."""
        if self.train.size == 0:
            raise ValueError("the training replay is empty")
        idx = torch.randint(0, self.train.size, shape, generator=generator)
        return self.train.gather(idx)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue: both rings, the split generator, the counter."""
        return {
            "train": self.train.state_dict(),
            "valid": self.valid.state_dict(),
            "generator": self.generator.get_state(),
            "added_since_fit": self.added_since_fit,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.train.load_state_dict(state["train"])
        self.valid.load_state_dict(state["valid"])
        self.generator.set_state(state["generator"])
        self.added_since_fit = int(state["added_since_fit"])
