"""Small numerical helpers that keep the shield's models arithmetic-bound.

The shield's models evaluate thousands of rows per call. Two things would otherwise
cost as much as the matmuls themselves: fresh multi-megabyte tensors on every layer (each one
page-faults its memory in) and `torch.softmax` over a short last dimension (a few actions),
which CPU torch handles several times slower than the equivalent elementwise ops. `Workspace`
reuses buffers across calls (layers write with `out=` and activate in place); `softmax_last`
is softmax from elementwise ops.
"""

from __future__ import annotations

import math

import torch

__all__ = ["Workspace", "softmax_last"]


class Workspace:
    """Named scratch buffers reused across calls; a view of the right shape is handed out.

    A buffer grows when a larger shape is requested and is never shrunk. A view is valid until
    the same name is requested again. Buffers made in inference mode must only be used there.
    """

    def __init__(self) -> None:
        """Start without buffers."""
        self._buffers: dict[str, torch.Tensor] = {}
        # Views handed out, per (name, shape, dtype): the hot loop asks for the same few
        # shapes many times, and building a view costs more than looking one up.
        self._views: dict[tuple[str, tuple[int, ...], torch.dtype], torch.Tensor] = {}

    def get(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """A contiguous tensor of `shape` backed by the buffer `name` (contents undefined)."""
        key = (name, shape, dtype)
        view = self._views.get(key)
        if view is not None:
            return view
        numel = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < numel or buffer.dtype != dtype:
            buffer = torch.empty(numel, dtype=dtype)
            self._buffers[name] = buffer
            # Views of the replaced buffer must not be handed out again.
            self._views = {k: v for k, v in self._views.items() if k[0] != name}
        view = buffer[:numel].view(shape)
        self._views[key] = view
        return view

    def clear(self) -> None:
        """Drop every buffer (frees the memory)."""
        self._buffers.clear()
        self._views.clear()


def softmax_last(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension, as a fresh tensor (max-shifted, so it cannot overflow).

    >>> softmax_last(torch.tensor([[0.0, 0.0], [1000.0, 0.0]]))
    tensor([[0.5000, 0.5000],
            [1.0000, 0.0000]])
    """
    e = (logits - logits.amax(dim=-1, keepdim=True)).exp_()
    return e.div_(e.sum(dim=-1, keepdim=True))
