import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, TOL, check_close, check_compile, check_func, check_gradcheck,
                    check_opcheck, make_tensor, raises, shapes)
from rowops import (CLUSTER_SHAPES, LANE_SHAPES, LONG_PARTIAL, LONG_ROW_TESTS, MANY_ROWS, PIPE_BWD_CHOICES, ROW_SHAPES,
                    SHORT_ROWS, WARP_ROWS, check_graph_replay, check_non_finite, non_finite_cases, non_finite_rows,
                    padded_rows, param, run_case, run_tests_under,
                    wide_row_knob_tests)

OP = torch.ops.myops.layer_norm.default


def eager(x, weight=None, bias=None, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def scale(x, *params, has_w=True, has_b=True):
    """What an fp32 layer_norm's error is relative to: (|x| + |mean|) * rstd (x - mean cancels when x is near its
    mean), times |weight|, plus |bias|. (An empty x: nothing to scale, and var() would warn.)"""
    if x.numel() == 0:
        return x.abs()
    mu = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    s = (x.abs() + mu.abs()) * rstd
    it = iter(params)
    if has_w:
        s = s * next(it).abs()
    if has_b:
        s = s + next(it).abs()
    return s


def call(has_w, has_b):
    """ops.layer_norm / eager taking only the parameters that are present, positionally."""
    def fn(impl):
        def f(x, *params):
            it = iter(params)
            return impl(x, next(it) if has_w else None, next(it) if has_b else None)
        return f
    return fn


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=1), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       has_w=st.booleans(), has_b=st.booleans(), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, layout, has_w, has_b, seed):
    x = make_tensor(shape, dtype, device, layout, seed)
    params = [p for p in (param(shape, dtype, device, has_w, seed + 1), param(shape, dtype, device, has_b, seed + 2))
              if p is not None]
    wrap = call(has_w, has_b)
    run_case(wrap(ops.layer_norm), wrap(eager), None, [x] + params,
             scale_fn=lambda *t: scale(*t, has_w=has_w, has_b=has_b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_lengths(device, dtype, shape):
    x = make_tensor(shape, dtype, device, "row_strided", seed=shape[-1]) + 3  # a mean far from 0
    w = make_tensor(shape[-1:], dtype, device, seed=1)
    b = make_tensor(shape[-1:], dtype, device, seed=2)
    run_case(ops.layer_norm, eager, None, [x, w, b], scale_fn=scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [37, 4096, 150001])  # 150001: the long-row backward's frozen-weight kernel (fp32)
def test_frozen_weight(device, dtype, n):
    """A weight and bias that need no gradient (a frozen layer): the backward computes dx alone, with no weight-gradient
    workspace (the CPU kernel once wrote into the absent one)."""
    x = make_tensor((7, n), dtype, device, "row_strided", seed=n).add_(3)  # (in place: x + 3 would be contiguous)
    w, b = make_tensor((n,), dtype, device, seed=1), make_tensor((n,), dtype, device, seed=2)
    run_case(ops.layer_norm, eager, None, [x, w, b], grad_inputs=[0], scale_fn=scale)


@pytest.mark.parametrize("device", DEVICES)
def test_short_rows(device):
    for m, n, seed in SHORT_ROWS:
        x = make_tensor((m, n), torch.float32, device, seed=seed)
        run_case(ops.layer_norm, eager, None, [x, make_tensor((n,), torch.float32, device, seed=seed + 500)],
                 scale_fn=lambda x, w: scale(x, w, has_b=False))


# One shape per fp32 forward kernel: the register kernel (1024), the one-row-per-CTA kernels (2048, 4096), the rows.cuh
# engine (3, 5125; every shape under col_strided), the long kernel at 4 and 8 vectors per thread (65536, 262144).
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(9, 3), (7, 1024), (5, 2048), (5, 4096), (3, 5125), (2, 65536), (1, 262144)])
@pytest.mark.parametrize("layout", ["contiguous", "col_strided"])
def test_mean_far_from_spread(device, shape, layout):
    """fp32 rows whose mean is 10^4 standard deviations from 0: a mean rounded to fp32 (a few ulps of 100) would put
    about 10^4 ulps into every output, so each kernel keeps its mean as two floats and the output must be within
    TOL of the reference relative to |reference| itself (test_matches_reference's scale forgives |mean| / std ulps).
    Session 47's H200 run found a row of 3 near -0.71 (std 0.0076) at 3.4x eager's error before."""
    x = make_tensor(shape, torch.float32, device, layout, seed=shape[-1]) * 0.01 + 100
    w = make_tensor(shape[-1:], torch.float32, device, seed=1)
    b = make_tensor(shape[-1:], torch.float32, device, seed=2)
    out, mean, rstd = torch.ops.myops.layer_norm.default(x, w, b, 1e-5)
    x64 = x.double()
    check_close(out, eager(x64, w.double(), b.double()), torch.float32)
    check_close(mean, x64.mean(-1), torch.float32)
    run_case(ops.layer_norm, eager, None, [x, w, b], scale_fn=scale)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES + LANE_SHAPES + MANY_ROWS)
