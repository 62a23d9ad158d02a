"""geglu(gate, up) = gelu(gate, approximate="tanh") * up, gate and up of the same shape, dtype and device.

For a fused gate/up projection h of shape [..., 2H], ``geglu(h[..., :H], h[..., H:])`` runs on the two halves in
place (strided views, no copy)."""

from ._glu import define

geglu, geglu_backward = define("geglu", "gelu_tanh")
