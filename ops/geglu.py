"""geglu(gate, up) = gelu(gate, approximate="tanh") * up, gate and up of the same shape, dtype and device.

For a fused gate/up projection h of shape [..., 2H], ``geglu(h[..., :H], h[..., H:])`` runs on the two halves in
place (strided views, no copy)."""

import torch

OP = torch.ops.myops.geglu.default
BACKWARD = torch.ops.myops.geglu_backward.default


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu(gate, approximate="tanh") * up in one pass; differentiable in gate and up."""
    return OP(gate, up)


def geglu_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    """(grad_gate, grad_up): grad_gate = grad * up * gelu_tanh'(gate), grad_up = grad * gelu_tanh(gate)."""
    return BACKWARD(grad, gate, up)


@torch.library.register_fake("myops::geglu")
def _(gate, up):
    torch._check(up.shape == gate.shape,
                 lambda: f"myops.geglu: up must have the same shape as gate {list(gate.shape)}, got {list(up.shape)}")
    torch._check(up.dtype == gate.dtype, lambda: f"myops.geglu: up must have the same dtype as gate ({gate.dtype})")
    return gate.new_empty(gate.shape)


@torch.library.register_fake("myops::geglu_backward")
def _(grad, gate, up):
    return gate.new_empty(gate.shape), gate.new_empty(gate.shape)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    gate, up = ctx.saved_tensors
    dgate, dup = BACKWARD(grad, gate, up)
    return (dgate if ctx.needs_input_grad[0] else None), (dup if ctx.needs_input_grad[1] else None)


torch.library.register_autograd("myops::geglu", _backward, setup_context=_setup)
