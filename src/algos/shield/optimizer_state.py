"""Checkpoint hooks shared by the shield's models, which train with optimizers of their own."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["OptimizerState"]


class OptimizerState:
    """Checkpoint hooks of a model trained by its own `self.optimizer`.

    The parameters travel in the module's `state_dict`; the optimizer's moments travel here,
    so a resumed run continues the same Adam trajectory bit for bit.
    """

    optimizer: torch.optim.Optimizer

    def extra_state(self) -> dict[str, Any]:
        """Optimizer state (the parameters and buffers are in `state_dict`)."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""
        self.optimizer.load_state_dict(state["optimizer"])
