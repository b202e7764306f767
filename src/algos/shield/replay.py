"""Replay of real transitions for the shield's models, with a held-out validation part.

Each transition goes, with probability `valid_fraction` (drawn from the replay's own seeded
generator), to the validation ring, otherwise to the training ring. The world model trains on
(joint obs, joint action) -> (next joint obs, per-agent cost, done); the opponent model on the
per-agent (obs, action) pairs contained in the same rows, so one replay serves both. A joint
action is A ints (Discrete), or [A, action_dim] floats (Box: the actions the env received).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Moments", "TransitionReplay"]

_FIELDS = ("obs", "action", "next_obs", "cost", "done")
# Features whose running moments a ring keeps (the models' normalisations): "delta" is
# next_obs - obs.
_MOMENTS = ("obs", "next_obs", "delta")


@dataclass(frozen=True)
class Moments:
    """Count, sum and sum of squares (float64) of the rows of some features [F]."""

    count: int
    total: torch.Tensor
    squares: torch.Tensor

    def __add__(self, other: Moments) -> Moments:
        """The moments of both sets of rows together."""
        return Moments(
            self.count + other.count, self.total + other.total, self.squares + other.squares
        )

    def pooled(self, width: int) -> Moments:
        """Consecutive blocks of `width` features as rows of one block (e.g. each agent's
        slice of the joint observation as a row of one agent's observation)."""
        blocks = self.total.numel() // width
        return Moments(
            self.count * blocks,
            self.total.view(blocks, width).sum(dim=0),
            self.squares.view(blocks, width).sum(dim=0),
        )

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (population) standard deviation per feature, float32; a feature that never
        varies (e.g. a fixed map) gets scale 1 instead of 0."""
        if self.count == 0:
            raise ValueError("no rows to take moments of")
        mean = self.total / self.count
        variance = (self.squares / self.count - mean.square()).clamp(min=0.0)
        # NumPy's square root is IEEE's, the same on every CPU (torch's goes to MKL's vector
        # maths, src.numerics).
        spread = torch.from_numpy(np.sqrt(variance.numpy()))
        std = torch.where(spread > 1e-6, spread, torch.ones_like(spread))
        return mean.float(), std.float()


class _Ring:
    """Fixed-capacity ring of transitions stored as preallocated tensors."""

    def __init__(
        self, capacity: int, joint_dim: int, n_agents: int, action_dim: int | None = None
    ) -> None:
        self.capacity = capacity
        self.obs = torch.zeros(capacity, joint_dim)  # [C, A*D]
        if action_dim is None:
            self.action = torch.zeros(capacity, n_agents, dtype=torch.int64)  # [C, A]
        else:
            self.action = torch.zeros(capacity, n_agents, action_dim)  # [C, A, k] Box actions
        self.next_obs = torch.zeros(capacity, joint_dim)  # [C, A*D]
        self.cost = torch.zeros(capacity, n_agents)  # [C, A] 1 if the agent's cost > 0
        self.done = torch.zeros(capacity)  # [C] 1 if the episode terminated
        self.size = 0
        self.ptr = 0
        # Running sums over the rows held, per feature of _MOMENTS: [2, A*D] float64.
        self._sums = {name: torch.zeros(2, joint_dim, dtype=torch.float64) for name in _MOMENTS}

    def _features(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        obs, next_obs = rows["obs"].double(), rows["next_obs"].double()
        return {"obs": obs, "next_obs": next_obs, "delta": next_obs - obs}

    def _count(self, rows: dict[str, torch.Tensor], sign: float) -> None:
        for name, values in self._features(rows).items():
            self._sums[name][0].add_(values.sum(dim=0), alpha=sign)
            self._sums[name][1].add_(values.square().sum(dim=0), alpha=sign)

    def add(self, rows: dict[str, torch.Tensor]) -> None:
        n = rows["obs"].shape[0]
        for start in range(0, n, self.capacity):
            chunk = {k: v[start : start + self.capacity] for k, v in rows.items()}
            m = chunk["obs"].shape[0]
            idx = (self.ptr + torch.arange(m)) % self.capacity
            # Rows [0, size) hold transitions: those about to be overwritten leave the sums.
            evicted = idx[idx < self.size]
            if len(evicted):
                self._count(self.gather(evicted), -1.0)
            for name in _FIELDS:
                getattr(self, name)[idx] = chunk[name].to(getattr(self, name).dtype)
            self._count(chunk, 1.0)
            self.ptr = (self.ptr + m) % self.capacity
            self.size = min(self.size + m, self.capacity)

    def moments(self, name: str) -> Moments:
        """The moments of feature `name` ("obs", "next_obs" or "delta" = next_obs - obs) over
        the rows held, kept as rows come and go (no pass over the ring)."""
        total, squares = self._sums[name]
        return Moments(self.size, total.clone(), squares.clone())

    def latest(self, n: int) -> dict[str, torch.Tensor]:
        n = min(n, self.size)
        return self.gather((self.ptr - n + torch.arange(n)) % self.capacity)

    def gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows at `idx` (any shape S) of every field: [*S, ...] each (`index_select` on
        the flat indices: a few times faster than indexing with an S-shaped tensor)."""
        flat = idx.reshape(-1)
        rows = {}
        for name in _FIELDS:
            field = getattr(self, name)
            rows[name] = field.index_select(0, flat).view(*idx.shape, *field.shape[1:])
        return rows

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
        for sums in self._sums.values():
            sums.zero_()
        if size:
            self._count(self.gather(torch.arange(size)), 1.0)


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
        action_dim: int | None = None,
    ) -> None:
        """Allocate `capacity` rows split as valid_fraction : 1 - valid_fraction; joint actions
        of A ints, or of [A, `action_dim`] floats (Box actions)."""
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        if not 0.0 < valid_fraction < 1.0:
            raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
        self.n_agents = n_agents
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.valid_fraction = valid_fraction
        valid_capacity = min(capacity - 1, max(1, round(capacity * valid_fraction)))
        joint = n_agents * obs_dim
        self.train = _Ring(capacity - valid_capacity, joint, n_agents, action_dim)
        self.valid = _Ring(valid_capacity, joint, n_agents, action_dim)
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
        """Add E transitions: obs/next_obs [E, A*D], action [E, A] (Box: [E, A, action_dim]),
        cost [E, A], done [E]."""
        e = obs.shape[0]
        joint = self.n_agents * self.obs_dim
        box = () if self.action_dim is None else (self.action_dim,)
        expected = {
            "obs": (e, joint),
            "action": (e, self.n_agents, *box),
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
