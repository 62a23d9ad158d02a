import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_compile, check_func, check_gradcheck, check_opcheck, make_tensor,
                    raises, shapes)
from rowops import (CLUSTER_SHAPES, LANE_SHAPES, LONG_PARTIAL, LONG_ROW_TESTS, MANY_ROWS, PIPE_BWD_CHOICES, ROW_SHAPES,
                    SHORT_ROWS, WARP_ROWS, check_graph_replay, check_non_finite, non_finite_cases, non_finite_rows,
                    padded_rows, param, run_case, run_tests_under,
                    wide_row_knob_tests)

OP = torch.ops.myops.rms_norm.default


def ref(x, weight=None, eps=1e-6):
    """The issue's expression, in x's dtype or (reference) float64."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def eager(x, weight=None, eps=1e-6):
    return F.rms_norm(x, x.shape[-1:], weight, eps)


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=1), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       has_w=st.booleans(), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, layout, has_w, seed):
    x = make_tensor(shape, dtype, device, layout, seed)
    w = param(shape, dtype, device, has_w, seed + 1)
    inputs = [x] if w is None else [x, w]
    run_case(ops.rms_norm, eager, ref, inputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_lengths(device, dtype, shape):
    x = make_tensor(shape, dtype, device, "row_strided", seed=shape[-1])
    w = make_tensor(shape[-1:], dtype, device, seed=1)
    run_case(ops.rms_norm, eager, ref, [x, w])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [37, 4096])
def test_frozen_weight(device, dtype, n):
    """A weight that needs no gradient (a frozen layer): the backward computes dx alone, with no weight-gradient
    workspace (the CPU kernel once wrote into the absent one)."""
    x = make_tensor((7, n), dtype, device, "row_strided", seed=n)
    run_case(ops.rms_norm, eager, ref, [x, make_tensor((n,), dtype, device, seed=1)], grad_inputs=[0])


@pytest.mark.parametrize("device", DEVICES)
def test_short_rows(device):
    for m, n, seed in SHORT_ROWS:
        x = make_tensor((m, n), torch.float32, device, seed=seed)
        run_case(ops.rms_norm, eager, ref, [x, make_tensor((n,), torch.float32, device, seed=seed + 500)])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES + LANE_SHAPES + MANY_ROWS)
def test_cluster_rows(dtype, shape):
    x = make_tensor(shape, dtype, "cuda", seed=shape[-1])
    w = make_tensor(shape[-1:], dtype, "cuda", seed=1)
    run_case(ops.rms_norm, eager, ref, [x, w])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", WARP_ROWS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("has_w", [True, False])
def test_warp_rows(dtype, shape, padded, has_w):
    seed = shape[-1] + 3 * padded
    x = padded_rows(shape, dtype, "cuda", seed) if padded else make_tensor(shape, dtype, "cuda", seed=seed)
    w = param(shape, dtype, "cuda", has_w, 1)
    run_case(ops.rms_norm, eager, ref, [x] if w is None else [x, w])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("has_w", [True, False])
def test_long_rows_params(dtype, has_w):
    x = make_tensor(LONG_PARTIAL, dtype, "cuda", seed=7)
    w = param(LONG_PARTIAL, dtype, "cuda", has_w, 1)
    run_case(ops.rms_norm, eager, ref, [x] if w is None else [x, w])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided").requires_grad_()
    w = make_tensor((9,), torch.float64, device, seed=1).requires_grad_()
    check_gradcheck(lambda a, b: ops.rms_norm(a, b, 1e-3), [x, w])
    check_gradcheck(lambda a: ops.rms_norm(a), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x, w = make_tensor((4, 9), torch.float64, device, "col_strided"), make_tensor((9,), torch.float64, device, seed=1)
    check_func(ops.rms_norm, eager, [x, w])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = make_tensor((5, 33), dtype, device).requires_grad_()
    w = make_tensor((33,), dtype, device, seed=1).requires_grad_()
    check_opcheck(OP, (x, w, 1e-6))
    check_opcheck(OP, (x, None, 1e-5))
    check_opcheck(OP, (make_tensor((0, 8), dtype, device), None, 1e-5))
    y, rstd = OP(x.detach(), w.detach(), 1e-6)
    check_opcheck(torch.ops.myops.rms_norm_backward.default, (torch.randn_like(y), x.detach(), rstd, w.detach(), True, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    w = make_tensor((33,), torch.float32, device, seed=1)
    check_compile(lambda x, w: ops.rms_norm(x, w), [make_tensor((9, 33), torch.float32, device), w])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    raises(ops.rms_norm, x.int(), match="x must be a floating-point tensor")
    raises(ops.rms_norm, x, torch.ones(4, device=device), match=r"weight must have shape \[5\]")
    raises(ops.rms_norm, x, torch.ones(5, device=device, dtype=torch.float64), match="weight must have the same dtype")
    raises(ops.rms_norm, x, torch.ones(1, 5, device=device), match=r"weight must have shape \[5\]")
    raises(ops.rms_norm, torch.tensor(1.0, device=device), match="at least 1 dimension")
    raises(ops.rms_norm, x, None, -1.0, match="eps must be >= 0")


@pytest.mark.cuda
def test_wrong_device():
    x = make_tensor((4, 5), torch.float32, "cuda")
    raises(ops.rms_norm, x, torch.ones(5), match="weight must be on the same device")


# (16-bit rows of 2560-12288: MYOPS_RMS_WIDE=2's run-time widths, 2 vectors a thread up to 8192, else 4)
WIDE_ROWS = [(torch.float32, 4096), (torch.float32, 2048), (torch.bfloat16, 4096), (torch.float16, 4096),
             (torch.bfloat16, 2560), (torch.float16, 5120), (torch.bfloat16, 7168), (torch.bfloat16, 12288)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,n", WIDE_ROWS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("rows,layout", [(1, "contiguous"), (300, "contiguous"), (257, "row_strided"),
                                         (129, "padded")])
@pytest.mark.parametrize("has_w", [True, False])
def test_wide_rows(dtype, n, rows, layout, has_w):
    """Rows that take their own kernels on the GPU (rms_wide_f32_kernel: 512 / 256 threads of two vectors; 16-bit
    rms_wide16_kernel: 256 threads of two at N = 4096, and under MYOPS_RMS_WIDE=2 other widths; one row per CTA),
    which hypothesis' shapes seldom reach: with and without a weight, forward and backward. padded: a row stride of
    N + 24, aligned (row_strided's N + 5 takes other kernels)."""
    shape = (rows, n)
    x = (padded_rows(shape, dtype, "cuda", rows) if layout == "padded"
         else make_tensor(shape, dtype, "cuda", layout, seed=rows))
    w = param(shape, dtype, "cuda", has_w, 1)
    run_case(ops.rms_norm, eager, ref, [x] if w is None else [x, w])


test_wide_rows_any_width, test_backward_unsplit = wide_row_knob_tests(__file__, "MYOPS_RMS_WIDE",
                                                                      "rms_wide16_kernel")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (3000, 1024)), (torch.float32, (1200, 4096)),
                                         (torch.bfloat16, (20000, 128))])
