"""bias_gelu(x, bias) = gelu(x + bias, approximate="tanh"), bias of shape [x.shape[-1]]."""

import torch

from ._common import reduce_to_bias

OP = torch.ops.myops.bias_gelu.default
BACKWARD = torch.ops.myops.bias_gelu_backward.default


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias, approximate="tanh") in one pass; differentiable in x and bias."""
    return OP(x, bias)


def bias_gelu_backward(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """grad * gelu_tanh'(x + bias): the gradient for x (and, summed over leading dims, for bias)."""
    return BACKWARD(grad, x, bias)


@torch.library.register_fake("myops::bias_gelu")
def _(x, bias):
    torch._check(x.dim() >= 1, lambda: "myops.bias_gelu: x must have at least 1 dimension")
    torch._check(bias.dim() == 1 and bias.shape[0] == x.shape[-1],
                 lambda: f"myops.bias_gelu: bias must have shape [{x.shape[-1]}]")
    return x.new_empty(x.shape)


@torch.library.register_fake("myops::bias_gelu_backward")
def _(grad, x, bias):
    return grad.new_empty(grad.shape)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])


def _backward(ctx, grad):
    x, bias = ctx.saved_tensors
    dx = BACKWARD(grad, x, bias)
    db = reduce_to_bias(dx) if ctx.needs_input_grad[1] else None
    return dx, db


torch.library.register_autograd("myops::bias_gelu", _backward, setup_context=_setup)
