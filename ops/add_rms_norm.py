"""add_rms_norm(x, residual, weight=None, eps=1e-6) -> (rms_norm(x + residual, weight, eps), x + residual), in one
pass over memory (the pre-norm residual stream of a transformer block).

torch.ops.myops.add_rms_norm returns (y, s, rstd); ops.add_rms_norm returns (y, s).
"""

import torch

from .rms_norm import check_weight, stat_dtype

OP = torch.ops.myops.add_rms_norm.default
BACKWARD = torch.ops.myops.add_rms_norm_backward.default


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                 eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); differentiable in x, residual and weight."""
    y, s, _ = OP(x, residual, weight, eps)
    return y, s


@torch.library.register_fake("myops::add_rms_norm")
def _(x, residual, weight=None, eps=1e-6):
    check_weight("add_rms_norm", x, weight)
    torch._check(residual.shape == x.shape,
                 lambda: f"myops.add_rms_norm: residual must have the same shape as x {list(x.shape)}, "
                         f"got {list(residual.shape)}")
    return x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=stat_dtype(x))


@torch.library.register_fake("myops::add_rms_norm_backward")
def _(grad_y, grad_s, s, rstd, weight, weight_grad, eps):
    dw = s.new_empty((s.shape[-1],) if weight is not None and weight_grad else (0,))
    return s.new_empty(s.shape), dw


def _setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[2])
    # unused outputs' gradients stay None: no zero-filled rstd gradient, and no [M, N] zeros for grad_s when only y
    # is used (the kernel then reads no grad_s)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(output[1], output[2], inputs[2])
    ctx.eps = inputs[3]


def _backward(ctx, grad_y, grad_s, _grad_rstd):
    s, rstd, weight = ctx.saved_tensors
    want_w = weight is not None and ctx.needs_input_grad[2]
    if grad_y is None:  # only s was used (or neither): the norm contributes nothing
        return grad_s, grad_s, None, None
    ds, dw = BACKWARD(grad_y, grad_s, s, rstd, weight, want_w, ctx.eps)
    return ds, ds, (dw if want_w else None), None


torch.library.register_autograd("myops::add_rms_norm", _backward, setup_context=_setup)