def test_cuda_graph(dtype, shape):
    # forward and backward captured into a CUDA graph (the backward's kernels are programmatic dependent launches)
    x, w = (make_tensor(s, dtype, "cuda", seed=i) for i, s in enumerate([shape, shape[-1:]]))
    check_graph_replay(lambda x, w: ops.rms_norm(x, w), [x, w])


@non_finite_cases
def test_non_finite_rows(device, dtype, shape):
    """Rows holding inf or NaN come out NaN (and +-inf) where eager's do, forward and backward: the statistics must
    not clamp a NaN variance to 0 (fmaxf does), which left such a row finite rstd and +-inf outputs."""
    x = non_finite_rows(shape, dtype, device)
    w = param(shape, dtype, device, True, 1)
    check_non_finite(ops.rms_norm, ref, [x, w])


@pytest.mark.cuda
@pytest.mark.parametrize("pipe", PIPE_BWD_CHOICES)
def test_backward_kernel_choice(pipe):
    """This file's long-row, cluster and frozen-parameter CUDA tests under MYOPS_ROW_PIPE_BWD={0, 2} (rowops): the
    backward kernels the default leaves to other rows."""
    run_tests_under(__file__, LONG_ROW_TESTS, {"MYOPS_ROW_PIPE_BWD": pipe})
