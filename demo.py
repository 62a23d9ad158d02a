"""myops demo: builds and loads the ops, then for every op checks myops against the PyTorch expression (both
measured against a float64 reference) and times myops vs eager PyTorch.

    PYTHONPATH=. python demo.py

Runs on the GPU when there is one ([16384, 4096], bf16 and fp32), else on the CPU ([1024, 1024]). Exits 1 if any
check fails: a myops error more than twice eager's error plus one rounding step of the output dtype.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import ops

# name -> (myops call, PyTorch expression); both take (x, y, bias) and use what they need.
OPS: dict[str, tuple[Callable, Callable]] = {
    "add": (lambda x, y, b: ops.add(x, y), lambda x, y, b: x + y),
    "mul": (lambda x, y, b: ops.mul(x, y), lambda x, y, b: x * y),
    "relu": (lambda x, y, b: ops.relu(x), lambda x, y, b: torch.relu(x)),
    "scale_bias_relu": (lambda x, y, b: ops.scale_bias_relu(x, b, 0.5), lambda x, y, b: torch.relu(x * 0.5 + b)),
    "bias_gelu": (lambda x, y, b: ops.bias_gelu(x, b), lambda x, y, b: F.gelu(x + b, approximate="tanh")),
    "sum(dim=-1)": (lambda x, y, b: ops.sum(x, -1), lambda x, y, b: x.sum(-1)),
    "sum(dim=0)": (lambda x, y, b: ops.sum(x, 0), lambda x, y, b: x.sum(0)),
    "swiglu": (lambda x, y, b: ops.swiglu(x, y), lambda x, y, b: F.silu(x) * y),
    "geglu": (lambda x, y, b: ops.geglu(x, y), lambda x, y, b: F.gelu(x, approximate="tanh") * y),
    "layer_norm": (lambda x, y, b: ops.layer_norm(x, b, b), lambda x, y, b: F.layer_norm(x, x.shape[-1:], b, b)),
    "rms_norm": (lambda x, y, b: ops.rms_norm(x, b), lambda x, y, b: F.rms_norm(x, x.shape[-1:], b, 1e-6)),
    "add_rms_norm": (lambda x, y, b: ops.add_rms_norm(x, y, b)[0],
                     lambda x, y, b: F.rms_norm(x + y, x.shape[-1:], b, 1e-6)),
    "softmax": (lambda x, y, b: ops.softmax(x), lambda x, y, b: torch.softmax(x, -1)),
    "log_softmax": (lambda x, y, b: ops.log_softmax(x), lambda x, y, b: torch.log_softmax(x, -1)),
    "cross_entropy": (lambda x, y, b: ops.cross_entropy(x, y.argmax(-1), reduction="none"),
                      lambda x, y, b: F.cross_entropy(x, y.argmax(-1), reduction="none")),
}


def median_us(fn: Callable[[], object], device: torch.device, reps: int = 10) -> float:
    """Median run time of fn in microseconds (CUDA events on GPU, perf_counter on CPU), after one warm-up run."""
    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest |out - ref|, computed in float64."""
    return (out.double() - ref).abs().max().item()


def run_op(name: str, device: torch.device, dtype: torch.dtype, shape: tuple[int, int]) -> bool:
    """Checks and times one op; prints its line and returns whether the check passed."""
    mine, expr = OPS[name]
    args = (torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device),
            torch.randn(shape[-1], dtype=dtype, device=device))
    ref = expr(*(a.double() for a in args))
    err_mine, err_eager = max_err(mine(*args), ref), max_err(expr(*args), ref)
    tol = 2 * err_eager + torch.finfo(dtype).eps * ref.abs().max().item()
    ok = err_mine <= tol
    t_mine = median_us(lambda: mine(*args), device)
    t_eager = median_us(lambda: expr(*args), device)
    print(f"{name:16} {device.type:4} {str(dtype).removeprefix('torch.'):9} err myops {err_mine:9.2e} "
          f"eager {err_eager:9.2e}  {'pass' if ok else 'FAIL'}  myops {t_mine:9.1f} µs  eager {t_eager:9.1f} µs  "
          f"({t_eager / t_mine:.2f}x)")
    return ok


def main() -> int:
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    shape = (16384, 4096) if cuda else (1024, 1024)
    print(f"myops ops: {', '.join(ops.OPS)}; device: {torch.cuda.get_device_name() if cuda else 'cpu'}; "
          f"shape {list(shape)}; torch {torch.__version__}")
    results = [run_op(name, device, dtype, shape) for dtype in (torch.bfloat16, torch.float32) for name in OPS]
    failed = results.count(False)
    print(f"{len(results) - failed}/{len(results)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
