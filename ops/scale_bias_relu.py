"""scale_bias_relu(x, bias, scale) = relu(x * scale + bias), bias of shape [x.shape[-1]]."""

import torch


OP = torch.ops.myops.scale_bias_relu.default
BACKWARD = torch.ops.myops.scale_bias_relu_backward.default


def scale_bias_relu(x: torch.Tensor, bias: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """relu(x * scale + bias) in one pass (one rounding); differentiable in x and bias."""
    return OP(x, bias, float(scale))


def scale_bias_relu_backward(grad: torch.Tensor, out: torch.Tensor, scale: float):
    """(grad_x, grad_bias) in one pass: with grad_pre = grad where out > 0, grad_x = grad_pre * scale and grad_bias
    = grad_pre summed over all but the last dim."""
    return BACKWARD(grad, out, float(scale))


@torch.library.register_fake("myops::scale_bias_relu")
def _(x, bias, scale):
    torch._check(x.dim() >= 1, lambda: "myops.scale_bias_relu: x must have at least 1 dimension")
    torch._check(bias.dim() == 1 and bias.shape[0] == x.shape[-1],
                 lambda: f"myops.scale_bias_relu: bias must have shape [{x.shape[-1]}]")
    return torch.empty_like(x)  # (laid out as x, as the kernel's output: run_elementwise)


@torch.library.register_fake("myops::scale_bias_relu_backward")
def _(grad, out, scale):
    torch._check(grad.dim() >= 1, lambda: "myops.scale_bias_relu_backward: grad must have at least 1 dimension")
    return grad.new_empty(grad.shape), grad.new_empty(grad.shape[-1:])