def test_cluster_rows(dtype, shape):
    x = make_tensor(shape, dtype, "cuda", seed=shape[-1]) + 3  # a mean far from 0
    w = make_tensor(shape[-1:], dtype, "cuda", seed=1)
    b = make_tensor(shape[-1:], dtype, "cuda", seed=2)
    run_case(ops.layer_norm, eager, None, [x, w, b], scale_fn=scale)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", WARP_ROWS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("has_w,has_b", [(True, True), (True, False), (False, True), (False, False)])
def test_warp_rows(dtype, shape, padded, has_w, has_b):
    seed = shape[-1] + 3 * padded
    x = (padded_rows(shape, dtype, "cuda", seed) if padded else make_tensor(shape, dtype, "cuda", seed=seed)).add_(3)
    params = [p for p in (param(shape, dtype, "cuda", has_w, 1), param(shape, dtype, "cuda", has_b, 2))
              if p is not None]
    wrap = call(has_w, has_b)
    run_case(wrap(ops.layer_norm), wrap(eager), None, [x] + params,
             scale_fn=lambda *t: scale(*t, has_w=has_w, has_b=has_b))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,offset", [(torch.float32, 1e3), (torch.float32, -3e4), (torch.bfloat16, 50.0),
                                          (torch.bfloat16, -200.0)])
@pytest.mark.parametrize("shape", [(3, 65536), (2, 262144), LONG_PARTIAL, (2, 12288)])
def test_long_rows_offset(dtype, offset, shape):
    # a mean far from 0 in standard deviations: the long-row forward merges its warps' means and squared deviations,
    # each slot's mean rounded at the row mean's magnitude. (bf16 stops at 200: at 3e4 its 8-bit significand makes the
    # row constant, where the fused 16-bit output's documented residue, |mean| * rstd fp32 ulps, is what is left.)
    x = make_tensor(shape, dtype, "cuda", seed=shape[-1] + 11) + offset
    w = make_tensor(shape[-1:], dtype, "cuda", seed=1)
    b = make_tensor(shape[-1:], dtype, "cuda", seed=2)
    run_case(ops.layer_norm, eager, None, [x, w, b], scale_fn=scale)


# The one-row-per-CTA kernels' rows (rr::WideRow): fp32 of 4096 and 2048, 16-bit of 4096.
# (16-bit rows of 2560-12288: ln_wide16_kernel's run-time widths, 4 vectors a thread where N is a multiple of 1024,
# else 2; by default up to 8192, under MYOPS_LN_WIDE=2 12288 too)
WIDE_ROWS = [(torch.float32, 4096), (torch.float32, 2048), (torch.bfloat16, 4096), (torch.float16, 4096),
             (torch.bfloat16, 2560), (torch.float16, 3072), (torch.bfloat16, 5120), (torch.bfloat16, 7168),
             (torch.float16, 12288)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,n", WIDE_ROWS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("rows,layout", [(1, "contiguous"), (300, "contiguous"), (257, "row_strided"),
                                         (129, "padded")])
