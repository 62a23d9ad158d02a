"""bias_gelu(x, bias) = gelu(x + bias, approximate="tanh"), bias of shape [x.shape[-1]]."""

import torch


OP = torch.ops.myops.bias_gelu.default
BACKWARD = torch.ops.myops.bias_gelu_backward.default


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias, approximate="tanh") in one pass; differentiable in x and bias."""
    return OP(x, bias)


def bias_gelu_backward(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor):
    """(grad_x, grad_bias) in one pass: grad_x = grad * gelu_tanh'(x + bias), grad_bias = grad_x summed over all but
    the last dim."""
    return BACKWARD(grad, x, bias)


def _check_bias(op: str, x, bias) -> None:
    torch._check(x.dim() >= 1, lambda: f"myops.{op}: x must have at least 1 dimension")
    torch._check(bias.dim() == 1 and bias.shape[0] == x.shape[-1],
                 lambda: f"myops.{op}: bias must have shape [{x.shape[-1]}]")


@torch.library.register_fake("myops::bias_gelu")
def _(x, bias):
    _check_bias("bias_gelu", x, bias)
    return torch.empty_like(x)  # (laid out as x, as the kernel's output: run_elementwise)


@torch.library.register_fake("myops::bias_gelu_backward")
def _(grad, x, bias):
    _check_bias("bias_gelu_backward", x, bias)
    return grad.new_empty(grad.shape), grad.new_empty(grad.shape[-1:])
