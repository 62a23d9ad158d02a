"""What the tests of the row-wise ops (norms, softmax, cross_entropy) share: row lengths that exercise every
kernel plan (a warp per row, a CTA per row, a cluster of CTAs per row, streaming), and a property-test driver."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from common import DEVICES, DTYPES, check_against_eager, check_close, make_tensor

# (rows, N): tiny, odd, a warp per row, a CTA per row, long rows split over a cluster, very long rows.
ROW_SHAPES = [(5, 1), (3, 7), (4, 64), (2, 769), (3, 5125), (2, 65536), (2, 65537), (1, 262144)]
# Contiguous rows that the GPU's register path splits over a thread block cluster (ROW_SHAPES' padded rows take
# the general engine), with enough rows (9 of 262144, 300 of 24576) that the kernels with a row loop run several per
# cluster. The norms' backward takes 16-bit rows over 16384 elements to its long-row kernel: N = 12288 keeps its
# register kernel on a cluster in every dtype. The long-row forward kernels (rows over 8 vectors x 512 threads) run
# on a persistent grid of clusters: 300 rows of 65536 and 40 of 262144 are more than it has, so each cluster takes
# several rows and prefetches the next; 3 of 65536 leave every cluster one row and a prefetch past the last.
CLUSTER_SHAPES = [(3, 65536), (9, 262144), (300, 24576), (40, 12288), (300, 65536), (40, 262144)]
# A row the norms' backward takes to its long-row kernel (per-column sums in shared memory) that leaves the last
# threads of its cluster without a full set of vectors (25001 16-byte vectors of bf16, 50002 of fp32); the norms'
# CUDA tests run it with each parameter absent (the kernel's general variant) and present, softmax's and
# log_softmax's beside CLUSTER_SHAPES (fp32: the pipelined forward, its last CTA's slices partial).
LONG_PARTIAL = (3, 200008)
# Contiguous rows for each arrangement of a CTA's row groups on the register path's forward (rr::Lane; the ops' minimum
# vectors per thread, rr::geometry's min_ns, decide it): N = 256 takes 8-64 threads per row (16 to 2 rows per CTA:
# layer_norm bf16 and softmax 8, layer_norm fp32 and rms_norm bf16 16, rms_norm fp32 32, add_rms_norm fp32 64), N = 512
# 16-128, N = 768 32 threads with 24 busy (softmax; the 16-bit norms' warp-row kernel, WARP_ROWS) or 96 (rms_norm
# fp32, add_rms_norm bf16: one CTA of a row whose thread count is not a power of 2); N = 1024 and 2048 4 or 8 vectors
# per thread in 32-128 threads. Run beside CLUSTER_SHAPES by the row ops' CUDA tests.
LANE_SHAPES = [(5, 256), (9, 512), (7, 768), (6, 1024), (3, 2048)]
# Rows enough that the norms' register backward (a persistent grid of about 132-660 CTAs on a 132-SM GPU) takes
# several per row slot, adding each to the weight-gradient sums it holds (16-bit: in shared memory) before writing
# them once; a CTA of several row slots first sums its slots' (rr::ColSums::flush_rows): N = 4096 (a row per
# 256-thread CTA, 2 in 512 threads), 1024 (8 rows of 64 threads), 776 (97 vectors, the last slots partial), 128 (8-32
# threads per row, up to 64 rows per CTA) and 264 (33 or 66 vectors: partial slots in rows of 32 or 64 threads).
MANY_ROWS = [(1200, 4096), (3000, 1024), (2500, 776), (30000, 128), (12000, 264)]
# Rows of the 16-bit warp-row forwards (rr::warp_row_geo: one warp per row, N of 513-2048; the norms, softmax and
# log_softmax): every vectors-per-thread they instantiate full (768: 3, 1024: 4, 1280: 5, 1536: 6) and partial (776:
# 97 vectors at 4, 520: 65 at 4, most threads' last slots empty; 1600: 200 at 8), 2048 (which the register kernels
# keep), one row, and last CTAs with fewer rows than warps. Their CUDA tests run them contiguous and with padded rows
# (padded_rows).
WARP_ROWS = [(11, 1024), (9, 776), (5, 520), (1, 1016), (7, 768), (3, 1280), (4, 1536), (5, 2048), (3, 1600)]


# Rows of 1-4 elements, where a norm's input gradient is what remains after its terms cancel (N = 1 for rms_norm and
# N = 2 for layer_norm leave eps * rstd^2 alone): a backward that used the forward's rounded fp32 statistics broke the
# 2x-eager rule on about 1 row in 100 (tests/test_*norm.py::test_short_rows).
SHORT_ROWS = [(1 + seed % 3, n, seed) for n in (1, 2, 3, 4) for seed in range(150)]


def run_case(fn, eager_fn, ref_fn, inputs, grad=True, grad_inputs=None, tol_check=True, scale_fn=None):
    """Outputs (and gradients) at most 2x eager's error vs float64; the first output also within TOL, relative to
    scale_fn(*float64 inputs) when given (the magnitude of the terms that cancel in it), else to |reference|."""
    check_against_eager(fn, eager_fn, ref_fn, inputs, grad=grad, grad_inputs=grad_inputs)
    if inputs[0].dtype == torch.float64:
        check_float64(fn, ref_fn or eager_fn, inputs, grad)
    elif tol_check:
        out = fn(*[t.detach() if isinstance(t, torch.Tensor) else t for t in inputs])
        out = out if isinstance(out, torch.Tensor) else out[0]
        ins64 = [t.detach().cpu().double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                 for t in inputs]
        ref = (ref_fn or eager_fn)(*ins64)
        ref = ref if isinstance(ref, torch.Tensor) else ref[0]
        check_close(out, ref, out.dtype, scale=scale_fn(*ins64) if scale_fn else None)


def check_graph_replay(fn, inputs):
    """fn's forward and backward (all inputs differentiable) captured into a CUDA graph and replayed on new values
    equal, bit for bit, the same op run eagerly on those values: the norms' backward kernels and colsum are
    programmatic dependent launches (csrc/cuda/common.cuh), which a capture must record with their order kept."""
    static = [t.detach().clone().requires_grad_() for t in inputs]

    def step():
        outs = fn(*static)
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        gouts = [torch.ones_like(o) for o in outs]
        return outs, torch.autograd.grad(outs, static, gouts)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # (warm-up: builds, autograd's state, allocations outside the graph)
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs, grads = step()
    fresh = [torch.randn_like(t) for t in inputs]
    for t, f in zip(static, fresh):
        with torch.no_grad():
            t.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    leaves = [f.clone().requires_grad_() for f in fresh]
    want = fn(*leaves)
    want = (want,) if isinstance(want, torch.Tensor) else tuple(want)
    want_grads = torch.autograd.grad(want, leaves, [torch.ones_like(o) for o in want])
    for got, exp in zip(list(outs) + list(grads), list(want) + list(want_grads)):
        torch.testing.assert_close(got, exp, rtol=0, atol=0)


def padded_rows(shape, dtype, device, seed, pad=24):
    """randn rows of shape[-1] elements at a row stride of shape[-1] + pad: rows that stay 16-byte aligned for
    16-bit types when both are multiples of 8 (make_tensor's row_strided pads by 5, which the vector kernels refuse)."""
    return make_tensor(tuple(shape[:-1]) + (shape[-1] + pad,), dtype, device, seed=seed)[..., : shape[-1]]


def param(shape, dtype, device, present, seed):
    """A per-feature weight/bias of shape [shape[-1]] (None when not present)."""
    return make_tensor(shape[-1:], dtype, device, seed=seed) if present else None


def check_float64(fn, ref_fn, inputs, grad=True, rtol=1e-10):
    """float64 outputs and gradients within rtol of the reference, relative to each tensor's largest magnitude
    (cancellation inside a row makes elementwise relative error meaningless for gradients)."""
    xs = [t.detach().requires_grad_(grad and t.is_floating_point()) if isinstance(t, torch.Tensor) else t
          for t in inputs]
    rs = [t.detach().cpu().requires_grad_(grad and t.is_floating_point()) if isinstance(t, torch.Tensor) else t
          for t in inputs]
    outs, refs = fn(*xs), ref_fn(*rs)
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    refs = [refs] if isinstance(refs, torch.Tensor) else list(refs)
    pairs = []
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.detach().cpu(), r.detach(), rtol=0, atol=rtol * max(1.0, r.abs().max().item())
                                   if r.numel() else 0, equal_nan=True)
        if grad and o.requires_grad and o.numel() and bool(torch.isfinite(r).all()):
            pairs.append((o, r))
    if not pairs:
        return
    gs = [torch.randn(r.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) for _, r in pairs]
    lx = [t for t in xs if isinstance(t, torch.Tensor) and t.requires_grad]
    lr = [t for t in rs if isinstance(t, torch.Tensor) and t.requires_grad]
    got = torch.autograd.grad([o for o, _ in pairs], lx, [g.to(o.device) for g, (o, _) in zip(gs, pairs)],
                              allow_unused=True)
    want = torch.autograd.grad([r for _, r in pairs], lr, gs, allow_unused=True)
    for a, b in zip(got, want):
        if b is None:
            continue
        if b.numel():
            torch.testing.assert_close(a.cpu(), b, rtol=0, atol=rtol * max(1.0, b.abs().max().item()))


