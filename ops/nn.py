"""Drop-in torch.nn modules built on myops: LayerNorm, RMSNorm, and the gated MLP blocks SwiGLU and GEGLU.

LayerNorm and RMSNorm subclass torch.nn.LayerNorm / torch.nn.RMSNorm and replace only forward: constructor, the
parameters (``weight``, ``bias``), ``state_dict`` keys, ``reset_parameters`` and ``extra_repr`` are torch's own, so
checkpoints load either way and ``isinstance(m, torch.nn.LayerNorm)`` holds. SwiGLU and GEGLU are the Hugging Face
Llama MLP (``gate_proj``, ``up_proj``, ``down_proj``): a ``LlamaMLP`` state_dict loads into them.

    import ops
    mlp = ops.nn.SwiGLU(4096, 11008)          # down_proj(swiglu(gate_proj(x), up_proj(x)))
    norm = ops.nn.RMSNorm(4096, eps=1e-6)
"""

from __future__ import annotations

import math
import sys

import torch

from .geglu import geglu
from .swiglu import swiglu

__all__ = ["LayerNorm", "RMSNorm", "SwiGLU", "GEGLU"]


# The ops package itself (this file is imported while it initializes): ops.layer_norm / ops.rms_norm are looked up
# on it when a module runs.
_pkg = sys.modules[__package__]


def _flatten_normalized(x: torch.Tensor, normalized_shape: tuple[int, ...], name: str) -> torch.Tensor:
    """x [..., *normalized_shape] as [..., prod(normalized_shape)] (a view when x's layout allows, as reshape)."""
    n = len(normalized_shape)
    if x.dim() < n or tuple(x.shape[x.dim() - n:]) != normalized_shape:
        raise RuntimeError(f"ops.nn.{name}: expected input with shape [*, {', '.join(map(str, normalized_shape))}] "
                           f"(normalized_shape={list(normalized_shape)}), got input of shape {list(x.shape)}")
    if n == 1:
        return x
    return x.reshape(*x.shape[: x.dim() - n], math.prod(normalized_shape))


def _flat(p: torch.Tensor | None) -> torch.Tensor | None:
    """A weight or bias of normalized_shape as the 1-D vector ops.layer_norm / ops.rms_norm take (None stays)."""
    return p if p is None or p.dim() == 1 else p.reshape(-1)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm computed by ``ops.layer_norm`` (normalizes over the last dim; a multi-dim
    normalized_shape is flattened into one dim and back)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = _flatten_normalized(input, self.normalized_shape, "LayerNorm")
        y = _pkg.layer_norm(x, _flat(self.weight), _flat(self.bias), self.eps)
        return y if len(self.normalized_shape) == 1 else y.reshape(input.shape)


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm computed by ``ops.rms_norm``. eps=None means, as in torch, the machine epsilon of the
    computation type: torch.finfo(torch.float32).eps for float32/float16/bfloat16 inputs, of float64 for float64."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = self.eps
        if eps is None:
            eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
        flat = _flatten_normalized(x, self.normalized_shape, "RMSNorm")
        y = _pkg.rms_norm(flat, _flat(self.weight), eps)
        return y if len(self.normalized_shape) == 1 else y.reshape(x.shape)


class _GatedMLP(torch.nn.Module):
    """gate_proj, up_proj: in_features -> hidden_features; down_proj: hidden_features -> out_features (default
    in_features); all with or without bias."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None, bias: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        out_features = in_features if out_features is None else out_features
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.in_features, self.hidden_features, self.out_features = in_features, hidden_features, out_features
        self.gate_proj = torch.nn.Linear(in_features, hidden_features, **kw)
        self.up_proj = torch.nn.Linear(in_features, hidden_features, **kw)
        self.down_proj = torch.nn.Linear(hidden_features, out_features, **kw)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, hidden_features={self.hidden_features}, "
                f"out_features={self.out_features}, bias={self.gate_proj.bias is not None}")


class SwiGLU(_GatedMLP):
    """down_proj(silu(gate_proj(x)) * up_proj(x)): the Llama MLP, with silu and the product fused (ops.swiglu)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


class GEGLU(_GatedMLP):
    """down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)), with the activation and the product fused (ops.geglu)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(geglu(self.gate_proj(x), self.up_proj(x)))
