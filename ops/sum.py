"""sum(x, dim=None, keepdim=False) = x.sum(dim, keepdim) for float x, accumulated in fp32 (fp64 for fp64)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._common import reduced_dims

OP = torch.ops.myops.sum.default


def sum(x: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> torch.Tensor:  # noqa: A001
    """x.sum(dim, keepdim): dim None or [] reduces every dim. Differentiable."""
    if isinstance(dim, int):
        dim = [dim]
    return OP(x, None if dim is None else list(dim), keepdim)


@torch.library.register_fake("myops::sum")
def _(x, dim=None, keepdim=False):
    red = set(reduced_dims(x.dim(), dim))
    shape = [1 if d in red else s for d, s in enumerate(x.shape) if keepdim or d not in red]
    return x.new_empty(shape)
