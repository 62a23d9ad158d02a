"""relu(x) = max(x, 0) (NaN propagates); its backward is the op relu_backward(grad, out)."""

import torch


OP = torch.ops.myops.relu.default
BACKWARD = torch.ops.myops.relu_backward.default


def relu(x: torch.Tensor) -> torch.Tensor:
    """Elementwise max(x, 0), as torch.relu. Differentiable."""
    return OP(x)


def relu_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Gradient of relu given its output: grad where out > 0, else 0."""
    return BACKWARD(grad, out)


@torch.library.register_fake("myops::relu")
def _(x):
    return torch.empty_like(x)  # (laid out as x, as the kernel's output: run_elementwise)


@torch.library.register_fake("myops::relu_backward")
def _(grad, out):
    torch._check(grad.shape == out.shape, lambda: "myops.relu_backward: out must have the same shape as grad")
    return torch.empty_like(out)
