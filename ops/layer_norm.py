"""layer_norm(x, weight=None, bias=None, eps=1e-5) = F.layer_norm(x, x.shape[-1:], weight, bias, eps), computed in
fp32 (fp64 for fp64).

torch.ops.myops.layer_norm returns (y, mean, rstd) like aten.native_layer_norm; ops.layer_norm returns y.
"""

import torch

from .rms_norm import stat_dtype

OP = torch.ops.myops.layer_norm.default
BACKWARD = torch.ops.myops.layer_norm_backward.default


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """Layer norm over the last dim; differentiable in x, weight and bias."""
    return OP(x, weight, bias, eps)[0]


def _check_param(x, t, name):
    if t is not None:
        torch._check(t.dim() == 1 and t.shape[0] == x.shape[-1],
                     lambda: f"myops.layer_norm: {name} must have shape [{x.shape[-1]}] (the last dimension of x), "
                             f"got {list(t.shape)}")


@torch.library.register_fake("myops::layer_norm")
def _(x, weight=None, bias=None, eps=1e-5):
    torch._check(x.dim() >= 1, lambda: "myops.layer_norm: x must have at least 1 dimension, got a 0-d tensor")
    _check_param(x, weight, "weight")
    _check_param(x, bias, "bias")
    stats = x.shape[:-1]
    return x.new_empty(x.shape), x.new_empty(stats, dtype=stat_dtype(x)), x.new_empty(stats, dtype=stat_dtype(x))


@torch.library.register_fake("myops::layer_norm_backward")
def _(grad, x, mean, rstd, weight, params_grad, eps):
    n = x.shape[-1] if params_grad else 0
    return x.new_empty(x.shape), x.new_empty((n,)), x.new_empty((n,))


def _setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.set_materialize_grads(False)  # no zero-filled gradients for mean and rstd on every backward
    ctx.save_for_backward(inputs[0], output[1], output[2], inputs[1])
    ctx.has_bias = inputs[2] is not None
    ctx.eps = inputs[3]


def _backward(ctx, grad, _grad_mean, _grad_rstd):
    if grad is None:  # (gradients are not materialized: y unused)
        return None, None, None, None
    x, mean, rstd, weight = ctx.saved_tensors
    want_w = weight is not None and ctx.needs_input_grad[1]
    want_b = ctx.has_bias and ctx.needs_input_grad[2]
    dx, dw, db = BACKWARD(grad, x, mean, rstd, weight, want_w or want_b, ctx.eps)
    return dx, (dw if want_w else None), (db if want_b else None), None


torch.library.register_autograd("myops::layer_norm", _backward, setup_context=_setup)
