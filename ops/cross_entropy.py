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
