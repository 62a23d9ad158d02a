"""Times every myops op against eager PyTorch and torch.compile of the same expression, forward and
forward+backward, and reports time, achieved bandwidth (minimum bytes moved) and its share of the measured
device-to-device copy bandwidth.

    PYTHONPATH=. python benchmarks/bench.py [--ops add,relu] [--dtypes bf16,fp32] [--shape 16384,4096]
        [--no-compile] [--no-backward] [--markdown results.md] [--device cpu]

On CUDA, times with triton.testing.do_bench (median; it flushes L2) or, without triton, a CUDA-event loop that
zeroes a 256 MB buffer before every run. ``--device cpu`` is a smoke run of the same logic (perf_counter median).
Correctness of myops vs eager is checked first; mismatches are listed after the table (exit status 1).
Adding an op is one ``Case`` in ``CASES``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import ops

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
# assert_close tolerances (rtol, atol) of myops vs eager; atol grows with sqrt(terms summed per output).
TOL = {torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3), torch.float32: (3e-5, 1e-5),
       torch.float64: (1e-7, 1e-7)}
Inputs = tuple  # positional arguments of both implementations: tensors and python scalars


def tensors(xs: Sequence) -> list[torch.Tensor]:
    """The tensors among xs (outputs may be one tensor or a sequence)."""
    xs = [xs] if isinstance(xs, torch.Tensor) else xs
    return [x for x in xs if isinstance(x, torch.Tensor)]


def io_bytes(inputs: Sequence, outputs) -> int:
    """Minimum traffic: every input tensor read once, every output tensor written once."""
    return sum(t.numel() * t.element_size() for t in tensors(inputs) + tensors(outputs))


def randn(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Normal random values (never zeros: they would hide wrong results and make relu/gelu trivially cheap)."""
    return torch.randn(shape, dtype=dtype, device=device)


# Input makers: (shape, dtype, device) -> the positional arguments of both implementations.
def unary(shape, dtype, device) -> Inputs:
    return (randn(*shape, dtype=dtype, device=device),)


def binary(shape, dtype, device) -> Inputs:
    return unary(shape, dtype, device) + unary(shape, dtype, device)


def with_bias(shape, dtype, device) -> Inputs:
    return unary(shape, dtype, device) + (randn(shape[-1], dtype=dtype, device=device),)


def with_bias_scale(shape, dtype, device) -> Inputs:
    return with_bias(shape, dtype, device) + (0.5,)


@dataclass(frozen=True)
class Case:
    """One benchmarked expression: op is the myops stem that --ops selects, variant tells apart cases of one op."""
    op: str
    make_inputs: Callable[[tuple[int, ...], torch.dtype, torch.device], Inputs]
    myops_fn: Callable
    torch_fn: Callable
    bytes: Callable[[Sequence, object], int] = io_bytes
    backward: bool = False
    variant: str = ""
    shape: tuple[int, ...] | None = None  # this case's input shape (default: --shape); an explicit --shape wins

    @property
    def name(self) -> str:
        return f"{self.op}({self.variant})" if self.variant else self.op


CASES = [
    Case("add", binary, ops.add, lambda a, b: a + b),
    Case("mul", binary, ops.mul, lambda a, b: a * b, backward=True),
    Case("relu", unary, ops.relu, lambda x: torch.relu(x), backward=True),
    Case("scale_bias_relu", with_bias_scale, ops.scale_bias_relu, lambda x, b, s: torch.relu(x * s + b),
         backward=True),
    Case("bias_gelu", with_bias, ops.bias_gelu, lambda x, b: F.gelu(x + b, approximate="tanh"), backward=True),
    Case("swiglu", binary, ops.swiglu, lambda g, u: F.silu(g) * u, backward=True),
    Case("geglu", binary, ops.geglu, lambda g, u: F.gelu(g, approximate="tanh") * u, backward=True),
    Case("sum", unary, lambda x: ops.sum(x, -1), lambda x: x.sum(-1), variant="dim=-1"),
    Case("sum", unary, lambda x: ops.sum(x, 0), lambda x: x.sum(0), variant="dim=0"),
]


def make_timer(device: torch.device) -> tuple[str, Callable[[Callable[[], object]], float]]:
    """(name, time_us): time_us(fn) is the median run time of fn in microseconds on device."""
    if device.type == "cpu":
        return "perf_counter median", time_cpu
    try:
        import triton.testing
    except ImportError:
        return "CUDA events median (L2 flushed)", time_cuda_events
    return "triton do_bench median", lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100,
                                                                           return_mode="median") * 1e3


def time_cpu(fn: Callable[[], object], warmup: int = 3, reps: int = 20) -> float:
    """Median wall time of fn (µs)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def time_cuda_events(fn: Callable[[], object], warmup: int = 10, reps: int = 100) -> float:
    """Median CUDA-event time of fn (µs), zeroing a 256 MB buffer before each run to flush L2."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3


