"""A/B of one CPU kernel between two source trees, in one process: each tree's C file is compiled on its own with the
kernel library's C flags (torch_ops_jit.Config), both are loaded with ctypes, and the kernel is called alternately
from each (in blocks of a few calls), so that the VM's drift hits both sides alike (bench.py --device cpu's medians
of 20 swing by up to 2x on the 2-core VM). Prints the minimum time of each side and the largest difference between
their outputs (side outputs included: layer_norm's mean and rstd, its backward's dw/db workspace).

    PYTHONPATH=. python benchmarks/cpu_ab.py BASE_TREE NEW_TREE KERNEL [--shape 1024,1024] [--reps 200]
        [--dtypes fp32,bf16] [--cflags '-DMYOPS_ROW_SUM_LANES=8']

BASE_TREE / NEW_TREE: checkouts (e.g. `git worktree add /tmp/base HEAD` against the working tree `.`) whose kernel
has the same C signature. KERNEL, of KERNELS below: the C entry point and how to call it. One thread (the C kernels are single-threaded; the registration
layer splits rows across threads). Session 39 measured layer_norm's and softmax's backward with this.
"""
import argparse
import ctypes as C
import os
import shlex
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch_ops_jit  # noqa: E402  (the kernel library's C flags)

DTYPES = {"fp32": (torch.float32, 0), "fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}


class Operand(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("row_stride", C.c_int64), ("col_stride", C.c_int64)]


def operand(t: torch.Tensor) -> Operand:
    return Operand(t.data_ptr(), t.stride(0), t.stride(1))


def rows_case(n_in: int, prep=None):
    """fn(out, in_1, ..., in_n, M, N, dtype): the row ops' forward and backward ABI (softmax.c, log_softmax.c)."""
    def make(M, N, dt):
        ins = [torch.randn(M, N, dtype=dt) for _ in range(n_in)]
        if prep:
            ins = prep(ins)
        return ins

    def call(f, out, ins, M, N, code, ws):
        return f(operand(out), *[operand(t) for t in ins], M, N, code)
    return [Operand] * (1 + n_in) + [C.c_int64, C.c_int64, C.c_int], make, call, None


def ln_bwd_case():
    """myops_layer_norm_backward_cpu(dx, ws, dy, x, mean, w, M, N, eps, dtype), with the dw/db workspace."""
    def make(M, N, dt):
        x = torch.randn(M, N, dtype=dt)
        return [torch.randn(M, N, dtype=dt), x, x.float().mean(-1), torch.randn(N, dtype=dt)]

    def call(f, out, ins, M, N, code, ws):
        g, x, mean, w = ins
        return f(operand(out), ws.data_ptr(), operand(g), operand(x), mean.data_ptr(), w.data_ptr(), M, N, 1e-5, code)
    return ([Operand, C.c_void_p, Operand, Operand, C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_double, C.c_int],
            make, call, lambda M, N: torch.zeros(2, N, dtype=torch.float64))


def ln_fwd_case():
    """myops_layer_norm_cpu(y, mean, rstd, x, w, b, M, N, eps, dtype); the side output holds mean and rstd."""
    def make(M, N, dt):
        return [torch.randn(M, N, dtype=dt) * 3 + 10, torch.randn(N, dtype=dt), torch.randn(N, dtype=dt)]

    def call(f, out, ins, M, N, code, side):
        x, w, b = ins
        return f(operand(out), side[0].data_ptr(), side[1].data_ptr(), operand(x), w.data_ptr(), b.data_ptr(), M, N,
                 1e-5, code)
    return ([Operand, C.c_void_p, C.c_void_p, Operand, C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_double,
             C.c_int], make, call, lambda M, N: torch.zeros(2, M, dtype=torch.float32))


def _softmax_out(ins):
    return [ins[0], torch.softmax(ins[1].float(), -1).to(ins[1].dtype)]


def _log_softmax_out(ins):
    return [ins[0], torch.log_softmax(ins[1].float(), -1).to(ins[1].dtype)]


# kernel -> (C file stem, argtypes, inputs maker, caller, maker of a side output (M, N) -> tensor, or None: the dw/db
# workspace, mean and rstd; compared like the output)
KERNELS = {
    "myops_softmax_cpu": ("softmax",) + rows_case(1),
    "myops_log_softmax_cpu": ("log_softmax",) + rows_case(1),
    "myops_softmax_backward_cpu": ("softmax",) + rows_case(2, _softmax_out),
    "myops_log_softmax_backward_cpu": ("log_softmax",) + rows_case(2, _log_softmax_out),
    "myops_layer_norm_cpu": ("layer_norm",) + ln_fwd_case(),
    "myops_layer_norm_backward_cpu": ("layer_norm",) + ln_bwd_case(),
}


def build(tree: str, stem: str, out: str, cflags: list[str]) -> C.CDLL:
    src = os.path.join(tree, "csrc", "cpu", f"{stem}.c")
    flags = torch_ops_jit.Config().cflags + cflags
    subprocess.run(["cc", *flags, "-shared", f"-I{os.path.join(tree, 'csrc')}", src, "-o", out], check=True)
    return C.CDLL(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("kernel", choices=sorted(KERNELS))
    p.add_argument("--shape", default="1024,1024")
    p.add_argument("--reps", type=int, default=200, help="calls of each side")
    p.add_argument("--block", type=int, default=5, help="consecutive calls of one side before the other's (layer_norm "
                   "backward fp32 / bf16, session 39: one call a side read 300 / 393 us where blocks of 5 read 222-271 "
                   "/ 275-387 in the same minutes)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--cflags", default="", help="extra C flags for both builds")
    a = p.parse_args()
    stem, argtypes, make, call, side = KERNELS[a.kernel]
    M, N = (int(s) for s in a.shape.split(","))
    with tempfile.TemporaryDirectory() as d:
        fns = []
        for i, tree in enumerate((a.base, a.new)):
            f = getattr(build(tree, stem, os.path.join(d, f"{i}.so"), shlex.split(a.cflags)), a.kernel)
            f.argtypes, f.restype = argtypes, C.c_int
            fns.append(f)
        torch.manual_seed(0)
        for name in a.dtypes.split(","):
            dt, code = DTYPES[name]
            ins = make(M, N, dt)
            outs = [torch.empty(M, N, dtype=dt) for _ in fns]
            wss = [side(M, N) if side else None for _ in fns]
            best = [float("inf")] * 2
            for _ in range(max(1, a.reps // a.block)):
                for i, f in enumerate(fns):
                    for _ in range(a.block):
                        t0 = time.perf_counter()
                        rc = call(f, outs[i], ins, M, N, code, wss[i])
                        best[i] = min(best[i], (time.perf_counter() - t0) * 1e6)
                        if rc:
                            raise SystemExit(f"{a.kernel} returned {rc}")
            diff = (outs[0].double() - outs[1].double()).abs().max().item()
            if side:  # (a workspace sums every call's terms: both sides made the same calls)
                diff = max(diff, (wss[0].double() - wss[1].double()).abs().max().item())
            print(f"{a.kernel} {name} [{M}, {N}]: base {best[0]:.0f} us, new {best[1]:.0f} us "
                  f"({best[1] / best[0]:.2f}x); max |new - base| {diff:.3g}")


if __name__ == "__main__":
    main()
