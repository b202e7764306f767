"""Per-copy bookkeeping of the running episodes of a vector env, and their `EpisodeLog`s.

`EpisodeTracker.record` is called once per vector step with the step's result: it sums
returns, costs and shield interventions per copy, notes each episode's first violation, and
turns every episode that ends into an `EpisodeLog`. Its arrays are its whole state
(`state_dict`), so a resumed run continues the same episodes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from src.records import EpisodeLog

__all__ = ["EpisodeTracker"]


class EpisodeTracker:
    """Running sums of the episodes of `num_envs` copies with `n_agents` agents."""

    # Every array of the tracker's state: name -> (dtype, per-agent).
    ARRAYS: ClassVar[dict[str, tuple[type, bool]]] = {
        "step": (np.int64, False),
        "t_start": (np.int64, False),
        "returns": (np.float64, True),
        "cost": (np.float64, False),
        "violated": (bool, False),
        "first_violation": (np.int64, False),
        "interventions": (np.int64, False),
    }

    def __init__(self, *, num_envs: int, n_agents: int, env: str, algo: str, run: int) -> None:
        """Start every copy's first episode at global step `copy + 1` (steps are 1-based)."""
        self.num_envs, self.n_agents = num_envs, n_agents
        self.identity = {"env": env, "algo": algo, "run": run}
        self.finished = 0  # episodes finished so far (the next EpisodeLog's index)
        self.step = np.zeros(num_envs, dtype=np.int64)  # steps taken in the running episode
        self.t_start = np.arange(num_envs, dtype=np.int64) + 1
        self.returns = np.zeros((num_envs, n_agents), dtype=np.float64)
        self.cost = np.zeros(num_envs, dtype=np.float64)
        self.violated = np.zeros(num_envs, dtype=bool)
        self.first_violation = np.full(num_envs, -1, dtype=np.int64)
        self.interventions = np.zeros(num_envs, dtype=np.int64)

    @property
    def next_step(self) -> np.ndarray:
        """[E] 1-based index, within its episode, of the step the next actions take."""
        return self.step + 1

    def record(
        self, result: Any, intervened: np.ndarray, vector_step: int
    ) -> tuple[np.ndarray, list[EpisodeLog]]:
        """Add vector step `vector_step` (0-based); returns its first-violation flags and logs.

        `result` is the env's `StepResult`, `intervened` `[E, A]` the filter's flags. The first
        array is `[E]` bool: this step is its episode's first violation. Global step numbers
        are 1-based: step `(vector_step, copy)` is `vector_step * E + copy + 1`, so `t_end`
        strictly increases along the history.
        """
        e = self.num_envs
        self.step += 1
        self.returns += result.reward
        self.cost += result.cost.sum(axis=1)
        violation = (result.cost > 0).any(axis=1)
        first = violation & ~self.violated
        self.first_violation[first] = self.step[first]
        self.violated |= violation
        self.interventions += np.asarray(intervened).sum(axis=1)
        terminated = result.terminated.any(axis=1)
        done = terminated | result.truncated.any(axis=1)
        logs = []
        for copy in np.flatnonzero(done):
            logs.append(
                EpisodeLog(
                    **self.identity,
                    episode=self.finished,
                    env_copy=int(copy),
                    t_start=int(self.t_start[copy]),
                    t_end=vector_step * e + int(copy) + 1,
                    length=int(self.step[copy]),
                    team_return=float(self.returns[copy].sum()),
                    agent_returns=tuple(float(r) for r in self.returns[copy]),
                    cost=float(self.cost[copy]),
                    violated=bool(self.violated[copy]),
                    first_violation_step=int(self.first_violation[copy]),
                    truncated_by_cap=not bool(terminated[copy]),
                    shield_interventions=int(self.interventions[copy]),
                )
            )
            self.finished += 1
        if done.any():
            self.step[done] = 0
            self.t_start[done] = (vector_step + 1) * e + np.flatnonzero(done) + 1
            self.returns[done] = 0.0
            self.cost[done] = 0.0
            self.violated[done] = False
            self.first_violation[done] = -1
            self.interventions[done] = 0
        return first, logs

    def state_dict(self) -> dict[str, Any]:
        """Copies of every array (`ARRAYS`) and the finished-episode count."""
        return {
            "finished": self.finished,
            **{name: getattr(self, name).copy() for name in self.ARRAYS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, checking each array's shape."""
        self.finished = int(state["finished"])
        for name, (dtype, per_agent) in self.ARRAYS.items():
            shape = (self.num_envs, self.n_agents) if per_agent else (self.num_envs,)
            value = np.array(state[name], dtype=dtype)
            if value.shape != shape:
                raise ValueError(f"tracker state {name!r} has shape {value.shape}, not {shape}")
            setattr(self, name, value)
