"""How the L2 flush before each timed run moves the benchmark's numbers: a few forwards (and copies of two sizes)
timed behind each flush, as % of the 1 GiB copy timed behind the same flush.

    PYTHONPATH=. python benchmarks/flush_ab.py

Flushes (a 256 MB buffer each time):
- dirty: zeroed (triton's do_bench, and bench.py before session 32). L2 is left full of the zeros' dirty lines,
  which the timed run evicts and so writes back to DRAM in its own time: about 50 MB on an H100 or H200.
- clean: read (bench.py's default since session 32). L2 holds clean lines; the dirty lines of the previous run are
  written back before the timer starts.
- dirty+clean: zeroed, then read. If it measures like clean, the difference is the write-back of dirty lines and not
  the flush's access pattern.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ops  # noqa: E402
from bench import gpu_warmup, time_cuda_events  # noqa: E402

FLUSHES = ("dirty", "clean", "dirty+clean")


def main():
    gpu_warmup(2.0)
    print(torch.cuda.get_device_name(), torch.__version__)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = {f: 2 * src.numel() / time_cuda_events(lambda: dst.copy_(src), flush=f) / 1e3 for f in FLUSHES}
    print("copy 1 GiB, GB/s:", ", ".join(f"{f} {v:.1f}" for f, v in copy.items()))
    del src, dst
    print(f"{'case':32s}" + "".join(f"{f:>13s}" for f in FLUSHES))

    def row(name, fn, nbytes):
        pct = [nbytes / time_cuda_events(fn, flush=f) / 1e3 / copy[f] * 100 for f in FLUSHES]
        print(f"{name:32s}" + "".join(f"{v:13.1f}" for v in pct))

    s = torch.empty(1 << 27, dtype=torch.uint8, device="cuda")  # 128 MB
    d = torch.empty_like(s)
    row("copy 128 MB", lambda: d.copy_(s), 2 * s.numel())
    del s, d
    for dt in (torch.bfloat16, torch.float32):
        name = {torch.bfloat16: "bf16", torch.float32: "fp32"}[dt]
        x = torch.randn(16384, 4096, device="cuda", dtype=dt)
        w = torch.randn(4096, device="cuda", dtype=dt)
        lg = torch.randn(4096, 32000, device="cuda", dtype=dt)
        tg = torch.randint(0, 32000, (4096,), device="cuda")
        nx, nl = x.numel() * x.element_size(), lg.numel() * lg.element_size()
        for case, fn, nbytes in [
            ("sum(dim=-1)", lambda: ops.sum(x, -1), nx),
            ("sum(dim=-1) eager", lambda: x.sum(-1), nx),
            ("sum(dim=0)", lambda: ops.sum(x, 0), nx),
            ("rms_norm fwd", lambda: ops.rms_norm(x, w), 2 * nx),
            ("layer_norm fwd", lambda: ops.layer_norm(x, w, w), 2 * nx),
            ("softmax fwd", lambda: ops.softmax(x), 2 * nx),
            ("cross_entropy fwd unchecked", lambda: ops.cross_entropy(lg, tg, check_target=False), nl),
            ("cross_entropy fwd eager", lambda: F.cross_entropy(lg, tg), nl),
            # plain reads of the logits: what a read-only pass over them reaches (cross_entropy's forward is one)
            ("read logits: sum()", lambda: ops.sum(lg), nl),
            ("read logits: sum(dim=-1)", lambda: ops.sum(lg, -1), nl),  # row by row, as cross_entropy reads them
            ("read logits: eager sum()", lambda: lg.sum(), nl),
        ]:
            row(f"{case} {name}", fn, nbytes)


if __name__ == "__main__":
    main()
