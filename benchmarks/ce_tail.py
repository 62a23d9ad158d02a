"""Where cross_entropy's forward time goes beyond its row kernel: for [4096, 32000] bf16 and fp32 logits, the
forward with reduction "mean" (row kernel + the loss's reduction kernel, a programmatic dependent), "none" (row
kernel, and for bf16 a cast), and myops sum(dim=-1) of the same logits (one row kernel, the plain-read reference).
Each is timed as bench.py times it (CUDA events median, behind the clean L2 flush and a GPU sleep), then run 20 times
the same way under torch.profiler: printed are the median span from its first kernel's start to its last kernel's
end, the gap from the sleep's end to its first kernel, and the last run's kernels (start offset, duration, µs).

    PYTHONPATH=. python benchmarks/ce_tail.py [--shapes 4096,32000 131072,512] [--dtypes bf16,fp32]

Session 40, H100: bf16 "mean" 94.0 us by events, its row kernel 87.3 and the reduction's end 2.3 us after the row
kernel's; sum(dim=-1) 88.4 by events, its kernel 85.3 (BENCHMARKS.md).
"""
import argparse
import statistics

import torch
from torch.profiler import ProfilerActivity, profile
import ops
import bench

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", nargs="+", default=["4096,32000"], help="M,C of the logits")
ap.add_argument("--dtypes", default="bf16,fp32")
args = ap.parse_args()
dtypes = [{"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[d] for d in args.dtypes.split(",")]
torch.manual_seed(0)
flush = bench.l2_flush("clean")
cases = []
for dt, (M, C) in [(d, tuple(int(v) for v in sh.split(","))) for sh in args.shapes for d in dtypes]:
    x = torch.randn(M, C, device="cuda", dtype=dt)
    t = torch.randint(0, C, (M,), device="cuda")
    name = f"{str(dt).split('.')[1]} [{M}, {C}]"
    cases += [(f"ce {name} mean", lambda x=x, t=t: ops.cross_entropy(x, t, check_target=False)),
              (f"ce {name} none", lambda x=x, t=t: ops.cross_entropy(x, t, reduction="none", check_target=False)),
              (f"sum {name}", lambda x=x: ops.sum(x, -1))]
for name, fn in cases:
    ev = bench.time_cuda_events(fn)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            flush()
            torch.cuda._sleep(4_000_000)
            fn()
        torch.cuda.synchronize()
    ks = sorted([(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA], key=lambda k: k[0])
    # group: after each sleep kernel, the op's kernels until the next flush kernel
    runs, cur, prev_end = [], None, None
    for s, e, n in ks:
        if "sleep" in n or "spin_kernel" in n:
            cur = []; runs.append((e, cur)); continue
        if cur is not None and ("reduce_kernel" in n and "max" in n.lower() or "MaxOps" in n):
            cur = None; continue
        if cur is not None:
            cur.append((s, e, n))
    if not any(kk for _, kk in runs):
        print(name, "unparsed:", sorted({n[:80] for _, _, n in ks}))
        continue
    spans, gaps0, detail = [], [], None
    for sleep_end, kk in runs:
        if not kk: continue
        spans.append(max(e for _, e, _ in kk) - kk[0][0])
        gaps0.append(kk[0][0] - sleep_end)
        detail = [(round(s - kk[0][0], 1), round(e - s, 1), n[:60]) for s, e, n in kk]
    print(f"{name}: events median {ev:.1f} us; profiler first-kernel-start to last-kernel-end median "
          f"{statistics.median(spans):.1f} us; sleep end -> first kernel {statistics.median(gaps0):.1f} us")
    for d in detail:
        print("    start +%.1f  dur %.1f  %s" % d)
