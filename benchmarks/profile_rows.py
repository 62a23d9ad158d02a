"""A few row-op launches to profile with Nsight Compute, e.g. on the GPU machine:

    PYTHONPATH=. ncu --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy \
        --section WarpStateStats python benchmarks/profile_rows.py
"""
import torch

import ops

x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    ops.rms_norm(x, w)
    ops.layer_norm(x, w, w)
torch.cuda.synchronize()
