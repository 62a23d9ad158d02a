"""Run-to-run check of the row ops on the GPU: every output and gradient must come out bitwise the same on every
repetition (the kernels reduce in a fixed order, so a difference is a race between CTAs, e.g. in a cluster reduction
or the long-row backward's pipeline, that the sanitizers did not see).

    PYTHONPATH=. python benchmarks/repeat_rows.py [--reps 50] [--shapes 1024x65536,256x262144] [--ops ...]

Before each repetition a kernel over a random length of a 256 MB buffer runs on the same stream (and evicts some of
the L2), so that the op's CTAs start at other times relative to each other and to their data.
"""

from __future__ import annotations

import argparse

import torch

import ops

DEVICE = "cuda"
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = {
    "layer_norm": lambda x, r, w, b: (ops.layer_norm(x, w, b),),
    "rms_norm": lambda x, r, w, b: (ops.rms_norm(x, w),),
    "add_rms_norm": lambda x, r, w, b: ops.add_rms_norm(x, r, w),
    "softmax": lambda x, r, w, b: (ops.softmax(x),),
    "log_softmax": lambda x, r, w, b: (ops.log_softmax(x),),
}


def perturb(junk: torch.Tensor, gen: torch.Generator):
    """A kernel of random length before the op (the op's launch then finds the SMs busy for a random time)."""
    n = int(torch.randint(1, junk.numel(), (1,), generator=gen))
    junk[:n].mul_(1.0001)


def run(fn, inputs, grads):
    """Outputs and the gradients of every input that requires grad."""
    outs = fn(*inputs)
    leaves = [t for t in inputs if t.requires_grad]
    return [o.detach().clone() for o in outs] + [g for g in torch.autograd.grad(outs, leaves, grads, allow_unused=True)
                                                 if g is not None]


def inputs_for(shape, dtype):
    """x, residual, weight, bias: every one requires grad (an op's unused ones get no gradient)."""
    x, r = (torch.randn(shape, device=DEVICE, dtype=dtype) for _ in range(2))
    w, b = (torch.randn(shape[-1], device=DEVICE, dtype=dtype) for _ in range(2))
    return [t.requires_grad_() for t in (x, r, w, b)]


def bitwise(name, fn, shape, dtype, reps, junk, gen) -> int:
    """How many of reps repetitions differ from the first run in any output or gradient bit."""
    ins = inputs_for(shape, dtype)
    probe = fn(*ins)
    grads = [torch.randn_like(o) for o in probe]
    base = run(fn, ins, grads)
    bad = 0
    for rep in range(reps):
        perturb(junk, gen)
        got = run(fn, ins, grads)
        for i, (a, b) in enumerate(zip(got, base)):
            if not torch.equal(a, b):
                diff = (a.double() - b.double()).abs()
                rows = (diff.reshape(-1, diff.shape[-1]).amax(-1) > 0).nonzero().flatten().tolist() \
                    if diff.dim() > 1 else []
                print(f"  {name} {dtype} {shape} rep {rep}: tensor {i} differs, max {diff.max().item():.3g} "
                      f"at {divmod(int(diff.argmax()), shape[-1])}, rows {rows[:8]}{'...' if len(rows) > 8 else ''}")
                bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--shapes", default="1024x65536,256x262144,16384x4096")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    junk = torch.randn(64 << 20 if DEVICE == "cuda" else 1 << 10, device=DEVICE)  # 256 MB: also flushes the L2
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    total = 0
    for name in args.ops.split(","):
        fn = OPS[name]
        for dt in args.dtypes.split(","):
            for shape in shapes:
                bad = bitwise(name, fn, shape, DT[dt], args.reps, junk, gen)
                print(f"{name} {dt} {shape}: {bad} of {args.reps} repetitions differ")
                total += bad
    print(f"repeat_rows: {total} failures")


if __name__ == "__main__":
    main()
