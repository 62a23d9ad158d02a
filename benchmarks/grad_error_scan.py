"""Scans short rows for gradients whose error vs a float64 reference exceeds the tests' rule (2x eager's error plus
a floor, tests/common.py) and prints, for the worst cases, the element where the error peaks: a tool to study
ill-conditioned gradients (N = 1, 2: the terms of dx cancel to eps * rstd^2).

    PYTHONPATH=.:tests python benchmarks/grad_error_scan.py [--device cuda] [--cases 400]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import ops
from common import EAGER_FACTOR, FLOOR


def errors(fn, eager, ref, x, w, g):
    """(ours, eager's, floor, worst element index) of dx, as tests/common.check_vs_eager measures them."""
    def grad(f, xx, ww, gg):
        xx = xx.detach().requires_grad_()
        ww = ww.detach().requires_grad_()
        out = f(xx, ww)
        return torch.autograd.grad(out, [xx, ww], gg)

    o = grad(fn, x, w, g.to(x.dtype).to(x.device))
    e = grad(eager, x.clone(), w.clone(), g.to(x.dtype).to(x.device))
    r = grad(ref, x.cpu().double(), w.cpu().double(), g.cpu())
    res = []
    for a, b, c in zip(o, e, r):
        a, b = a.cpu().double(), b.cpu().double()
        ours, theirs = (a - c).abs(), (b - c).abs()
        floor = FLOOR[x.dtype] * max(1.0, c.abs().max().item())
        res.append((ours.max().item(), theirs.max().item(), floor, int(ours.argmax()), a, b, c))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rms_ref = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    cases = {
        "rms_norm": (lambda x, w: ops.rms_norm(x, w), lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6), rms_ref),
        "layer_norm": (lambda x, w: ops.layer_norm(x, w), lambda x, w: F.layer_norm(x, x.shape[-1:], w),
                       lambda x, w: F.layer_norm(x, x.shape[-1:], w)),
    }
    for name, (fn, eager, ref) in cases.items():
        for n in (1, 2, 3, 4, 8):
            worst, fails = [], 0
            for seed in range(args.cases):
                gen = torch.Generator().manual_seed(seed)
                m = 1 + seed % 17
                x = torch.randn(m, n, generator=gen, dtype=torch.float64).to(dtype).to(args.device)
                w = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(args.device)
                g = torch.randn(m, n, generator=gen, dtype=torch.float64)
                for k, (ours, theirs, floor, i, a, b, c) in enumerate(errors(fn, eager, ref, x, w, g)):
                    ratio = (ours - floor) / theirs if theirs > 0 else (0.0 if ours <= floor else float("inf"))
                    if ours > EAGER_FACTOR * theirs + floor:
                        fails += 1
                    worst.append((ratio, seed, k, ours, theirs, floor, i, a.flatten()[i].item(),
                                  b.flatten()[i].item(), c.flatten()[i].item(),
                                  x.flatten()[i % x.numel()].item() if k == 0 else w[i].item()))
            worst.sort(key=lambda t: -t[0])
            print(f"{name} {args.dtype} N={n}: {fails} of {2 * args.cases} gradients break the rule; worst:")
            for t in worst[:3]:
                print("  ratio %.2f seed %d grad %s ours %.3g eager %.3g floor %.3g at %d: ours %.9g eager %.9g "
                      "ref %.9g input %.6g" % (t[0], t[1], "xw"[t[2]], *t[3:]))


if __name__ == "__main__":
    main()
