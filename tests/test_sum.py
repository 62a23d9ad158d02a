import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_close, check_compile, check_func, check_gradcheck, check_opcheck,
                    make_tensor, poison_allocator, raises, run_in_process, shapes, to64)

OP = torch.ops.myops.sum.default


@st.composite
def dims(draw, ndim):
    """None, [], or a non-empty subset of dims in any order, some written negative."""
    kind = draw(st.integers(0, 5))
    if kind == 0 or ndim == 0:
        return draw(st.sampled_from([None, []]))
    ds = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return [d - ndim if draw(st.booleans()) else d for d in ds]


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data(), shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       keepdim=st.booleans(), seed=st.integers(0, 2**31))
def test_matches_reference(device, data, shape, dtype, layout, keepdim, seed):
    dim = data.draw(dims(len(shape)))
    x = make_tensor(shape, dtype, device, layout, seed).requires_grad_()
    poison_allocator(device)
    out = ops.sum(x, dim, keepdim)
    (x64,) = to64(x)
    ref = x64.sum(dim, keepdim=keepdim) if dim is not None else (x64.sum().reshape([1] * x64.dim()) if keepdim else x64.sum())
    # A float sum's error is bounded relative to the sum of its terms' magnitudes, not to the result.
    scale = x64.detach().abs().sum(dim, keepdim=keepdim) if dim is not None else x64.detach().abs().sum().reshape(ref.shape)
    check_close(out, ref, dtype, scale=scale)
    g = torch.randn(out.shape, dtype=torch.float64)
    (gx,) = torch.autograd.grad(out, [x], g.to(dtype=dtype, device=device))
    (gr,) = torch.autograd.grad(ref, [x64], g)
    check_close(gx, gr, dtype, what="grad")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dim", [((1 << 20,), None), ((3, 200_001), [1]), ((70_000, 5), [0]),
                                       ((64, 3000, 2), [0, 2]), ((257, 129), [0]),
                                       ((40_000, 40), [0]), ((33, 70_001), [1])])
def test_long_reductions(device, dtype, shape, dim):
    """Reductions long enough to split across blocks on the GPU (and, for [0, 2], to need a copy)."""
    x = make_tensor(shape, dtype, device, seed=3)
    x64 = x.double().cpu()
    ref = x64.sum(dim) if dim is not None else x64.sum()
    scale = x64.abs().sum(dim) if dim is not None else x64.abs().sum()
    check_close(ops.sum(x, dim), ref, dtype, scale=scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [37, 35])
def test_long_column_sum_of_a_slice(device, dtype, cols):
    """A column sum over many rows of a column slice (row stride 40, not a multiple of the columns): on the GPU its
    last group of columns is partial (the column kernel's scalar path), in every split of the rows."""
    x = make_tensor((40_000, 40), dtype, device, seed=5)[:, :cols]
    x64 = x.double().cpu()
    check_close(ops.sum(x, 0), x64.sum(0), dtype, scale=x64.abs().sum(0))


# Row lengths of exactly one pass of the CUDA row kernel's loads (4 16-byte vectors for each of 32-256 threads), which
# take its straight-line kernel (sum_full_rows_kernel), or at 256 threads (fp32 4096, 16-bit 8192, fp64 2048) the
# same pass over 512 threads (sum_wide_rows_kernel).
# (run_in_process: sum(dim=-1) of each input on the GPU)
SUM_ROWS = "OUTPUT = [ops.sum(x.cuda(), -1).cpu() for x in INPUTS]"
FULL_PASS = {torch.float32: [512, 1024, 2048, 4096], torch.bfloat16: [1024, 2048, 4096, 8192],
             torch.float16: [1024, 8192], torch.float64: [1024, 2048]}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(FULL_PASS))
@pytest.mark.parametrize("sliced", [False, True])
def test_full_pass_rows(device, dtype, sliced):
    """Rows of one pass of the row kernel's loads, 37 of them (a partial last CTA of rows at every thread count),
    contiguous or a column slice (row stride K + 64); on the GPU also the same bits as the general row kernel
    (MYOPS_SUM_FULL=0, read once per process: a subprocess), for the straight-line and the 512-thread kernels."""
    xs = []
    for k in FULL_PASS[dtype]:
        x = make_tensor((37, k + 64 if sliced else k), dtype, device, seed=k)
        xs.append(x[:, :k] if sliced else x)
    outs = [ops.sum(x, -1) for x in xs]
    for x, out in zip(xs, outs):
        x64 = x.double().cpu()
        check_close(out, x64.sum(-1), dtype, scale=x64.abs().sum(-1), what=f"K = {x.shape[1]}")
    if device != "cuda":
        return
    refs = run_in_process(SUM_ROWS, [x.cpu() for x in xs], {"MYOPS_SUM_FULL": "0"})
    for x, out, ref in zip(xs, outs, refs):
        assert torch.equal(out.cpu(), ref), f"K = {x.shape[1]}: the straight-line / 512-thread kernel's bits differ"


