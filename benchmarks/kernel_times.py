"""Per-kernel GPU time of bench.py's cases under torch.profiler: what each launch of a forward+backward costs, for
myops and, side by side, torch.compile or eager of the same expression.

    PYTHONPATH=. python benchmarks/kernel_times.py [--ops cross_entropy,layer_norm] [--dtypes bf16,fp32]
        [--impls myops,compile] [--cases default,N=65536] [--shape 256,262144] [--flush clean|none]

For each case, dtype and implementation: the forward and the backward (through torch.autograd.grad, so no gradient
accumulation is timed) run 20 times, each after the bench's L2 flush (a 256 MB read; --flush none: none, as before
session 39), and every kernel they launch is printed with its mean time per step (µs) and the rate of one pass over
the case's first input at that time (GB/s: a kernel that reads k such tensors and writes j moves k + j passes, so its
rate over its traffic is that times k + j). The bench's totals hold these plus the gaps between launches.
Example (session 39): swiglu's backward kernel lost about 1 us to Inductor's, its forward none:
`--ops swiglu,geglu --dtypes bf16,fp32 --impls myops,compile`.
"""
import argparse
import re

import torch
from torch.profiler import ProfilerActivity, profile

import bench

ROW_OPS = "rms_norm,add_rms_norm,layer_norm,softmax,log_softmax,cross_entropy"


def kernel_rows(step, n: int, skip: set[str]) -> list[tuple[float, float, str]]:
    """(mean µs per step, launches per step, kernel name) of every GPU activity of n runs of step, but those in skip."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.key not in skip:
            rows.append((t / n, e.count / n, e.key))
    return sorted(rows, reverse=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default=ROW_OPS, help="comma-separated op stems of bench.py")
    p.add_argument("--dtypes", "--dtype", default="bf16", help=f"comma-separated, of {','.join(bench.DTYPES)}")
    p.add_argument("--impls", default="myops", help="comma-separated, of myops, compile, eager")
    p.add_argument("--cases", default="default", help="comma-separated variant names of bench.py ('default': each "
                   "op's own shape)")
    p.add_argument("--shape", help="comma-separated input shape of the cases without one of their own (the row ops' "
                   "default case; cross_entropy keeps [4096, 32000]); default 16384,4096")
    p.add_argument("--flush", default="clean", choices=["clean", "none"], help="L2 flush before each step")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    ops_ = a.ops.split(",")
    unknown = set(ops_) - {c.op for c in bench.CASES}
    if unknown:
        p.error(f"unknown ops: {sorted(unknown)}")
    wanted = set(re.split(r",(?![^\[]*\])", a.cases))
    cases = [c for c in bench.CASES if c.op in ops_ and (c.variant or "default") in wanted]
    dev = torch.device("cuda")
    flush = bench.l2_flush("clean") if a.flush == "clean" else (lambda: None)
    skip = {k for _, _, k in kernel_rows(flush, 2, set())}  # the flush's own kernels
    for case in cases:
        torch._dynamo.reset()
        fns = {"myops": case.myops_fn, "eager": case.torch_fn,
               "compile": torch.compile(case.torch_fn, fullgraph=True) if "compile" in a.impls else None}
        for dname in a.dtypes.split(","):
            shape = case.shape or (tuple(int(s) for s in a.shape.split(",")) if a.shape else (16384, 4096))
            inputs = bench.with_grad(case.make_inputs(shape, bench.DTYPES[dname], dev), case.grad_inputs)
            one = bench.tensors(inputs)[0]
            one = one.numel() * one.element_size()
            grad = [torch.randn_like(t) for t in bench.tensors(case.myops_fn(*inputs))]
            for impl in a.impls.split(","):
                run = bench.fwd_bwd(fns[impl], inputs, grad) if case.backward else (lambda f=fns[impl]: f(*inputs))

                def step():
                    flush()
                    run()

                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                rows = kernel_rows(step, a.steps, skip)
                print(f"== {case.name} {dname} {list(shape)} {impl}: {sum(t for t, _, _ in rows):.1f} µs of kernels "
                      f"per step")
                for t, c, k in rows[:12]:
                    rate = f"  {one / (t / c) / 1e3:7.1f} GB/s per pass" if c else ""
                    print(f"  {t:9.1f}  x{c:g}  {k[:90]}{rate}")


if __name__ == "__main__":
    main()
