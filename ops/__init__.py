"""myops: fused PyTorch operators written in C and CUDA C, built just in time.

Importing this package builds (first time only) and loads the native libraries, registers every op in the
dispatcher as ``torch.ops.myops.<name>`` (CPU, CUDA, fake and autograd implementations) and exposes the Python
functions ``ops.<name>``. ``ops.reload()`` rebuilds edited kernel files and switches to them in the running process.
"""

from __future__ import annotations

import importlib

import torch_ops_jit as _jit

# The one list an op is added to: each name has csrc/ops/<name>.cpp, csrc/cpu/<name>.c, csrc/cuda/<name>.cu,
# ops/<name>.py (defining the function <name>), tests/test_<name>.py and a benchmarks/bench.py entry.
OPS = ("add", "mul", "relu", "scale_bias_relu", "bias_gelu", "sum", "swiglu", "geglu", "rms_norm", "add_rms_norm",
       "layer_norm", "softmax", "log_softmax", "cross_entropy", "rope")

_jit.reload()  # first import: build if needed and load; importlib.reload(ops): pick up edited kernels

for _name in OPS:
    globals()[_name] = getattr(importlib.import_module(f"{__name__}.{_name}"), _name)

from .mul import mul_backward  # noqa: E402
from .relu import relu_backward  # noqa: E402
from .scale_bias_relu import scale_bias_relu_backward  # noqa: E402
from .bias_gelu import bias_gelu_backward  # noqa: E402
from .rope import rope_backward  # noqa: E402
from .swiglu import swiglu_backward  # noqa: E402
from .geglu import geglu_backward  # noqa: E402
from . import nn  # noqa: E402  (modules on the ops above: LayerNorm, RMSNorm, SwiGLU, GEGLU; not an op stem)


def reload() -> str:
    """Recompiles the kernel files that changed since the last build and makes every op (eager and compiled
    graphs) call the new code. A compile error raises torch_ops_jit.BuildError and the old kernels keep serving.
    Returns the loaded kernel library's path."""
    return _jit.reload()


BuildError = _jit.BuildError

__all__ = list(OPS) + ["reload", "BuildError", "OPS", "nn", "mul_backward", "relu_backward", "scale_bias_relu_backward",
                       "bias_gelu_backward", "swiglu_backward", "geglu_backward", "rope_backward"]
