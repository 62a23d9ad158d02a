"""Runs every row op forward and backward once on shapes that take each CUDA path (register rows, rows split over a
cluster with staging, the rows.cuh engine, cross_entropy's streaming kernel), for compute-sanitizer, e.g.:

    PYTHONPATH=. compute-sanitizer --tool memcheck python benchmarks/sanitize_rows.py
"""
import torch

import ops

torch.manual_seed(0)
for dtype in (torch.bfloat16, torch.float32):
    for shape in ((7, 4096), (40, 24576), (3, 65536), (2, 262144), (5, 769)):
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