@pytest.mark.parametrize("has_w,has_b", [(True, True), (True, False), (False, True), (False, False)])
def test_wide_rows(dtype, n, rows, layout, has_w, has_b):
    """Rows that take their own kernels on the GPU (ln_wide_f32_kernel: 512 / 256 threads of two vectors; 16-bit
    ln_wide16_kernel: 128 threads of four at N = 4096, other widths up to 8192 at run time; one row per CTA),
    which hypothesis' shapes seldom reach: every weight and bias combination, forward and backward. padded: a row
    stride of N + 24, aligned (row_strided's N + 5 takes other kernels)."""
    shape = (rows, n)
    x = (padded_rows(shape, dtype, "cuda", rows) if layout == "padded"
         else make_tensor(shape, dtype, "cuda", layout, seed=rows)).add_(3)  # (in place: keeps the row stride)
    params = [p for p in (param(shape, dtype, "cuda", has_w, 1), param(shape, dtype, "cuda", has_b, 2))
              if p is not None]
    wrap = call(has_w, has_b)
    run_case(wrap(ops.layer_norm), wrap(eager), None, [x] + params,
             scale_fn=lambda *t: scale(*t, has_w=has_w, has_b=has_b))


test_wide_rows_any_width, test_backward_unsplit = wide_row_knob_tests(__file__, "MYOPS_LN_WIDE",
                                                                      "ln_wide16_kernel")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(37, 256), (33, 1024), (19, 2048), (9, 4096), (5, 8192), (3, 65536), (2, 262144)])
def test_first_element_outlier(dtype, shape):
    # every third row's first element 1000 standard deviations out: the 16-bit long forward at 4 vectors per thread
    # (N = 65536) takes the statistics as sums about a row's first element, which then cancel by about N (those rows
    # take the exact second pass); the other shapes cover the other kernels
    x = make_tensor(shape, dtype, "cuda", seed=shape[-1] + 5)
    x[::3, 0] = 1000.0
    w = make_tensor(shape[-1:], dtype, "cuda", seed=1)
    b = make_tensor(shape[-1:], dtype, "cuda", seed=2)
    run_case(ops.layer_norm, eager, None, [x, w, b], scale_fn=scale)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("has_w,has_b", [(True, True), (False, True), (True, False), (False, False)])
def test_long_rows_params(dtype, has_w, has_b):
    x = make_tensor(LONG_PARTIAL, dtype, "cuda", seed=7) + 3
    params = [p for p in (param(LONG_PARTIAL, dtype, "cuda", has_w, 1), param(LONG_PARTIAL, dtype, "cuda", has_b, 2))
              if p is not None]
    wrap = call(has_w, has_b)
    run_case(wrap(ops.layer_norm), wrap(eager), None, [x] + params,
             scale_fn=lambda *t: scale(*t, has_w=has_w, has_b=has_b))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided").requires_grad_()
    w = make_tensor((9,), torch.float64, device, seed=1).requires_grad_()
    b = make_tensor((9,), torch.float64, device, seed=2).requires_grad_()
    check_gradcheck(lambda a, c, d: ops.layer_norm(a, c, d, 1e-3), [x, w, b])
    check_gradcheck(lambda a, d: ops.layer_norm(a, None, d), [x, b])
    check_gradcheck(lambda a: ops.layer_norm(a), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided")
    w, b = make_tensor((9,), torch.float64, device, seed=1), make_tensor((9,), torch.float64, device, seed=2)
    check_func(ops.layer_norm, eager, [x, w, b])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = make_tensor((5, 33), dtype, device).requires_grad_()
    w = make_tensor((33,), dtype, device, seed=1).requires_grad_()
    b = make_tensor((33,), dtype, device, seed=2).requires_grad_()
    check_opcheck(OP, (x, w, b, 1e-5))
    check_opcheck(OP, (x, None, None, 1e-5))
    check_opcheck(OP, (make_tensor((0, 8), dtype, device), None, None, 1e-5))
    y, mean, rstd = OP(x.detach(), w.detach(), b.detach(), 1e-5)
    check_opcheck(torch.ops.myops.layer_norm_backward.default,
                  (torch.randn_like(y), x.detach(), mean, rstd, w.detach(), True, 1e-5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    w = make_tensor((33,), torch.float32, device, seed=1)
    b = make_tensor((33,), torch.float32, device, seed=2)
    check_compile(lambda x, w, b: ops.layer_norm(x, w, b), [make_tensor((9, 33), torch.float32, device), w, b])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    raises(ops.layer_norm, x.int(), match="x must be a floating-point tensor")
    raises(ops.layer_norm, x, torch.ones(4, device=device), match=r"weight must have shape \[5\]")
    raises(ops.layer_norm, x, None, torch.ones(6, device=device), match=r"bias must have shape \[5\]")
    raises(ops.layer_norm, x, None, torch.ones(5, device=device).half(), match="bias must have the same dtype")
    raises(ops.layer_norm, torch.tensor(1.0, device=device), match="at least 1 dimension")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (3000, 1024)), (torch.float32, (1200, 4096)),
                                         (torch.bfloat16, (20000, 128))])
