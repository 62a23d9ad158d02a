"""Times every myops op against eager PyTorch and torch.compile of the same expression, forward and
forward+backward, and reports time, achieved bandwidth (minimum bytes moved) and its share of the measured
device-to-device copy bandwidth.

    PYTHONPATH=. python benchmarks/bench.py [--ops add,relu] [--dtypes bf16,fp32] [--shape 16384,4096]
        [--no-compile] [--no-backward] [--impls myops] [--variants-only] [--cases default,N=1024]
        [--markdown results.md] [--device cpu]

On CUDA, times with CUDA events (median of 100 runs, each after a 256 MB L2 flush and a GPU sleep that lets the
host queue the run ahead, so host overhead is not timed; see make_timer). The flush reads a buffer, leaving L2 clean;
``--flush dirty`` zeroes one instead (triton's do_bench), whose dirty lines the timed op then writes back. ``--device cpu`` is a smoke run of the same logic (perf_counter median).
Correctness of myops vs eager is checked first; mismatches are listed after the table (exit status 1).
Adding an op is one ``Case`` in ``CASES``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
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


def binary_t(shape, dtype, device) -> Inputs:
    """Two operands of shape, each the transpose of a contiguous tensor (a weight's .t(), activations in [N, M]): the
    outputs follow the first operand's layout, as eager's, and stay one pass over memory."""
    return tuple(t.t() for t in binary(shape[::-1], dtype, device))


def with_bias(shape, dtype, device) -> Inputs:
    return unary(shape, dtype, device) + (randn(shape[-1], dtype=dtype, device=device),)


def with_bias_scale(shape, dtype, device) -> Inputs:
    return with_bias(shape, dtype, device) + (0.5,)


def with_weight(shape, dtype, device) -> Inputs:
    return unary(shape, dtype, device) + (randn(shape[-1], dtype=dtype, device=device),)


def with_weight_bias(shape, dtype, device) -> Inputs:
    return with_weight(shape, dtype, device) + (randn(shape[-1], dtype=dtype, device=device),)


def with_residual_weight(shape, dtype, device) -> Inputs:
    return binary(shape, dtype, device) + (randn(shape[-1], dtype=dtype, device=device),)


def logits_target(shape, dtype, device) -> Inputs:
    return unary(shape, dtype, device) + (torch.randint(0, shape[-1], shape[:-1], device=device),)


def rms_norm_eager(x, w, eps=1e-6):
    """The issue's expression: fp32 math (fp64 for fp64, the float64 reference), output in x's dtype."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.to(acc)).to(x.dtype)


def layer_norm_eager(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def add_rms_norm_eager(x, r, w):
    s = x + r
    return rms_norm_eager(s, w), s


def row_cases(op, make_inputs, myops_fn, torch_fn, long_rows=True, ref64=False, odd=False):
    """An op at the default shape and, with long_rows, at rows of 128 (a head's dimension: the norms of query and
    key heads), 768, 1024, 1280, 2048 (common hidden sizes), 65536 and 262144 (about the same element count); odd:
    also rows of an odd length (each row at another offset from a 16-byte boundary: odd key lengths, GPT-2's
    vocabulary), 127, 1001 and 50257."""
    shapes = ((524288, 128), (87040, 768), (65536, 1024), (52416, 1280), (32768, 2048), (1024, 65536), (256, 262144))
    shapes += ((262144, 127), (65536, 1001), (4096, 50257)) if odd else ()
    cases = [Case(op, make_inputs, myops_fn, torch_fn, backward=True, ref64=ref64)]
    if long_rows:
        cases += [Case(op, make_inputs, myops_fn, torch_fn, backward=True, variant=f"N={n}", shape=(m, n),
                       ref64=ref64) for m, n in shapes]
    return cases


def rope_inputs(heads_first: bool) -> Callable[[tuple[int, ...], torch.dtype, torch.device], Inputs]:
    """Input maker for rope: x of the shape ([S, H, D], or [..., H, S, D] with heads_first) and cos/sin [S, D] of
    random angles (broadcast over the batch and heads, as a model's rotary cache)."""
    def make(shape, dtype, device) -> Inputs:
        S, D = shape[-2] if heads_first else shape[-3], shape[-1]
        theta = torch.rand(S, D, device=device, dtype=torch.float64) * 6.283185307179586
        return randn(*shape, dtype=dtype, device=device), theta.cos().to(dtype), theta.sin().to(dtype)
    return make


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face Llama's rotate_half."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_eager(heads_first: bool) -> Callable:
    """The Hugging Face expression, cos/sin unsqueezed over the heads dim."""
    unsq = -3 if heads_first else -2
    return lambda x, cos, sin: x * cos.unsqueeze(unsq) + rotate_half(x) * sin.unsqueeze(unsq)


def rope_bwd_bytes(inputs: Inputs, grad: Sequence[torch.Tensor]) -> int:
    """rope's backward for x alone: reads grad, cos and sin, writes dx (x itself is not needed)."""
    return io_bytes(tuple(grad) + tuple(inputs[1:3]), [inputs[0]])


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
    grad_inputs: tuple[int, ...] | None = None  # inputs differentiated in the fwd+bwd rows (default: every float one)
    # Minimum traffic of the backward alone, (inputs, grad) -> bytes (default: grad and every input read, the
    # differentiated inputs' gradients written).
    bwd_bytes: Callable[[Inputs, Sequence[torch.Tensor]], int] | None = None
    # Check myops against torch_fn in float64 rather than against eager in the dtype: for expressions whose eager
    # roundings do not stay within the dtype's tolerance (rope: a*cos - b*sin rounds both products, which cancel).
    ref64: bool = False

    @property
    def name(self) -> str:
        return f"{self.op}({self.variant})" if self.variant else self.op


CASES = [
    Case("add", binary, ops.add, lambda a, b: a + b),
    Case("add", binary_t, ops.add, lambda a, b: a + b, variant="transposed"),
    Case("mul", binary, ops.mul, lambda a, b: a * b, backward=True),
    Case("relu", unary, ops.relu, lambda x: torch.relu(x), backward=True),
    Case("scale_bias_relu", with_bias_scale, ops.scale_bias_relu, lambda x, b, s: torch.relu(x * s + b),
         backward=True),
    Case("bias_gelu", with_bias, ops.bias_gelu, lambda x, b: F.gelu(x + b, approximate="tanh"), backward=True),
    Case("swiglu", binary, ops.swiglu, lambda g, u: F.silu(g) * u, backward=True),
    Case("swiglu", binary_t, ops.swiglu, lambda g, u: F.silu(g) * u, backward=True, variant="transposed"),
    Case("geglu", binary, ops.geglu, lambda g, u: F.gelu(g, approximate="tanh") * u, backward=True),
    Case("sum", unary, lambda x: ops.sum(x, -1), lambda x: x.sum(-1), variant="dim=-1"),
    Case("sum", unary, lambda x: ops.sum(x, 0), lambda x: x.sum(0), variant="dim=0"),
    Case("sum", unary, lambda x: ops.sum(x), lambda x: x.sum(), variant="dim=None"),
    *row_cases("layer_norm", with_weight_bias, ops.layer_norm, layer_norm_eager),
    # a frozen affine (as in LoRA fine-tuning): x alone differentiated, so the backward computes no weight gradient
    Case("layer_norm", with_weight_bias, ops.layer_norm, layer_norm_eager, backward=True, variant="frozen",
         shape=(256, 262144), grad_inputs=(0,)),
    *row_cases("rms_norm", with_weight, ops.rms_norm, rms_norm_eager),
    # checked against float64: eager's bf16 gradient of s rounds the norm's part before adding grad_s (two roundings),
    # which put 1 element in 67M 0.012-0.016 away from myops' single rounding in about 1 run of 4 (the long-row
    # variants were checked against eager until session 15: the "unexplained" failures of sessions 13 and 14)
    *row_cases("add_rms_norm", with_residual_weight, ops.add_rms_norm, add_rms_norm_eager, ref64=True),
    *row_cases("softmax", unary, ops.softmax, lambda x: torch.softmax(x, -1), odd=True),
    *row_cases("log_softmax", unary, ops.log_softmax, lambda x: torch.log_softmax(x, -1), odd=True),
    Case("cross_entropy", logits_target, ops.cross_entropy, F.cross_entropy, backward=True, shape=(4096, 32000)),
    Case("cross_entropy", logits_target, ops.cross_entropy, F.cross_entropy, backward=True, shape=(1024, 262144),
         variant="V=262144"),
    # check_target=False: no host wait for the target check (F.cross_entropy and compile check by device-side assert)
    Case("cross_entropy", logits_target, lambda x, t: ops.cross_entropy(x, t, check_target=False), F.cross_entropy,
         backward=True, shape=(4096, 32000), variant="unchecked"),
    Case("cross_entropy", logits_target, lambda x, t: ops.cross_entropy(x, t, check_target=False), F.cross_entropy,
         backward=True, shape=(1024, 262144), variant="V=262144 unchecked"),
    # many short rows: the loss's reduction over M = 262144 rows (MYOPS_CE_PARTS)
    Case("cross_entropy", logits_target, lambda x, t: ops.cross_entropy(x, t, check_target=False), F.cross_entropy,
         backward=True, shape=(262144, 1000), variant="V=1000 unchecked"),
    # GPT-2's vocabulary: rows of an odd length, each at another offset from a 16-byte boundary (MYOPS_CE_MISALIGNED)
    Case("cross_entropy", logits_target, lambda x, t: ops.cross_entropy(x, t, check_target=False), F.cross_entropy,
         backward=True, shape=(4096, 50257), variant="V=50257 unchecked"),
    Case("cross_entropy", logits_target, lambda x, t: ops.cross_entropy(x, t, label_smoothing=0.1, check_target=False),
         lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), backward=True, shape=(4096, 32000),
         variant="smoothing unchecked", ref64=True),  # (fp16 eager sums a row's 32000 log-probabilities to inf)
    # cos/sin are buffers in a model: only x is differentiated.
    Case("rope", rope_inputs(False), ops.rope, rope_eager(False), backward=True, variant="[S,H,D]",
         shape=(16384, 32, 128), grad_inputs=(0,), bwd_bytes=rope_bwd_bytes, ref64=True),
    Case("rope", rope_inputs(True), lambda x, c, s: ops.rope(x, c, s, heads_first=True), rope_eager(True),
         backward=True, variant="heads_first", shape=(4, 32, 4096, 128), grad_inputs=(0,), bwd_bytes=rope_bwd_bytes,
         ref64=True),
]


def make_timer(device: torch.device, flush: str = "clean") -> tuple[str, Callable[[Callable[[], object]], float]]:
    """(name, time_us): time_us(fn) is the median run time of fn in microseconds on device.

    On CUDA, each timed run is queued behind an L2 flush and a GPU sleep, so that the host enqueues fn's launches
    while the GPU is still busy: the events then time the GPU work alone. Without the sleep (triton's do_bench),
    forward+backward rows measured the host's autograd and launch overhead instead, and moved by up to 2x from run to
    run on the same kernels (BENCHMARKS.md). flush: see time_cuda_events.
    """
    if device.type == "cpu":
        return "perf_counter median", time_cpu
    return (f"CUDA events median (L2 flushed {flush}, host run-ahead)",
            lambda fn: time_cuda_events(fn, flush=flush))


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


def l2_flush(kind: str) -> Callable[[], object]:
    """The L2 flush of time_cuda_events: "clean" reads a 256 MB buffer, "dirty" zeroes it, "dirty+clean" zeroes it,
    then reads it (benchmarks/flush_ab.py's check that the difference is the dirty lines' write-back)."""
    buf = torch.zeros(64 << 20, dtype=torch.int32, device="cuda")  # 256 MB, several times any L2
    steps = {"clean": [buf.max], "dirty": [buf.zero_], "dirty+clean": [buf.zero_, buf.max]}
    if kind not in steps:
        raise ValueError(f"flush must be one of {sorted(steps)}, not {kind!r}")
    return lambda: [step() for step in steps[kind]]


def time_cuda_events(fn: Callable[[], object], warmup: int = 10, reps: int = 100,
                     sleep_cycles: int = 4_000_000, flush: str = "clean") -> float:
    """Median CUDA-event time of fn (µs): before each run, L2 is flushed and the GPU sleeps for sleep_cycles (about
    2 ms) while the host queues fn, so host overhead stays out of the time. An op that synchronizes with the host
    inside fn is timed with that wait.

    flush "clean" reads a 256 MB buffer: L2 then holds clean lines, and the dirty lines of the run before (its
    outputs) are written back before the timer starts. "dirty" zeroes the buffer, as triton's do_bench does: L2 is
    then full of dirty lines (its 50 MB on an H100 or H200) that the timed run evicts, writing them back to DRAM on
    its own time. That write-back weighs on small runs: on an H100 a 128 MB copy measured 95.1% of the 1 GiB copy
    behind a zeroed flush against 101.3% behind a read one (BENCHMARKS.md, session 32).
    """
    flush_l2 = l2_flush(flush)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        flush_l2()
        torch.cuda._sleep(sleep_cycles)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3


def gpu_warmup(seconds: float) -> None:
    """Keeps the GPU copying for about `seconds` before anything is timed. On a freshly started H200 the first case
    timed ran about 8 points of copy bandwidth low (layer_norm bf16 forward 78.0 against 86.1-86.2 in every later
    position, BENCHMARKS.md session 8), though the copy bandwidth had just been measured; the suspicion is clocks still
    ramping, which a long enough stretch of work settles."""
    if seconds <= 0:
        return
    src = torch.empty(1 << 26, device="cuda")  # 256 MB
    dst = torch.empty_like(src)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            dst.copy_(src)
        torch.cuda.synchronize()


def copy_gbps(device: torch.device, time_us) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written): the roofline the rows are compared to."""
    n = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.randn(n // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * n / time_us(lambda: dst.copy_(src)) / 1e3


def with_grad(inputs: Inputs, which: Sequence[int] | None = None) -> Inputs:
    """Fresh leaf copies of the float tensors (those listed in which, if given) that require grad; other arguments
    unchanged."""
    return tuple(x.detach().clone().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point()
                 and (which is None or i in which) else x for i, x in enumerate(inputs))


def as64(inputs: Inputs) -> Inputs:
    """float64 copies of the float tensors (requiring grad like the originals); other arguments unchanged."""
    return tuple(x.detach().double().requires_grad_(x.requires_grad)
                 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)


def fwd_bwd(fn: Callable, inputs: Inputs, grad: torch.Tensor) -> Callable[[], tuple]:
    """A closure running fn forward and backward (gradient grad) to every input that requires grad."""
    leaves = [x for x in tensors(inputs) if x.requires_grad]
    return lambda: torch.autograd.grad(tensors(fn(*inputs)), leaves, grad)


def check(label: str, got, want, inputs: Inputs) -> str:
    """'' if myops matches eager, or a float64 want (tolerance by dtype, atol widened for sums), else the first
    mismatch."""
    rtol, atol = TOL[tensors(inputs)[0].dtype]
    for g, w in zip(tensors(got), tensors(want)):
        terms = max(t.numel() for t in tensors(inputs)) // max(g.numel(), 1)
        try:
            torch.testing.assert_close(g.to(w.dtype), w, rtol=rtol, atol=atol * terms**0.5)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return f"{label}: " + "; ".join(lines[1:3])
    return ""


def check_rule(label: str, got, eager, ref) -> str:
    """'' if every tensor of got is at most 2x as far from the float64 ref as eager is (max abs, plus 4 units in the
    last place of the dtype at the reference's scale), else the first that is not."""
    for g, e, r in zip(tensors(got), tensors(eager), tensors(ref)):
        floor = 4 * torch.finfo(g.dtype).eps * max(1.0, r.abs().max().item() if r.numel() else 1.0)
        err, eager_err = ((t.double() - r).abs().max().item() if r.numel() else 0.0 for t in (g, e))
        if not err <= 2 * eager_err + floor:
            return f"{label}: {err:.3g} off float64, eager {eager_err:.3g}"
    return ""


def bench_case(case: Case, dtype: torch.dtype, args, time_us, compiled: Callable | None) -> tuple[list, list]:
    """Rows [op, dtype, pass, impl, µs, GB/s] for one case and dtype, and the correctness failures."""
    shape = args.shape if args.shape_given or case.shape is None else case.shape
    inputs = case.make_inputs(shape, dtype, args.device)
    impls = {"myops": case.myops_fn, "eager": case.torch_fn} | ({"compile": compiled} if compiled else {})
    impls = {k: v for k, v in impls.items() if k in args.impls}
    label = f"{case.name} {DTYPE_NAMES[dtype]}"
    out = case.myops_fn(*inputs)
    # On the CPU, eager's algorithms differ from ours (and its bf16 reductions are the less accurate side: layer_norm
    # bf16 weight gradients over 4096 rows come out 10.5 off float64, myops 0.5), so a mismatch with eager is judged by
    # the rule instead: at most twice eager's error against float64 (tests/common.py check_vs_eager).
    lax = args.device.type == "cpu" and not case.ref64
    ref = case.torch_fn(*(as64(inputs) if case.ref64 else inputs))
    failures = [check(f"{label} fwd", out, ref, inputs)]
    if lax and failures[0]:
        failures[0] = check_rule(f"{label} fwd", out, ref, case.torch_fn(*as64(inputs)))
    runs = [("fwd", impl, lambda fn=fn: fn(*inputs), case.bytes(inputs, out)) for impl, fn in impls.items()]
    if args.backward and case.backward:
        inputs = with_grad(inputs, case.grad_inputs)
        grad = [torch.randn_like(t) for t in tensors(out)]
        grads = {impl: fwd_bwd(fn, inputs, grad) for impl, fn in impls.items()}
        # (grads holds only the timed implementations: --impls may leave eager or myops out)
        want = (fwd_bwd(case.torch_fn, as64(inputs), [g.double() for g in grad])() if case.ref64
                else grads.get("eager", fwd_bwd(case.torch_fn, inputs, grad))())
        got = grads.get("myops", fwd_bwd(case.myops_fn, inputs, grad))()
        failures.append(check(f"{label} grads", got, want, inputs))
        # (and on the GPU too: each side's backward reads its own forward's output, so one rounding apart there comes
        # back amplified. H200, log_softmax bf16 [1048576, 128]: 1 gradient of 134M 0.0176 from eager's, against an
        # atol of 0.01: outputs -3.3125 and -3.328125 (float64 -3.3203, a tie; 2^-6 apart) times the row's sum of
        # gradients, 28.4; both 0.0554 off float64 at most, session 53)
        if failures[-1] and not case.ref64:
            ref = fwd_bwd(case.torch_fn, as64(inputs), [g.double() for g in grad])()
            failures[-1] = check_rule(f"{label} grads", got, want, ref)
        leaves = [t for t in tensors(inputs) if t.requires_grad]
        bwd = case.bwd_bytes(inputs, grad) if case.bwd_bytes else case.bytes(inputs + tuple(grad), leaves)
        nbytes = case.bytes(inputs, out) + bwd  # the backward re-reads the inputs it needs
        runs += [("fwd+bwd", impl, fn, nbytes) for impl, fn in grads.items()]
    rows = []
    for mode, impl, fn, nbytes in runs:
        with torch.no_grad() if mode == "fwd" else torch.enable_grad():
            fn()  # compiles (torch.compile) outside the timed region, which do_bench sizes its loop from
            extra = peak_extra_mb(fn, args.device)
            us = time_us(fn)
        rows.append([case.name, "x".join(map(str, shape)), DTYPE_NAMES[dtype], mode, impl, us, nbytes / us / 1e3,
                     extra])
    return rows, [f for f in failures if f]


def peak_extra_mb(fn: Callable[[], object], device: torch.device) -> float:
    """Peak CUDA memory one call of fn allocates beyond what was allocated before it (MB), outputs included."""
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    del out
    return (torch.cuda.max_memory_allocated() - base) / 2**20


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
    p.add_argument("--no-variants", dest="variants", action="store_false",
                   help="only each op's default shape (skip the long-row and layout variants)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile rows")
    p.add_argument("--impls", default="myops,eager,compile", help="comma-separated rows to time, of myops, eager, "
                   "compile (e.g. myops alone when tuning)")
    p.add_argument("--variants-only", action="store_true", help="only the long-row and layout variants")
    p.add_argument("--cases", help="comma-separated variant names to run, 'default' for each op's own shape (e.g. "
                   "default,N=1024,N=128: several shapes in one process, without the start-up and warm-up of one run "
                   "per --shape; rope's '[S,H,D]' keeps its commas)")
    p.add_argument("--backward", action=argparse.BooleanOptionalAction, default=True, help="time forward+backward")
    p.add_argument("--markdown", metavar="PATH", help="also write the table as markdown to PATH")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--flush", default="clean", choices=["clean", "dirty"],
                   help="L2 flush before each timed run: read a 256 MB buffer (clean) or zero it (dirty, as triton's "
                   "do_bench; the timed run then writes back the flush's dirty lines)")
    p.add_argument("--warmup-s", type=float, default=2.0,
                   help="seconds of GPU work before the first timing (0: none)")
    args = p.parse_args(argv)
    args.ops = args.ops.split(",")
    args.impls = args.impls.split(",")
    args.compile = args.compile and "compile" in args.impls
    unknown = set(args.ops) - {c.op for c in CASES}
    if unknown:
        p.error(f"unknown ops: {sorted(unknown)}")
    args.dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    # (commas inside brackets belong to the name: rope's "[S,H,D]")
    args.cases = None if args.cases is None else set(re.split(r",(?![^\[]*\])", args.cases))
    if args.cases is not None:
        unknown = args.cases - {c.variant or "default" for c in CASES}
        if unknown:
            p.error(f"unknown cases: {sorted(unknown)}")
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
    timer, time_us = make_timer(args.device, args.flush)
    if args.device.type == "cuda":
        gpu_warmup(args.warmup_s)
    copy_bw = copy_gbps(args.device, time_us)
    rows, failures = [], []
    for case in (c for c in CASES if c.op in args.ops and (args.variants or not c.variant)
                 and (c.variant or not args.variants_only)
                 and (args.cases is None or (c.variant or "default") in args.cases)):
        if args.compile:
            # a fresh Dynamo cache per case: the variants of one op share its expression's code object, and five
            # shapes x two dtypes passed the recompile limit (8): fullgraph=True then fails
            torch._dynamo.reset()
        compiled = torch.compile(case.torch_fn, fullgraph=True) if args.compile else None
        for dtype in args.dtypes:
            try:
                case_rows, case_failures = bench_case(case, dtype, args, time_us, compiled)
            except Exception as e:  # one broken op or compile must not hide the other rows
                case_rows, case_failures = [], [f"{case.name} {DTYPE_NAMES[dtype]}: {type(e).__name__}: {e}"]
            rows += [r[:-1] + [100 * r[-2] / copy_bw, r[-1]] for r in case_rows]
            failures += case_failures
    device = torch.cuda.get_device_name() if args.device.type == "cuda" else platform.processor() or "cpu"
    header = [f"device: {device}", f"torch: {torch.__version__}", f"date: {datetime.datetime.now():%Y-%m-%d %H:%M}",
              f"command: python {shlex.join(sys.argv)}", f"default shape: {list(args.shape)}",
              f"timer: {timer}", f"copy bandwidth: {copy_bw:.1f} GB/s"]
    headers = ["op", "shape", "dtype", "pass", "impl", "time (µs)", "GB/s", "% copy", "peak MB"]
    failed = [f"FAIL: {f}" for f in failures]
    print("\n".join(header[:2] + header[4:]), format_table(headers, rows), *failed, sep="\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(f"- {h}" for h in header) + "\n\n" + format_table(headers, rows, markdown=True) + "\n")
            f.writelines(f"\n{line}\n" for line in failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
