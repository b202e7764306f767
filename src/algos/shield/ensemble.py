"""Building blocks of the shield's learned models: stacked member MLPs and their fitting.

An ensemble of M MLPs keeps each layer's weights as one [M, fan_in, fan_out] tensor (and its
biases as [M, 1, fan_out]), so a member-major batch [M, N, ...] runs through every member with
one `numerics.baddbmm` per layer; row (m, n) is evaluated by member m.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from src import numerics
from src.algos.shield.replay import Moments

__all__ = [
    "Versioned",
    "every_member",
    "fit_normalisation",
    "fit_steps",
    "fold_normalisation",
    "init_stack",
    "run_stacked",
    "selected_rows",
    "stacked_layers",
]


class Versioned:
    """A module whose derived inference tensors are cached until it changes (`version`)."""

    def version(self) -> tuple[int, ...]:
        """The version counters of the parameters and buffers: optimiser steps, fits and
        `load_state_dict` all bump them, so an unchanged tuple means an unchanged model (the
        key of caches derived from it)."""
        tracked = self.__dict__.get("_version_tracked")
        if tracked is None:
            module: nn.Module = self  # type: ignore[assignment]
            tracked = (*module.parameters(), *module.buffers())
            self.__dict__["_version_tracked"] = tracked
        return tuple(t._version for t in tracked)


def init_stack(
    members: int, fan_in: int, fan_out: int, generator: torch.Generator
) -> tuple[nn.Parameter, nn.Parameter]:
    """nn.Linear's default init for M stacked layers, from an explicit generator (determinism)."""
    bound = 1.0 / math.sqrt(fan_in)
    weight = (torch.rand(members, fan_in, fan_out, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(members, 1, fan_out, generator=generator) * 2 - 1) * bound
    return nn.Parameter(weight), nn.Parameter(bias)


def stacked_layers(
    members: int, sizes: Sequence[int], generator: torch.Generator
) -> tuple[nn.ParameterList, nn.ParameterList]:
    """The weights and biases of M MLPs with layer widths `sizes` (input first), drawn layer by
    layer from `generator` with `init_stack`."""
    weights = nn.ParameterList()
    biases = nn.ParameterList()
    for fan_in, fan_out in itertools.pairwise(sizes):
        w, b = init_stack(members, fan_in, fan_out, generator)
        weights.append(w)
        biases.append(b)
    return weights, biases


def run_stacked(
    x: torch.Tensor, weights: nn.ParameterList, biases: nn.ParameterList
) -> torch.Tensor:
    """x [M, N, fan_in] through the stacked layers, ReLU between them -> [M, N, fan_out].

    The ReLU works in place when no gradient is tracked through x (same values, no copy).
    """
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        x = numerics.baddbmm(b, x, w)
        if i < last:
            x = torch.relu_(x) if not x.requires_grad else torch.relu(x)
    return x


def selected_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per member, the sum of the rows of its `table` [M, R, H] that `index` [M, ..., P] picks:
    [M, ..., H]. A one-hot input times a first layer is this sum of the layer's rows, without
    building the one-hot or multiplying by its zeros."""
    m, r, h = table.shape
    flat = index + (torch.arange(m) * r).view(m, *([1] * (index.dim() - 1)))
    picked = F.embedding_bag(flat.reshape(-1, index.shape[-1]), table.reshape(m * r, h), mode="sum")
    return picked.view(*index.shape[:-1], h)


def selected_rows_and_state(
    table: torch.Tensor, index: torch.Tensor, states: torch.Tensor, state_row: torch.Tensor
) -> torch.Tensor:
    """`selected_rows(table, index)` [M, ..., H] plus, per member, the row of `states`
    [M, S, H] that `state_row` [M, ...] names: both in one pass over the rows (the state's
    row is added last, so the sums are those of adding it to `selected_rows`' result).

    `index` and `state_row` may have 1 for M (the same for every member) and broadcast
    against each other; the rows' indices are written once, into one buffer."""
    m, r, h = table.shape
    width = r + states.shape[1]
    combined = torch.cat([table, states], dim=1).view(m * width, h)
    p = index.shape[-1]
    shape = (m, *_broadcast(index.shape[1:-1], state_row.shape[1:]))
    member = (torch.arange(m) * width).view(m, *([1] * (len(shape) - 1)))
    flat = torch.empty(*shape, p + 1, dtype=torch.int64)
    index = index.expand(index.shape[0], *shape[1:], p)
    state_row = (state_row + r).expand(state_row.shape[0], *shape[1:])
    torch.add(index, member.unsqueeze(-1), out=flat[..., :p])
    torch.add(state_row, member, out=flat[..., p])
    picked = F.embedding_bag(flat.view(-1, p + 1), combined, mode="sum")
    return picked.view(*shape, h)


def _broadcast(first: Sequence[int], second: Sequence[int]) -> tuple[int, ...]:
    """The shape two shapes broadcast to (without `torch.broadcast_shapes`' cost per call)."""
    n = max(len(first), len(second))
    padded = [(1,) * (n - len(shape)) + tuple(shape) for shape in (first, second)]
    return tuple(max(a, b) for a, b in zip(*padded, strict=True))


def rows_of_states(values: torch.Tensor, state_index: torch.Tensor) -> torch.Tensor:
    """Per member, the rows of `values` [M, S, ...] that `state_index` names: [P] (the same
    states for every member) or [M, P] (each member its own) -> [M, P, ...]."""
    if state_index.dim() == 1:
        return values[:, state_index]
    return values[torch.arange(values.shape[0]).unsqueeze(1), state_index]


def every_member(values: torch.Tensor, members: int) -> torch.Tensor:
    """The same rows [N, ...] for each of M members: a member-major view [M, N, ...]."""
    return values.unsqueeze(0).expand(members, *values.shape)


def fit_normalisation(mean: torch.Tensor, std: torch.Tensor, moments: Moments) -> None:
    """Set the `mean` and `std` buffers to those of the rows `moments` describes
    (`Moments.mean_std`: a feature that never varies keeps scale 1)."""
    m, s = moments.mean_std()
    mean.copy_(m)
    std.copy_(s)


def fold_normalisation(
    weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stacked layer (weight [M, F, H], bias [M, 1, H]) whose first D = len(mean) inputs are
    normalised, ((x - mean) / std) W + b, as the same layer on the raw inputs:
    x (W / std) + (b - (mean / std) W), the first D rows of W divided by std (for inference:
    one pass over the rows saved per call)."""
    d = mean.shape[0]
    folded = weight.clone()
    folded[:, :d] /= std[:, None]
    return folded, bias - ((mean / std) @ weight[:, :d]).unsqueeze(1)


def fit_steps(n_samples: int, batch_size: int) -> int:
    """Minibatch steps of a fit on about `n_samples` rows: at least one."""
    return max(1, math.ceil(n_samples / batch_size))
