"""torch.vmap rules for the ops (torch.library.register_vmap), shared by their files.

Without a rule, vmap (and what torch.func builds on it: per-sample gradients as vmap(grad(f)), jacrev's batched
vector-Jacobian products) runs an op through PyTorch's fallback: once per sample, with a performance warning. The ops
take every leading dim of their row-shaped arguments as more rows, so most rules move the vmapped dim to the front
and call the op once (fold). A backward op's weight and bias gradients sum over rows, which under vmap must stay per
sample: the norms' rules take dx from the op and those sums from an fp32 expression of their own. What no rule
covers (a batched weight, as in vmap over an ensemble's parameters) runs once per sample here (loop), as the fallback
would, without its warning.

A rule is func(info, in_dims, *args) -> (outputs, out_dims) (torch.library.register_vmap); in_dims[i] is the vmapped
dim of args[i], or None where args[i] is not batched (or not a tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def front(t: torch.Tensor | None, bdim: int | None, batch: int) -> torch.Tensor | None:
    """t with its vmapped dim first; an unbatched t expanded (a view) to [batch, *t.shape]; None stays None."""
    if t is None:
        return None
    return t.movedim(bdim, 0) if bdim is not None else t.expand(batch, *t.shape)


def batched(in_dims: Sequence[int | None], idx: Sequence[int]) -> bool:
    """Whether any of the args at idx is batched (an arg left to its default is not)."""
    return any(i < len(in_dims) and in_dims[i] is not None for i in idx)


def loop(op: Callable, info, in_dims: Sequence[int | None], args: Sequence):
    """op once per sample, the outputs stacked along dim 0 (PyTorch's fallback, without its warning). An empty batch:
    the outputs' shapes from one sample of zeros."""
    dims = list(in_dims) + [None] * (len(args) - len(in_dims))  # (args left to their defaults are not batched)
    if info.batch_size == 0:
        zero = [a.new_zeros(a.movedim(d, 0).shape[1:]) if d is not None else a for a, d in zip(args, dims)]
        out = op(*zero)
        if isinstance(out, (tuple, list)):
            return tuple(o.new_empty((0, *o.shape)) for o in out), (0,) * len(out)
        return out.new_empty((0, *out.shape)), 0
    outs = [op(*[a.select(d, i) if d is not None else a for a, d in zip(args, dims)]) for i in range(info.batch_size)]
    if isinstance(outs[0], (tuple, list)):
        res = tuple(torch.stack(o) for o in zip(*outs))
        return res, (0,) * len(res)
    return torch.stack(outs), 0


def fold(op: Callable, info, in_dims: Sequence[int | None], args: Sequence, rows: Sequence[int],
         params: Sequence[int] = ()):
    """op once over the batch: the args at `rows` (row-shaped: x, grad, saved statistics) batch-first, unbatched ones
    expanded; the args at `params` (per-column: weight, bias, rope's tables) must be unbatched, else loop. Every
    output gets the batch dim first."""
    if batched(in_dims, params):
        return loop(op, info, in_dims, args)
    a = list(args)
    for i in rows:
        if i < len(a):
            a[i] = front(args[i], in_dims[i], info.batch_size)
    out = op(*a)
    return out, (0,) * len(out) if isinstance(out, (tuple, list)) else 0


def register_fold(name: str, rows: Sequence[int], params: Sequence[int] = ()) -> None:
    """Registers fold(rows, params) as myops::name's vmap rule."""
    op = getattr(torch.ops.myops, name).default

    def rule(info, in_dims, *args):
        return fold(op, info, in_dims, args, rows, params)

    torch.library.register_vmap(f"myops::{name}", rule)


def register_row_sums(name: str, rows: Sequence[int], sums: Callable, params: Sequence[int] = (),
                      flag: int | None = None) -> None:
    """Registers myops::name's rule for a backward op whose outputs after the first sum over rows (the weight and
    bias gradients), which vmap keeps per sample: the op once over the batch as fold's (with `flag`, the argument
    that asks for those sums, passed False), its first output (dx) kept; the sums from sums(a, dx) on the call's
    batch-first arguments a, or, where args[flag] is False, empty [batch, 0] ones as the op gives."""
    op = getattr(torch.ops.myops, name).default

    def rule(info, in_dims, *args):
        if batched(in_dims, params):
            return loop(op, info, in_dims, args)
        a = list(args)
        for i in rows:
            a[i] = front(args[i], in_dims[i], info.batch_size)
        if flag is not None:
            a[flag] = False
        out = op(*a)
        dx = out[0]
        if flag is None or args[flag]:
            rest = tuple(sums(a, dx))
        else:
            rest = tuple(dx.new_empty((info.batch_size, 0)) for _ in out[1:])
        return (dx, *rest), (0,) * len(out)

    torch.library.register_vmap(f"myops::{name}", rule)


def acc(t: torch.Tensor) -> torch.Tensor:
    """t in the ops' accumulation type: fp32, fp64 for fp64."""
    return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)


def row_sum(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-sample column sums of a batch-first [B, ..., N] tensor, in fp32 (fp64 for fp64), as `dtype`: [B, N]."""
    return acc(t).flatten(1, -2).sum(1).to(dtype) if t.dim() > 2 else t.to(dtype)