# Rows holding inf or NaN (and one clean row), at lengths that reach each GPU kernel family: warp rows, the register
# kernel, the long forward at 4 and 8 vectors per thread.
NON_FINITE_SHAPES = [(5, 7), (5, 1024), (5, 4096), (5, 65536), (5, 262144)]


def non_finite_cases(test):
    """Every row op's test_non_finite_rows runs over these: device, dtype, shape."""
    for mark in (pytest.mark.parametrize("shape", NON_FINITE_SHAPES), pytest.mark.parametrize("dtype", DTYPES),
                 pytest.mark.parametrize("device", DEVICES)):
        test = mark(test)
    return test


def non_finite_rows(shape, dtype, device, seed=0):
    """x of shape [5, N], N >= 5: row 0 one +inf, row 1 one NaN, row 2 -inf and +inf, row 3 +inf twice, one of them
    its first element (the kernels that sum about a row's first element), row 4 finite."""
    x = make_tensor(shape, dtype, device, seed=seed)
    inf, nan = float("inf"), float("nan")
    x[0, 1], x[1, 2], x[2, 1], x[2, 3], x[3, 0], x[3, 4] = inf, nan, -inf, inf, inf, inf
    return x


def check_non_finite(fn, eager_fn, inputs):
    """Outputs and gradients (of every float input) hold NaN and +-inf exactly where eager's do."""
    got, exp = [], []
    g = None
    for f, out in ((fn, got), (eager_fn, exp)):
        xs = [t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) else t for t in inputs]
        y = f(*xs)
        if g is None:
            g = make_tensor(y.shape, y.dtype, y.device, seed=7)
        y.backward(g)
        out += [y.detach()] + [t.grad for t in xs if isinstance(t, torch.Tensor)]
    for what, a, b in zip(["output"] + [f"grad {i}" for i in range(len(got) - 1)], got, exp):
        for kind in ("isnan", "isinf"):
            ma, mb = getattr(a, kind)(), getattr(b, kind)()
            assert torch.equal(ma, mb), f"{what}: {kind} differs from eager in {int((ma != mb).sum())} elements " \
                                        f"(rows {sorted(set((ma != mb).nonzero()[:, 0].tolist()))})"


