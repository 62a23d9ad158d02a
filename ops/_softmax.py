"""What softmax and log_softmax share on the Python side: everything but their names."""

import torch


def check_dim(op: str, x: torch.Tensor | int, dim: int) -> int:
    """dim wrapped into [0, max(ndim, 1)) for x (or x dims); a RuntimeError naming op otherwise."""
    ndim = x if isinstance(x, int) else x.dim()
    lim = max(ndim, 1)
    if not -lim <= dim < lim:
        raise RuntimeError(f"myops.{op}: dim {dim} is out of range for a tensor with {ndim} dimensions")
    return dim % lim


def moved_empty(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The output the kernels produce: on the CPU laid out as x (empty_like, eager's layout); elsewhere (CUDA)
    allocated with dim last, then moved back into place."""
    if x.dim() == 0:
        return x.new_empty(())
    if x.device.type == "cpu":
        return torch.empty_like(x)
    return x.movedim(dim, -1).new_empty(x.movedim(dim, -1).shape).movedim(-1, dim)


def define(name: str, expr: str):
    """Registers the fake implementations of myops::<name> (softmax or log_softmax) and returns the Python
    function."""
    op = getattr(torch.ops.myops, name).default

    def fn(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return op(x, dim)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{expr} in one read and one write of x; differentiable."

    torch.library.register_fake(f"myops::{name}")(lambda x, dim=-1: moved_empty(x, check_dim(name, x, dim)))
    torch.library.register_fake(f"myops::{name}_backward")(
        lambda grad, y, dim: moved_empty(y, check_dim(f"{name}_backward", y, dim)))
    return fn
