"""Runs every row op forward and backward once on shapes that take each CUDA path (register rows, rows split over a
cluster with staging, the rows.cuh engine, cross_entropy's streaming kernel), for compute-sanitizer, e.g.:

    PYTHONPATH=. compute-sanitizer --tool memcheck python benchmarks/sanitize_rows.py

MYOPS_SAN_SHAPES=3x65536,2x262144 limits the shapes (racecheck takes minutes over all of them).
"""
import os

import torch

import ops

SHAPES = [tuple(int(d) for d in s.split("x")) for s in
          os.environ.get("MYOPS_SAN_SHAPES", "7x4096,40x24576,3x65536,2x262144,5x769").split(",")]
torch.manual_seed(0)
for dtype in (torch.bfloat16, torch.float32):
    for shape in SHAPES:
        x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
        r = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
        w = torch.randn(shape[-1], device="cuda", dtype=dtype, requires_grad=True)
        b = torch.randn(shape[-1], device="cuda", dtype=dtype, requires_grad=True)
        t = torch.randint(0, shape[-1], shape[:1], device="cuda")
        outs = [ops.rms_norm(x, w), ops.layer_norm(x, w, b), ops.softmax(x), ops.log_softmax(x),
                ops.cross_entropy(x, t), ops.cross_entropy(x, t, label_smoothing=0.1, check_target=False),
                *ops.add_rms_norm(x, r, w)]
        torch.autograd.backward([o.float().sum() for o in outs])
torch.cuda.synchronize()
print("sanitize_rows: done")