def copy_gbps(device: torch.device, time_us) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written): the roofline the rows are compared to."""
    n = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.randn(n // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * n / time_us(lambda: dst.copy_(src)) / 1e3


def with_grad(inputs: Inputs) -> Inputs:
    """Fresh leaf copies of the float tensors that require grad; other arguments unchanged."""
    return tuple(x.detach().clone().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point()
                 else x for x in inputs)


def fwd_bwd(fn: Callable, inputs: Inputs, grad: torch.Tensor) -> Callable[[], tuple]:
    """A closure running fn forward and backward (gradient grad) to every input that requires grad."""
    leaves = [x for x in tensors(inputs) if x.requires_grad]
    return lambda: torch.autograd.grad(fn(*inputs), leaves, grad)


def check(label: str, got, want, inputs: Inputs) -> str:
    """'' if myops matches eager (tolerance by dtype, atol widened for sums), else the first mismatch."""
    rtol, atol = TOL[tensors(inputs)[0].dtype]
    for g, w in zip(tensors(got), tensors(want)):
        terms = max(t.numel() for t in tensors(inputs)) // max(g.numel(), 1)
        try:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol * terms**0.5)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return f"{label}: " + "; ".join(lines[1:3])
    return ""


def bench_case(case: Case, dtype: torch.dtype, args, time_us, compiled: Callable | None) -> tuple[list, list]:
    """Rows [op, dtype, pass, impl, µs, GB/s] for one case and dtype, and the correctness failures."""
    shape = args.shape if args.shape_given or case.shape is None else case.shape
    inputs = case.make_inputs(shape, dtype, args.device)
    impls = {"myops": case.myops_fn, "eager": case.torch_fn} | ({"compile": compiled} if compiled else {})
    label = f"{case.name} {DTYPE_NAMES[dtype]}"
    out = case.myops_fn(*inputs)
    failures = [check(f"{label} fwd", out, case.torch_fn(*inputs), inputs)]
    runs = [("fwd", impl, lambda fn=fn: fn(*inputs), case.bytes(inputs, out)) for impl, fn in impls.items()]
    if args.backward and case.backward:
        inputs = with_grad(inputs)
        grad = torch.randn_like(out)
        grads = {impl: fwd_bwd(fn, inputs, grad) for impl, fn in impls.items()}
        failures.append(check(f"{label} grads", grads["myops"](), grads["eager"](), inputs))
        nbytes = case.bytes(inputs, out) + case.bytes(inputs + (grad,), tensors(inputs))  # bwd re-reads inputs
        runs += [("fwd+bwd", impl, fn, nbytes) for impl, fn in grads.items()]
    rows = []
    for mode, impl, fn, nbytes in runs:
        with torch.no_grad() if mode == "fwd" else torch.enable_grad():
            fn()  # compiles (torch.compile) outside the timed region, which do_bench sizes its loop from
            us = time_us(fn)
        rows.append([case.name, "x".join(map(str, shape)), DTYPE_NAMES[dtype], mode, impl, us, nbytes / us / 1e3])
    return rows, [f for f in failures if f]


def format_table(headers: list[str], rows: list[list], markdown: bool = False) -> str:
    """Aligned plain-text table, or a markdown table."""
    cells = [headers] + [[f"{c:.1f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines[:1] + ["|" + "---|" * len(headers)] + lines[1:])
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) if i < 5 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in cells)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line options, with --ops/--dtypes/--shape parsed into lists, dtypes and a tuple."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default=",".join(dict.fromkeys(c.op for c in CASES)), help="comma-separated op stems")
    p.add_argument("--dtypes", default="bf16,fp32", help=f"comma-separated, of {','.join(DTYPES)}")
    p.add_argument("--shape", help="comma-separated input shape for every case (default: the case's own shape, "
                   "else 16384,4096)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile rows")
    p.add_argument("--backward", action=argparse.BooleanOptionalAction, default=True, help="time forward+backward")
    p.add_argument("--markdown", metavar="PATH", help="also write the table as markdown to PATH")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args(argv)
    args.ops = args.ops.split(",")
    unknown = set(args.ops) - {c.op for c in CASES}
    if unknown:
        p.error(f"unknown ops: {sorted(unknown)}")
    args.dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    args.shape_given = args.shape is not None
    args.shape = tuple(int(s) for s in (args.shape or "16384,4096").split(","))
    args.device = torch.device(args.device)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the selected cases, prints the table (and writes --markdown); 1 if a correctness check failed."""
    args = parse_args(argv)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print("bench.py: CUDA is not available; nothing to time (use --device cpu for a smoke run).")
        return 0
    timer, time_us = make_timer(args.device)
    copy_bw = copy_gbps(args.device, time_us)
    rows, failures = [], []
    for case in (c for c in CASES if c.op in args.ops):
        compiled = torch.compile(case.torch_fn, fullgraph=True) if args.compile else None
        for dtype in args.dtypes:
            try:
                case_rows, case_failures = bench_case(case, dtype, args, time_us, compiled)
            except Exception as e:  # one broken op or compile must not hide the other rows
                case_rows, case_failures = [], [f"{case.name} {DTYPE_NAMES[dtype]}: {type(e).__name__}: {e}"]
            rows += [r + [100 * r[-1] / copy_bw] for r in case_rows]
            failures += case_failures
    device = torch.cuda.get_device_name() if args.device.type == "cuda" else platform.processor() or "cpu"
    header = [f"device: {device}", f"torch: {torch.__version__}", f"date: {datetime.datetime.now():%Y-%m-%d %H:%M}",
              f"command: python {shlex.join(sys.argv)}", f"default shape: {list(args.shape)}",
              f"timer: {timer}", f"copy bandwidth: {copy_bw:.1f} GB/s"]
    headers = ["op", "shape", "dtype", "pass", "impl", "time (µs)", "GB/s", "% copy"]
    failed = [f"FAIL: {f}" for f in failures]
    print("\n".join(header[:2] + header[4:]), format_table(headers, rows), *failed, sep="\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(f"- {h}" for h in header) + "\n\n" + format_table(headers, rows, markdown=True) + "\n")
            f.writelines(f"\n{line}\n" for line in failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
