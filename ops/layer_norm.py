"""layer_norm(x, weight=None, bias=None, eps=1e-5) = F.layer_norm(x, x.shape[-1:], weight, bias, eps), computed in
fp32 (fp64 for fp64).

torch.ops.myops.layer_norm returns (y, mean, rstd) like aten.native_layer_norm; ops.layer_norm returns y.
"""

import torch

from .rms_norm import stat_dtype

OP = torch.ops.myops.layer_norm.default


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
