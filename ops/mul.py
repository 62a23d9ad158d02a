"""mul(a, b) = a * b for two float tensors of the same shape, device and dtype; mul_backward(grad, a, b) = (grad * b,
grad * a) in one pass."""

import torch


OP = torch.ops.myops.mul.default
BACKWARD = torch.ops.myops.mul_backward.default


def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise a * b (same shape; no broadcasting). Differentiable in both: da = g * b, db = g * a."""
    return OP(a, b)


def mul_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad * b, grad * a): both gradients of a * b, reading grad once."""
    return BACKWARD(grad, a, b)


@torch.library.register_fake("myops::mul")
def _(a, b):
    torch._check(a.shape == b.shape, lambda: f"myops.mul: b must have the same shape as a {list(a.shape)}")
    return torch.empty_like(a)  # (laid out as a, as the kernel's output: run_elementwise)


@torch.library.register_fake("myops::mul_backward")
def _(grad, a, b):
    torch._check(a.shape == b.shape == grad.shape,
                 lambda: f"myops.mul_backward: grad and b must have the shape of a {list(a.shape)}")
    return torch.empty_like(a), torch.empty_like(a)
