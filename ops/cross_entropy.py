"""cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", check_target=True)
= F.cross_entropy(...) for logits [M, C] or [C] and int64 class indices; vocabularies of any size (256k and beyond).

check_target: a class index outside [0, C) that is not ignore_index raises a RuntimeError naming it. On the GPU a
small kernel checks the targets ahead of the forward kernel. Where the logits require grad (eager autograd), the
forward does not wait for it: backward reads the check (long done by then) and raises before it queues its kernels,
so the host keeps running ahead of the GPU; such a row's loss is NaN until then, and a graph freed without backward
raises nothing. Without grad (no_grad, inference, detached logits, inside a compiled graph) the host waits for the
check alone before the call returns, while the GPU goes on to the forward kernel. With check_target=False (and always
while a CUDA graph is being captured) nothing is checked: such a row's loss and gradient are NaN; no index is ever
read out of bounds.

The logits are read once in the forward pass and once in the backward pass, which writes the gradient in the
logits' dtype; the only other memory is O(M) (per-row losses, maxima and log-sum-exps). torch.ops.myops.cross_entropy
returns (loss, stats) with stats [*target.shape, 2] = per-row (max, log sum exp(x - max)); ops.cross_entropy returns
loss.
"""

import torch

from . import _vmap
from .rms_norm import stat_dtype

OP = torch.ops.myops.cross_entropy.default
REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", check_target: bool = True) -> torch.Tensor:
    """F.cross_entropy with class-index targets; differentiable in logits. check_target=False: no host wait, NaN for a
    row whose target is out of range (see the module docstring)."""
    return OP(logits, target, ignore_index, label_smoothing, reduction, check_target)[0]


def _check(logits, target, label_smoothing, reduction, op="cross_entropy"):
    torch._check(logits.dim() in (1, 2),
                 lambda: f"myops.{op}: logits must have shape [M, C] or [C], got {list(logits.shape)}")
    torch._check(target.dim() == logits.dim() - 1 and (target.dim() == 0 or target.shape[0] == logits.shape[0]),
                 lambda: f"myops.{op}: target must have shape {list(logits.shape[:-1])} (one class index per row "
                         f"of logits), got {list(target.shape)}")
    torch._check(reduction in REDUCTIONS,
                 lambda: f'myops.{op}: reduction must be "mean", "sum" or "none", got "{reduction}"')
    torch._check(0.0 <= label_smoothing <= 1.0, lambda: f"myops.{op}: label_smoothing must be in [0, 1]")


@torch.library.register_fake("myops::cross_entropy")
def _(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", check_target=True):
    _check(logits, target, label_smoothing, reduction)
    loss = logits.new_empty(target.shape if reduction == "none" else ())
    return loss, logits.new_empty((*target.shape, 2), dtype=stat_dtype(logits))


@torch.library.register_fake("myops::cross_entropy_backward")
def _(grad, logits, target, stats, ignore_index, label_smoothing, reduction):
    return logits.new_empty(logits.shape)


# Autograd: in C++ (csrc/ops/cross_entropy.cpp, CrossEntropyFunction), where its host time is a fraction of a
# Python autograd.Function's, and where the forward hands its target check to backward (see the docstring).


BACKWARD = torch.ops.myops.cross_entropy_backward.default


def _folds(logits, bdim, reduction) -> bool:
    """Whether vmap's rules take the batch's rows in one call (else the op per sample raises its own error)."""
    return reduction in REDUCTIONS and logits.dim() - (bdim is not None) in (1, 2) and logits.shape[-1] > 0


def _row_losses(logits, target, loss, stats, ignore_index):
    """The rows' losses (no label smoothing) in fp32 (fp64 for fp64) from stats: max + log-sum-exp - x[target], 0
    where the target is ignore_index, NaN where "none" gave NaN (a target out of range, unchecked)."""
    x = logits.reshape(-1, logits.shape[-1])
    t = target.reshape(-1)
    st = stats.reshape(-1, 2)
    xt = x.gather(1, t.clamp(0, max(x.shape[1] - 1, 0)).unsqueeze(1)).squeeze(1).to(st.dtype)
    rows = torch.where(t == ignore_index, 0.0, st[:, 0] + st[:, 1] - xt)
    return torch.where(loss.isnan(), float("nan"), rows)


@torch.library.register_vmap("myops::cross_entropy")
def _(info, in_dims, logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", check_target=True):
    """The batch's rows in one call with reduction "none", then each sample's sum of its rows' losses in fp32 (its
    "mean" over the rows whose target is not ignore_index: NaN where none is, 0 / 0 as F.cross_entropy's). The rows'
    losses are taken unrounded from stats, max + log-sum-exp - x[target] (only label smoothing takes the "none"
    output, rounded to the logits' dtype: 16-bit logits then round each row's loss before the sum, where the op
    called per sample rounds the sample's loss alone)."""
    if not _folds(logits, in_dims[0], reduction):
        return _vmap.loop(lambda lg, t: OP(lg, t, ignore_index, label_smoothing, reduction, check_target), info,
                          in_dims[:2], (logits, target))
    b = info.batch_size
    lg, t = _vmap.front(logits, in_dims[0], b), _vmap.front(target, in_dims[1], b)
    m = lg.shape[1] if lg.dim() == 3 else 1  # a sample's rows
    loss, stats = OP(lg.reshape(-1, lg.shape[-1]), t.reshape(-1), ignore_index, label_smoothing, "none",
                     check_target)
    if reduction == "none":
        loss = loss.view(t.shape)
    else:
        rows = _row_losses(lg, t, loss, stats, ignore_index) if label_smoothing == 0 else _vmap.acc(loss)
        total = rows.view(b, m).sum(1)
        if reduction == "mean":
            total = total / (t.reshape(b, m) != ignore_index).sum(1)
        loss = total.to(loss.dtype)
    return (loss, stats.view(*t.shape, 2)), (0, 0)


@torch.library.register_vmap("myops::cross_entropy_backward")
def _(info, in_dims, grad, logits, target, stats, ignore_index, label_smoothing, reduction):
    """As the forward's rule: one call with reduction "none", each row's gradient factor its sample's (divided by the
    sample's count of rows whose target is not ignore_index for "mean"; its ignored rows get 0 whatever the factor)."""
    args = (grad, logits, target, stats, ignore_index, label_smoothing, reduction)
    if not _folds(logits, in_dims[1], reduction):
        return _vmap.loop(BACKWARD, info, in_dims, args)
    b = info.batch_size
    g, lg, t, st = (_vmap.front(x, d, b) for x, d in zip(args[:4], in_dims))
    m = lg.shape[1] if lg.dim() == 3 else 1
    if reduction != "none":
        g = _vmap.acc(g)
        if reduction == "mean":
            g = g / (t.reshape(b, m) != ignore_index).sum(1)
        g = g.unsqueeze(1).expand(b, m)
    dl = BACKWARD(g.reshape(-1), lg.reshape(-1, lg.shape[-1]), t.reshape(-1), st.reshape(-1, 2), ignore_index,
                  label_smoothing, "none")
    return dl.view(lg.shape), 0
