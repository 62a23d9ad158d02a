"""Per-sample gradients, vmap(grad(loss)), through the ops' vmap rules (C++, csrc/ops/batching.h: one call over the
batch) against the same loss made of PyTorch's ops under vmap (their own batching rules) and against a Python loop
of grad over the samples (what PyTorch's fallback does for an op without a rule). Median time per call in milliseconds (CUDA events
on a GPU, perf_counter on the CPU); the ratios: the loop's time over myops' vmap, PyTorch's vmap over myops' vmap.

    PYTHONPATH=. python benchmarks/per_sample.py [--device cuda] [--dtype bf16] [--batch 32] [--rows 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.func import grad, vmap

import ops

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def median_ms(fn, device: str, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def cases(batch: int, rows: int, hidden: int, vocab: int, dtype: torch.dtype, device: str):
    """(name, myops loss, PyTorch loss, argnums, per-sample args, in_dims): the losses of one sample."""
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    x, w, b = randn(batch, rows, hidden), randn(hidden), randn(hidden)
    logits = randn(batch, rows, vocab)
    target = torch.randint(0, vocab, (batch, rows), generator=g, device=device)
    head = 128  # rope: x [rows, hidden / 128, 128] a sample, with its own cos/sin [rows, 128] (per-sample positions)
    xr, cos, sin = x.view(batch, rows, hidden // head, head), randn(batch, rows, head), randn(batch, rows, head)

    def rotate_half(t):
        return torch.cat((-t[..., head // 2:], t[..., :head // 2]), -1)

    return [
        ("rms_norm (d weight)", lambda w, x: ops.rms_norm(x, w).float().square().sum(),
         lambda w, x: F.rms_norm(x, x.shape[-1:], w, 1e-6).float().square().sum(), 0, (w, x), (None, 0)),
        ("layer_norm (d weight, d bias)", lambda w, b, x: ops.layer_norm(x, w, b).float().square().sum(),
         lambda w, b, x: F.layer_norm(x, x.shape[-1:], w, b).float().square().sum(), (0, 1), (w, b, x),
         (None, None, 0)),
        ("swiglu (d gate, d up)", lambda a, c: ops.swiglu(a, c).float().square().sum(),
         lambda a, c: (F.silu(a) * c).float().square().sum(), (0, 1), (x, x.flip(-1)), (0, 0)),
        ("cross_entropy (d logits)", lambda lg, t: ops.cross_entropy(lg, t), lambda lg, t: F.cross_entropy(lg, t), 0,
         (logits, target), (0, 0)),
        ("rope, own positions (d x)", lambda a, c, s: ops.rope(a, c, s).float().square().sum(),
         lambda a, c, s: (a * c.unsqueeze(-2) + rotate_half(a) * s.unsqueeze(-2)).float().square().sum(), 0,
         (xr, cos, sin), (0, 0, 0)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rows", type=int, default=256, help="rows (tokens) a sample")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    dtype = DTYPES[a.dtype]
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, {a.dtype}, batch {a.batch}, a sample [{a.rows}, {a.hidden}] "
          f"(logits [{a.rows}, {a.vocab}])")
    print(f"{'loss':32} {'myops vmap':>11} {'torch vmap':>11} {'myops loop':>11}  (ms; loop / myops, torch / myops)")
    for title, mine, theirs, argnums, args, in_dims in cases(a.batch, a.rows, a.hidden, a.vocab, dtype, a.device):
        batched = [i for i, d in enumerate(in_dims) if d is not None]

        def loop():
            return [grad(mine, argnums)(*[t[s] if i in batched else t for i, t in enumerate(args)])
                    for s in range(a.batch)]

        t_mine = median_ms(lambda: vmap(grad(mine, argnums), in_dims=in_dims)(*args), a.device, a.reps)
        t_theirs = median_ms(lambda: vmap(grad(theirs, argnums), in_dims=in_dims)(*args), a.device, a.reps)
        t_loop = median_ms(loop, a.device, max(3, a.reps // 4))
        print(f"{title:32} {t_mine:11.3f} {t_theirs:11.3f} {t_loop:11.3f}  "
              f"({t_loop / t_mine:.2f}, {t_theirs / t_mine:.2f})")


if __name__ == "__main__":
    main()