# The backward kernel choices that MYOPS_ROW_PIPE_BWD makes (read once per process): 0 never the pipelined backward
# (the register long kernel takes every row it applies to), 2 the pipeline for every row it holds. The default (1)
# splits 16-bit rows between them by op, row length and device (rp::takes), so a test run on one device covers only
# its own side: these two cover both kernels on every row.
PIPE_BWD_CHOICES = ["0", "2"]
# The CUDA tests of long and clustered rows and frozen parameters: the rows those choices move between kernels.
LONG_ROW_TESTS = "(long_rows or cluster_rows or frozen) and not kernel_choice"


def run_tests_under(test_file: str, k_expr: str, env: dict[str, str]) -> None:
    """The CUDA tests of test_file that k_expr selects, run by pytest in a subprocess under the MYOPS_ settings env
    (knobs that each process reads once); fails with their report if any fails."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pytest", test_file, "-q", "-m", "cuda", "-p", "no:cacheprovider", "-k",
                        k_expr], cwd=root, env=dict(os.environ, **env), capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"under {env}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"


def wide_row_knob_tests(test_file: str, wide_knob: str, kernel: str):
    """The norms' test_wide_rows (test_file's) again in subprocesses under two once-read knobs: test_wide_rows_any_width
    under wide_knob=2, where 16-bit rows of every width it holds take `kernel` at a run-time width (by default only
    some do), and test_backward_unsplit under MYOPS_ROW_BWD_SPLIT=0, the 16-bit 2-vector backward's rows on one CTA of
    up to 512 threads (by default rows of over 256 threads split over a cluster of CTAs of at most 256), those over
    8192 elements at 1 vector a thread. Returns both, for the test file to bind at module level."""
    @pytest.mark.cuda
    def test_wide_rows_any_width():
        run_tests_under(test_file, "wide_rows and not any_width", {wide_knob: "2"})

    @pytest.mark.cuda
    def test_backward_unsplit():
        run_tests_under(test_file, "wide_rows and not any_width and (bfloat16 or float16)",
                        {"MYOPS_ROW_BWD_SPLIT": "0"})

    test_wide_rows_any_width.__doc__ = f"test_wide_rows under {wide_knob}=2: {kernel} at every width it holds."
    test_backward_unsplit.__doc__ = "test_wide_rows' 16-bit rows under MYOPS_ROW_BWD_SPLIT=0: the unsplit backward."
    return test_wide_rows_any_width, test_backward_unsplit
