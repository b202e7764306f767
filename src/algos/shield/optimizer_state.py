"""What the shield's models share as they train with optimizers of their own: the step and the
checkpoint hooks."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["OptimizerState"]


class OptimizerState:
    """A model trained by its own `self.optimizer`: its step and checkpoint hooks.

    The parameters travel in the module's `state_dict`; the optimizer's moments travel here,
    so a resumed run continues the same Adam trajectory bit for bit.
    """

    optimizer: torch.optim.Optimizer

    def optimizer_step(self, loss: torch.Tensor) -> None:
        """One step of `self.optimizer` down the gradient of `loss` (gradients cleared first)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def extra_state(self) -> dict[str, Any]:
        """Optimizer state (the parameters and buffers are in `state_dict`)."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""
        self.optimizer.load_state_dict(state["optimizer"])
