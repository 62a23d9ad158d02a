"""Per-kernel GPU time of the row-wise ops under torch.profiler (what each op's launches cost, fwd and bwd).

    PYTHONPATH=. python benchmarks/kernel_times.py [--ops cross_entropy,layer_norm] [--dtype bf16] [--shape 256,262144]

Prints, per op, every kernel its forward and backward launch (the backward through torch.autograd.grad, so no
gradient accumulation is timed) with its mean time per call (µs) and, for the row ops, the rate of one pass over a
[M, N] tensor at that time (GB/s: a kernel that reads k such tensors and writes j moves k + j passes, so its rate over
its traffic is that times k + j); the bench's totals include these plus host overheads (allocations, launches).
--shape sets the row ops' [M, N] (default 16384,4096); cross_entropy keeps [4096, 32000].
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import ops

DT = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def cases(dtype, shape):
    """op -> (forward, its differentiable inputs, bytes of one pass over the row tensor or None)."""
    dev = "cuda"
    m, n = shape
    x = torch.randn(m, n, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(n, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(n, device=dev, dtype=dtype, requires_grad=True)
    r = torch.randn(m, n, device=dev, dtype=dtype, requires_grad=True)
    lg = torch.randn(4096, 32000, device=dev, dtype=dtype, requires_grad=True)
    tg = torch.randint(0, 32000, (4096,), device=dev)
    one = x.numel() * x.element_size()
    return {
        "rms_norm": (lambda: ops.rms_norm(x, w), (x, w), one),
        "add_rms_norm": (lambda: ops.add_rms_norm(x, r, w)[0], (x, r, w), one),
        "layer_norm": (lambda: ops.layer_norm(x, w, b), (x, w, b), one),
        "softmax": (lambda: ops.softmax(x, -1), (x,), one),
        "log_softmax": (lambda: ops.log_softmax(x, -1), (x,), one),
        "cross_entropy": (lambda: ops.cross_entropy(lg, tg), (lg,), None),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default="rms_norm,add_rms_norm,layer_norm,softmax,log_softmax,cross_entropy")
    p.add_argument("--dtype", default="bf16", choices=sorted(DT))
    p.add_argument("--shape", default="16384,4096", help="M,N of the row ops")
    a = p.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    if len(shape) != 2:
        p.error("--shape takes M,N")
    cs = cases(DT[a.dtype], shape)
    for name in a.ops.split(","):
        fn, inputs, one = cs[name]
        g = torch.randn_like(fn())

        def step():
            torch.autograd.grad(fn(), inputs, g)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        n = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        print(f"== {name} {a.dtype} {list(shape) if one else [4096, 32000]}: per call (µs)")
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if t > 0:
                rows.append((t / n, e.count // n, e.key[:90]))
        for t, c, k in sorted(rows, reverse=True)[:12]:
            rate = f"  {one / (t / c) / 1e3:7.1f} GB/s per pass" if one and c else ""
            print(f"  {t:9.1f}  x{c}  {k}{rate}")


if __name__ == "__main__":
    main()
