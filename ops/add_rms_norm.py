"""add_rms_norm(x, residual, weight=None, eps=1e-6) -> (rms_norm(x + residual, weight, eps), x + residual), in one
pass over memory (the pre-norm residual stream of a transformer block).

torch.ops.myops.add_rms_norm returns (y, s, rstd); ops.add_rms_norm returns (y, s).
"""

import torch

from .rms_norm import check_weight, stat_dtype

OP = torch.ops.myops.add_rms_norm.default


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
