"""swiglu(gate, up) = silu(gate) * up, gate and up of the same shape, dtype and device.

For a fused gate/up projection h of shape [..., 2H], ``swiglu(h[..., :H], h[..., H:])`` runs on the two halves in
place (strided views, no copy)."""

from ._glu import define

swiglu, swiglu_backward = define("swiglu", "silu")
