"""A few row-op launches for ncu (python benchmarks/profile_rows.py under ncu)."""
import torch

import ops

x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    ops.rms_norm(x, w)
    ops.layer_norm(x, w, w)
torch.cuda.synchronize()
