"""An algorithm given by import path that passes every check but never steps its env: its
updates happen, its checkpoints are written, and it finishes no training episode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from src.algos.api import (
    POLICY_CONFIG,
    EpisodeLog,
    PolicyActor,
    RunConfig,
    TrainingCallback,
    VectorEnv,
    update_row,
)


class Idle:
    """Counts its updates and learns nothing: no env step, no episode."""

    def __init__(self, config: RunConfig, env: VectorEnv) -> None:
        self.config = config
        self.num_updates = config.ppo.num_updates
        self.steps_per_update = config.ppo.steps_per_update
        self.update = 0
        self.history: list[EpisodeLog] = []
        self.updates: list[dict[str, Any]] = []

    def train(self, *, callbacks: Sequence[TrainingCallback] = (), progress: bool = True) -> None:
        while self.update < self.num_updates:
            self.updates.append(
                update_row(update=self.update, global_step=0, wall_time=0.0, episodes=[])
            )
            self.update += 1
            for callback in callbacks:
                callback.on_update_end(self)

    def state(self) -> dict[str, Any]:
        return {"update": self.update, "updates": list(self.updates)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.update, self.updates = int(state["update"]), list(state["updates"])

    def policy_state(self) -> dict[str, Any]:
        return {POLICY_CONFIG: self.config.to_dict()}

    @classmethod
    def load_actor(
        cls, policy_state: dict[str, Any], config: RunConfig, *, shielded: bool = True
    ) -> PolicyActor:
        raise NotImplementedError("an idle run has no policy")
