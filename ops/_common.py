"""Helpers shared by the Python side of the ops (fake impls and autograd)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def reduced_dims(ndim: int, dim: Sequence[int] | None) -> list[int]:
    """The dims torch.sum(x, dim) reduces, wrapped and sorted (None or [] means all)."""
    if not dim:
        return list(range(ndim))
    lim = max(ndim, 1)
    out = set()
    for d in dim:
        if not -lim <= d < lim:
            raise RuntimeError(f"myops.sum: dim {d} is out of range for x with {ndim} dimensions")
        w = d % lim
        if w in out:
            raise RuntimeError(f"myops.sum: dim {w} appears more than once in dim")
        out.add(w)
    return sorted(out) if ndim > 0 else []
