"""rope(x, cos, sin, heads_first=False, interleaved=False): rotary position embedding in the Hugging Face Llama form
``x * cos + rotate_half(x) * sin``, with cos/sin broadcast over the heads dim."""

from __future__ import annotations

import torch


OP = torch.ops.myops.rope.default
BACKWARD = torch.ops.myops.rope_backward.default


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_first: bool = False,
         interleaved: bool = False) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin in one pass over x. Differentiable in x, cos and sin.

    x: [..., S, H, D] (flash-attn / vLLM layout), or [..., H, S, D] with heads_first=True (Hugging Face layout);
    D even; any strides (views such as ``qkv.view(B, S, 3, H, D)[:, :, 0]`` are read in place).
    cos, sin: [S, D] or [..., S, D] whose leading dims broadcast to x's batch dims (e.g. [B, S, D], [1, S, D]).
    rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]) (NeoX/Llama); with interleaved=True the GPT-J pairing,
    rotate(x)[2i] = -x[2i+1], rotate(x)[2i+1] = x[2i]. Returns a new contiguous tensor of x's shape."""
    return OP(x, cos, sin, heads_first, interleaved)


def rope_backward(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_first: bool = False,
                  interleaved: bool = False) -> torch.Tensor:
    """The gradient of rope for x given the output gradient (the transposed rotation)."""
    return BACKWARD(grad, cos, sin, heads_first, interleaved)


def rotate(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """rotate_half(x) (NeoX/Llama) or, interleaved, the GPT-J rotate_every_two, in torch ops."""
    if interleaved:
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _check(op: str, xname: str, x, cos, sin, heads_first) -> None:
    torch._check(x.dim() >= 3, lambda: f"myops.{op}: {xname} must have at least 3 dimensions, got shape "
                 f"{list(x.shape)}")
    s, d = x.shape[-2 if heads_first else -3], x.shape[-1]
    torch._check(d % 2 == 0, lambda: f"myops.{op}: {xname}'s last dimension (D) must be even, got {d}")
    batch = x.shape[:-3]
    for name, t in (("cos", cos), ("sin", sin)):
        torch._check(t.dtype == x.dtype, lambda: f"myops.{op}: {name} must have the same dtype as {xname}")
        torch._check(t.device == x.device, lambda: f"myops.{op}: {name} must be on the same device as {xname}")
        lead = t.shape[:-2]
        ok = t.dim() >= 2 and len(lead) <= len(batch)
        torch._check(ok and t.shape[-2] == s and t.shape[-1] == d and
                     all(n == 1 or n == m for n, m in zip(lead, batch[len(batch) - len(lead):])),
                     lambda: f"myops.{op}: {name} must have shape [S, D] = [{s}, {d}], or [..., S, D] with leading "
                     f"dims that broadcast to {xname}'s batch dims {list(batch)}, got {list(t.shape)}")


@torch.library.register_fake("myops::rope")
def _(x, cos, sin, heads_first=False, interleaved=False):
    _check("rope", "x", x, cos, sin, heads_first)
    return x.new_empty(x.shape)


@torch.library.register_fake("myops::rope_backward")
def _(grad, cos, sin, heads_first=False, interleaved=False):
    _check("rope_backward", "grad", grad, cos, sin, heads_first)
    return grad.new_empty(grad.shape)
