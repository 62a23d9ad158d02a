"""What swiglu and geglu share on the Python side: everything but their names and activations."""

from collections.abc import Callable

import torch


def define(name: str, act: str) -> tuple[Callable, Callable]:
    """Registers the fake implementations of myops::<name>(gate, up) = act(gate) * up and returns the Python
    functions (<name>, <name>_backward)."""
    op = getattr(torch.ops.myops, name).default
    backward = getattr(torch.ops.myops, f"{name}_backward").default

    def fn(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return op(gate, up)

    def fn_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
        return backward(grad, gate, up)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{act}(gate) * up in one pass; differentiable in gate and up."
    fn_backward.__name__ = fn_backward.__qualname__ = f"{name}_backward"
    fn_backward.__doc__ = f"(grad_gate, grad_up) = (grad * up * {act}'(gate), grad * {act}(gate))."

    def fake(gate, up):
        torch._check(up.shape == gate.shape, lambda: f"myops.{name}: up must have the same shape as gate "
                                                     f"{list(gate.shape)}, got {list(up.shape)}")
        torch._check(up.dtype == gate.dtype,
                     lambda: f"myops.{name}: up must have the same dtype as gate ({gate.dtype})")
        return torch.empty_like(gate)  # (laid out as gate, as the kernel's output: run_elementwise)

    torch.library.register_fake(f"myops::{name}")(fake)
    torch.library.register_fake(f"myops::{name}_backward")(
        lambda grad, gate, up: (torch.empty_like(gate), torch.empty_like(gate)))

    return fn, fn_backward
