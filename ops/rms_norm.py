"""rms_norm(x, weight=None, eps=1e-6) = x * rsqrt(mean(x**2, -1) + eps) * weight, computed in fp32 (fp64 for fp64).

torch.ops.myops.rms_norm returns (y, rstd) like aten's native norms: rstd [x.shape[:-1]] is what the backward pass
needs. ops.rms_norm returns y.
"""

import torch


OP = torch.ops.myops.rms_norm.default


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMS norm over the last dim; differentiable in x and weight."""
    return OP(x, weight, eps)[0]


def stat_dtype(x: torch.Tensor) -> torch.dtype:
    """dtype of saved per-row statistics: fp32, or fp64 for fp64 inputs."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def check_weight(op: str, x: torch.Tensor, weight: torch.Tensor | None, x_name: str = "x") -> None:
    torch._check(x.dim() >= 1, lambda: f"myops.{op}: {x_name} must have at least 1 dimension, got a 0-d tensor")
    if weight is not None:
        torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                     lambda: f"myops.{op}: weight must have shape [{x.shape[-1]}] (the last dimension of {x_name}), "
                             f"got {list(weight.shape)}")


@torch.library.register_fake("myops::rms_norm")
def _(x, weight=None, eps=1e-6):
    check_weight("rms_norm", x, weight)
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=stat_dtype(x))


@torch.library.register_fake("myops::rms_norm_backward")
def _(grad, x, rstd, weight, weight_grad, eps):
    dw = x.new_empty((x.shape[-1],) if weight is not None and weight_grad else (0,))
    return x.new_empty(x.shape), dw