def test_cuda_graph(dtype, shape):
    # forward and backward captured into a CUDA graph (the backward's kernels are programmatic dependent launches)
    x, w, b = (make_tensor(s, dtype, "cuda", seed=i) for i, s in enumerate([shape, shape[-1:], shape[-1:]]))
    check_graph_replay(lambda x, w, b: ops.layer_norm(x, w, b), [x, w, b])


@non_finite_cases
def test_non_finite_rows(device, dtype, shape):
    """Rows holding inf or NaN come out NaN (and +-inf) where eager's do, forward and backward: the statistics must
    not clamp a NaN variance to 0 (fmaxf does), which left such a row finite rstd and +-inf outputs."""
    x = non_finite_rows(shape, dtype, device)
    w = param(shape, dtype, device, True, 1)
    b = param(shape, dtype, device, True, 2)
    check_non_finite(ops.layer_norm, eager, [x, w, b])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [64, 1000, 5125])
def test_cpu_backward_foreign_mean(dtype, n):
    """The CPU backward recomputes each row's statistics from x and takes the saved mean only as a starting point
    (csrc/cpu/layer_norm.c, ln_bwd_sums): a mean that is not the forward's gives the same gradients, within rounding,
    whether it is near enough to sum about (a tenth of a standard deviation off: the fast path's correction for it) or
    not (ten deviations off, 0, NaN, inf: the fallback). 70 rows: the dw/db sums cross a block of 32 rows."""
    x = make_tensor((70, n), dtype, "cpu", seed=1) * 0.5 + 40
    w, g = make_tensor((n,), dtype, "cpu", seed=2), make_tensor((70, n), dtype, "cpu", seed=3)
    _, mean, rstd = OP(x, w, None, 1e-5)
    want = torch.ops.myops.layer_norm_backward(g, x, mean, rstd, w, True, 1e-5)
    rtol, atol = TOL[dtype]
    for foreign in (mean + 0.05, mean + 5, torch.zeros_like(mean), torch.full_like(mean, float("nan")),
                    torch.full_like(mean, float("inf"))):
        got = torch.ops.myops.layer_norm_backward(g, x, foreign, rstd, w, True, 1e-5)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol * max(1.0, b.abs().max().item()))


@pytest.mark.cuda
@pytest.mark.parametrize("pipe", PIPE_BWD_CHOICES)
def test_backward_kernel_choice(pipe):
    """This file's long-row, cluster and frozen-parameter CUDA tests under MYOPS_ROW_PIPE_BWD={0, 2} (rowops): the
    backward kernels the default leaves to other rows."""
    run_tests_under(__file__, LONG_ROW_TESTS, {"MYOPS_ROW_PIPE_BWD": pipe})
