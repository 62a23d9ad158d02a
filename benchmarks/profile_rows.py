"""A few row-op launches to profile with Nsight Compute, e.g. on the GPU machine:

    PYTHONPATH=. ncu --profile-from-start off --launch-skip 2 --launch-count 1 -k regex:rr_ --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        python benchmarks/profile_rows.py rms_norm_backward

Each named op (default: rms_norm layer_norm) runs on [16384, 4096] bf16 (cross_entropy: [4096, 32000]), twice to
warm up (torch.compile's entries compile and autotune there, a varying number of launches), then 3 times inside the
profiler range (torch.cuda.profiler.start/stop, to which `--profile-from-start off` limits ncu): for a regex that
matches one kernel a call, `--launch-skip 2` is the last call's. MYOPS_PROF_SHAPE=1024,65536 and MYOPS_PROF_DTYPE=fp32
change the shape and dtype of the row ops; a 3-d shape ([S, H, D]) adds rope and rope_compile. The *_compile entries
run torch.compile's kernel of the same expression (the benchmark's; its triton kernels match -k regex:triton).
Session 41: the compiled rms_norm and layer_norm went unprofiled when device_ncu.sh counted the launches of a first
run to skip all but the last in a second (likely: the first autotuned, the second read its cache; not GPU-run since).
"""
import os
import sys

import torch
import torch.nn.functional as F

import ops  # (registers torch.ops.myops)

m = torch.ops.myops
shape = tuple(int(s) for s in os.environ.get("MYOPS_PROF_SHAPE", "16384,4096").split(","))
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[os.environ.get("MYOPS_PROF_DTYPE", "bf16")]
x = torch.randn(shape, device="cuda", dtype=dtype)
g = torch.randn_like(x)
w = torch.randn(shape[-1], device="cuda", dtype=dtype)
_, rstd = m.rms_norm(x, w)
_, mean, lrstd = m.layer_norm(x, w, w)
lg = torch.randn(4096, 32000, device="cuda", dtype=torch.bfloat16)
tg = torch.randint(0, 32000, (4096,), device="cuda")
RUN = {
    "rms_norm": lambda: m.rms_norm(x, w),
    "layer_norm": lambda: m.layer_norm(x, w, w),
    "softmax": lambda: m.softmax(x, -1),
    "rms_norm_backward": lambda: m.rms_norm_backward(g, x, rstd, w, True, 1e-6),
    "layer_norm_backward": lambda: m.layer_norm_backward(g, x, mean, lrstd, w, True, 1e-5),
    "cross_entropy": lambda: m.cross_entropy(lg, tg),
    "sum_logits": lambda: ops.sum(lg, -1),  # a plain row-by-row read of the same logits (cross_entropy's ceiling)
    "rms_norm_compile": torch.compile(
        lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)),
    "layer_norm_compile": torch.compile(lambda: F.layer_norm(x, x.shape[-1:], w, w)),
    "sum": lambda: ops.sum(x, -1),
    "sum_compile": torch.compile(lambda: x.sum(-1)),
}
if x.dim() == 3:  # rope: x [S, H, D] (MYOPS_PROF_SHAPE=16384,32,128), cos/sin [S, D] of random angles
    theta = torch.randn(shape[0], shape[2], device="cuda") * 3
    cs, sn = theta.cos().to(dtype), theta.sin().to(dtype)
    half = shape[2] // 2
    RUN["rope"] = lambda: m.rope(x, cs, sn, False, False)
    RUN["rope_compile"] = torch.compile(lambda: x * cs.unsqueeze(-2) + torch.cat((-x[..., half:], x[..., :half]), -1)
                                        * sn.unsqueeze(-2))
names = sys.argv[1:] or ["rms_norm", "layer_norm"]
for name in names:  # warm-up, outside the profiler range
    for _ in range(2):
        RUN[name]()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for name in names:
    for _ in range(3):
        RUN[name]()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
