"""Host time per call of small ops (CPU tensors, where the call's fixed costs dominate: dispatch, autograd, output
allocation), myops against eager PyTorch. Mean over many calls, in microseconds.

    python benchmarks/host_time.py [--threads 2] [--calls 3000]

Run from two trees (PYTHONPATH=<tree>) to compare them, as session 45 did for the autograd's move to C++.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import ops


def mean_us(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3000)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x, y, w = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    rows = [
        ("relu", lambda: ops.relu(x), lambda: torch.relu(x)),
        ("relu, x requires grad", lambda: ops.relu(xg), lambda: torch.relu(xg)),
        ("relu fwd+bwd", lambda: ops.relu(xg).sum().backward(), lambda: torch.relu(xg).sum().backward()),
        ("mul", lambda: ops.mul(x, y), lambda: x * y),
        ("swiglu", lambda: ops.swiglu(x, y), lambda: F.silu(x) * y),
        ("softmax", lambda: ops.softmax(x), lambda: torch.softmax(x, -1)),
        ("rms_norm", lambda: ops.rms_norm(x, w), lambda: F.rms_norm(x, (64,), w, 1e-6)),
        ("rms_norm fwd+bwd", lambda: ops.rms_norm(xg, wg).sum().backward(),
         lambda: F.rms_norm(xg, (64,), wg, 1e-6).sum().backward()),
        ("layer_norm", lambda: ops.layer_norm(x, w, w), lambda: F.layer_norm(x, (64,), w, w)),
        ("sum(dim=-1)", lambda: ops.sum(x, -1), lambda: x.sum(-1)),
    ]
    print(f"{'[64, 64], us a call':28} {'myops':>8} {'eager':>8}")
    for name, ours, eager in rows:
        n = args.calls // 3 if "bwd" in name else args.calls
        print(f"{name:28} {mean_us(ours, n):8.1f} {mean_us(eager, n):8.1f}")


if __name__ == "__main__":
    main()
