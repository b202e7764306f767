"""IPPO that learns from the reward minus a fixed multiple of the safety cost."""

from typing import Any

import numpy as np

from src.algos.ippo import IPPO


class PenalisedIPPO(IPPO):
    """IPPO learning from reward - PENALTY * cost (a fixed Lagrange multiplier)."""

    constrained = True  # it uses the cost in training
    PENALTY = 2.0

    def observe(self, obs: np.ndarray, executed: np.ndarray, result: Any) -> None:
        self._cost = result.cost  # [E, A] costs of the step whose reward comes next

    def shaped_reward(self, reward: np.ndarray, intervened: np.ndarray) -> np.ndarray:
        return reward - self.PENALTY * self._cost
