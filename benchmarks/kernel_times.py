"""Per-kernel GPU time of the row-wise ops under torch.profiler (what each op's launches cost, fwd and bwd).

    PYTHONPATH=. python benchmarks/kernel_times.py [--ops cross_entropy,layer_norm] [--dtype bf16]

Prints, per op, every kernel the op's forward and backward launch with its mean time (µs) and achieved GB/s where
the kernel is one of ours; the bench's totals include these plus host overheads (validation syncs, allocations).
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import ops

DT = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def cases(dtype):
    dev = "cuda"
    x = torch.randn(16384, 4096, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(4096, device=dev, dtype=dtype, requires_grad=True)
    r = torch.randn(16384, 4096, device=dev, dtype=dtype, requires_grad=True)
    lg = torch.randn(4096, 32000, device=dev, dtype=dtype, requires_grad=True)
    tg = torch.randint(0, 32000, (4096,), device=dev)
    return {
        "rms_norm": lambda: ops.rms_norm(x, w),
        "add_rms_norm": lambda: ops.add_rms_norm(x, r, w)[0],
        "layer_norm": lambda: ops.layer_norm(x, w, b),
        "softmax": lambda: ops.softmax(x, -1),
        "cross_entropy": lambda: ops.cross_entropy(lg, tg),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default="rms_norm,add_rms_norm,layer_norm,softmax,cross_entropy")
    p.add_argument("--dtype", default="bf16")
    a = p.parse_args()
    cs = cases(DT[a.dtype])
    for name in a.ops.split(","):
        fn = cs[name]
        for _ in range(3):
            y = fn()
            y.backward(torch.randn_like(y))
        torch.cuda.synchronize()
        n = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                y = fn()
                y.backward(torch.randn_like(y))
            torch.cuda.synchronize()
        print(f"== {name} {a.dtype}: per call (µs)")
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if t > 0:
                rows.append((t / n, e.count // n, e.key[:90]))
        for t, c, k in sorted(rows, reverse=True)[:12]:
            print(f"  {t:9.1f}  x{c}  {k}")


if __name__ == "__main__":
    main()
