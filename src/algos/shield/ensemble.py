"""Building blocks of the shield's learned models: stacked member MLPs and their fitting.

An ensemble of M MLPs keeps each layer's weights as one [M, fan_in, fan_out] tensor (and its
biases as [M, 1, fan_out]), so a member-major batch [M, N, ...] runs through every member with
one `torch.baddbmm` per layer; row (m, n) is evaluated by member m.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = [
    "every_member",
    "fit_normalisation",
    "fit_steps",
    "init_stack",
    "run_stacked",
    "stacked_layers",
]


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
        x = torch.baddbmm(b, x, w)
        if i < last:
            x = torch.relu_(x) if not x.requires_grad else torch.relu(x)
    return x


def every_member(values: torch.Tensor, members: int) -> torch.Tensor:
    """The same rows [N, ...] for each of M members: a member-major view [M, N, ...]."""
    return values.unsqueeze(0).expand(members, *values.shape)


def fit_normalisation(mean: torch.Tensor, std: torch.Tensor, values: torch.Tensor) -> None:
    """Set the `mean` and `std` buffers to those of the rows of `values` [N, F].

    A feature that never varies (e.g. a fixed map) keeps scale 1 instead of dividing by 0.
    """
    spread = values.std(dim=0, unbiased=False)
    mean.copy_(values.mean(dim=0))
    std.copy_(torch.where(spread > 1e-6, spread, torch.ones_like(spread)))


def fit_steps(n_samples: int, batch_size: int) -> int:
    """Minibatch steps of a fit on about `n_samples` rows: at least one."""
    return max(1, math.ceil(n_samples / batch_size))
