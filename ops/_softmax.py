"""What softmax and log_softmax share on the Python side: everything but their names."""

import torch

from . import _vmap


def check_dim(op: str, x: torch.Tensor | int, dim: int) -> int:
    """dim wrapped into [0, max(ndim, 1)) for x (or x dims); a RuntimeError naming op otherwise."""
    ndim = x if isinstance(x, int) else x.dim()
    lim = max(ndim, 1)
    if not -lim <= dim < lim:
        raise RuntimeError(f"myops.{op}: dim {dim} is out of range for a tensor with {ndim} dimensions")
    return dim % lim


def moved_empty(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The output the kernels produce: allocated with dim last, then moved back into place."""
    if x.dim() == 0:
        return x.new_empty(())
    return x.movedim(dim, -1).new_empty(x.movedim(dim, -1).shape).movedim(-1, dim)


def define(name: str, expr: str):
    """Registers the fake implementations, autograd and vmap rules of myops::<name> (softmax or log_softmax) and
    returns the Python function."""
    op = getattr(torch.ops.myops, name).default

    def fn(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return op(x, dim)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{expr} in one read and one write of x; differentiable."

    torch.library.register_fake(f"myops::{name}")(lambda x, dim=-1: moved_empty(x, check_dim(name, x, dim)))
    torch.library.register_fake(f"myops::{name}_backward")(
        lambda grad, y, dim: moved_empty(y, check_dim(f"{name}_backward", y, dim)))
    backward = getattr(torch.ops.myops, f"{name}_backward").default

    # vmap: the sample's dim (checked as the op checks it) one further on, past the batch; a 0-d sample per sample
    @torch.library.register_vmap(f"myops::{name}")
    def _(info, in_dims, x, dim=-1):
        n = x.dim() - (in_dims[0] is not None)
        if n == 0:
            return _vmap.loop(lambda t: op(t, dim), info, in_dims[:1], (x,))
        return op(_vmap.front(x, in_dims[0], info.batch_size), check_dim(name, n, dim) + 1), 0

    @torch.library.register_vmap(f"myops::{name}_backward")
    def _(info, in_dims, grad, y, dim):
        n = y.dim() - (in_dims[1] is not None)
        if n == 0:
            return _vmap.loop(lambda g, t: backward(g, t, dim), info, in_dims[:2], (grad, y))
        d = check_dim(f"{name}_backward", n, dim) + 1
        b = info.batch_size
        return backward(_vmap.front(grad, in_dims[0], b), _vmap.front(y, in_dims[1], b), d), 0

    return fn
