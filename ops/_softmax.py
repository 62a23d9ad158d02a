"""What softmax and log_softmax share on the Python side."""

import torch


def check_dim(op: str, x: torch.Tensor, dim: int) -> int:
    """dim wrapped into [0, max(x.dim(), 1)); a RuntimeError naming op otherwise."""
    lim = max(x.dim(), 1)
    if not -lim <= dim < lim:
        raise RuntimeError(f"myops.{op}: dim {dim} is out of range for a tensor with {x.dim()} dimensions")
    return dim % lim


def moved_empty(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The output the kernels produce: allocated with dim last, then moved back into place."""
    if x.dim() == 0:
        return x.new_empty(())
    return x.movedim(dim, -1).new_empty(x.movedim(dim, -1).shape).movedim(-1, dim)