@pytest.mark.cuda
@pytest.mark.parametrize("min_tpr", ["4", "16", "32"])
def test_short_rows(min_tpr):
    """Rows shorter than a warp's one pass at MYOPS_SUM_MIN_TPR = 4 (the default) / 16 / 32 threads a row at least
    (read once per process: a subprocess): several rows a warp, each summed over its own lanes (32: a warp a row).
    Every dtype; K from 1 to 512, contiguous (the straight-line kernel where K is one pass) or a column slice (row
    stride K + 5: one-element loads); 37 rows (a partial last CTA) and 1000; against float64."""
    xs = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        for k in (1, 3, 8, 16, 31, 64, 100, 128, 255, 256, 512):
            for m, sliced in ((37, False), (1000, False), (37, True)):
                x = make_tensor((m, k + 5 if sliced else k), dtype, "cpu", seed=k + m)
                xs.append(x[:, :k] if sliced else x)
    for x, out in zip(xs, run_in_process(SUM_ROWS, xs, {"MYOPS_SUM_MIN_TPR": min_tpr})):
        x64 = x.double()
        check_close(out, x64.sum(-1), x.dtype, scale=x64.abs().sum(-1),
                    what=f"{tuple(x.shape)} stride {x.stride()} {x.dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((1 << 20,), None), ((3, 200_001), [1]), ((300_000, 7), [0])])
def test_cpu_split_sums_do_not_depend_on_threads(dtype, shape, dim):
    """The CPU splits a long reduction of few outputs into parts by shape alone: the same bits on 1 or 2 threads."""
    x = make_tensor(shape, dtype, "cpu", seed=6)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.sum(x, dim)
        torch.set_num_threads(2)
        two = ops.sum(x, dim)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(one, two)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((3, 4, 5), torch.float64, device, "permuted").requires_grad_()
    for dim, keepdim in [(None, False), ([1], True), ([0, -1], False)]:
        check_gradcheck(lambda t: ops.sum(t, dim, keepdim), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x = make_tensor((3, 4, 5), torch.float64, device, "permuted")
    check_func(lambda t: ops.sum(t, [0, -1]), lambda t: t.sum([0, -1]), [x])  # (an expand)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, dim, keepdim in [((5, 3), [1], False), ((0, 4), [0], True), ((2, 3, 4), None, False),
                                ((2, 3, 4), [0, 2], True), ((), None, False)]:
        check_opcheck(OP, (make_tensor(shape, dtype, device).requires_grad_(), dim, keepdim))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(lambda x: ops.sum(x, [0]), [make_tensor((9, 33), torch.float32, device)])
    check_compile(lambda x: ops.sum(x, [-1], keepdim=True), [make_tensor((9, 33), torch.float32, device)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    raises(ops.sum, x.int(), match="x must be a floating-point tensor")
    raises(ops.sum, x, [2], match="dim 2 is out of range")
    raises(ops.sum, x, [0, -2], match="dim 0 appears more than once")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 7), (6, 300), (6, 70001), (300, 6)])
def test_non_finite(device, dtype, shape):
    """inf and NaN come out where eager's do, along either dim (the CPU adds within blocks in fp32, the GPU splits
    long rows across blocks): a row or column with one +inf sums to +inf, with +inf and -inf or a NaN to NaN."""
    x = make_tensor(shape, dtype, device, seed=4)
    inf, nan = float("inf"), float("nan")
    x[0, 1], x[1, 2], x[2, 1], x[2, 5], x[3, 0], x[3, 3] = inf, nan, -inf, inf, -inf, -inf
    x[4, shape[1] - 1] = inf  # the last element: the row kernels' tails
    for dim in (-1, 0):
        got, exp = ops.sum(x, dim), x.sum(dim)
        for kind in ("isnan", "isposinf", "isneginf"):
            assert torch.equal(getattr(got, kind)(), getattr(exp, kind)()), (dim, kind)
