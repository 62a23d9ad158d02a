"""The tests of softmax and log_softmax: each op's test file defines the `sm` fixture (a Softmax) and imports
these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from common import (DEVICES, DTYPES, LAYOUTS, check_close, check_compile, check_func, check_gradcheck, check_opcheck,
                    check_vs_eager, make_tensor, raises, run_in_process, shapes)
from rowops import (CLUSTER_SHAPES, LANE_SHAPES, LONG_PARTIAL, ROW_SHAPES, WARP_ROWS, check_non_finite,
                    non_finite_cases, non_finite_rows, padded_rows, run_case)


@dataclass(frozen=True)
class Softmax:
    fn: Callable        # ops.<name>
    torch_fn: Callable  # torch.<name>
    op: object          # torch.ops.myops.<name>.default
    backward_op: object




@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data(), shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2**31))
def test_matches_reference(sm, device, data, shape, dtype, layout, seed):
    dim = data.draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    x = make_tensor(shape, dtype, device, layout, seed) * 4
    run_case(lambda t: sm.fn(t, dim), lambda t: sm.torch_fn(t, dim), None, [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_lengths(sm, device, dtype, shape):
    x = make_tensor(shape, dtype, device, "row_strided", seed=shape[-1]) * 8
    run_case(sm.fn, lambda t: sm.torch_fn(t, -1), None, [x])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES + LANE_SHAPES + [LONG_PARTIAL])
def test_cluster_rows(sm, dtype, shape):
    x = make_tensor(shape, dtype, "cuda", seed=shape[-1]) * 8
    run_case(sm.fn, lambda t: sm.torch_fn(t, -1), None, [x])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", WARP_ROWS)
@pytest.mark.parametrize("padded", [False, True])
def test_warp_rows(sm, dtype, shape, padded):
    seed = shape[-1] + 3 * padded
    x = (padded_rows(shape, dtype, "cuda", seed) if padded else make_tensor(shape, dtype, "cuda", seed=seed)) * 8
    run_case(sm.fn, lambda t: sm.torch_fn(t, -1), None, [x])


@pytest.mark.cuda
def test_staged_rows(sm):
    """The tuning path that copies each CTA's next row into shared memory (MYOPS_ROW_STAGE=2, read once per process:
    run in a subprocess) on rows split over a cluster and rows that share a CTA: its copies once died of an illegal
    instruction (ptxas put their L2 policy descriptor in an odd uniform register)."""
    xs = [make_tensor(shape, dtype, "cpu", seed=shape[-1]) * 8
          for shape in [(3, 65536), (40, 12288), (6, 1024)] for dtype in (torch.float32, torch.bfloat16)]
    code = f"OUTPUT = [ops.{sm.fn.__name__}(x.cuda(), -1).cpu() for x in INPUTS]"
    for x, y in zip(xs, run_in_process(code, xs, {"MYOPS_ROW_STAGE": "2"})):
        check_close(y, sm.torch_fn(x.double(), -1), x.dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("mis", ["4", "0", "1", "2", "3", "5", "1,online", "2,online", "4,1024", "4,512",
                                 "4,warprow", "4,sub16", "4,ns4", "4,ns2", "4,ns1"])
def test_misaligned_rows(sm, mis):
    """Rows off 16-byte boundaries or not whole 16-byte vectors (odd N: every row at another offset) on the kernels for
    them (MYOPS_SOFTMAX_MIS, read once: a subprocess), mis_fwd_kernel and mis_bwd_kernel, and for longer rows: 4 (the
    default) st_fwd_kernel and st_bwd_kernel, one CTA streaming each row twice (fp32 50257 and up forward, 32767 and up
    backward, 16-bit 50257 and up backward, 262147; CTAs of 512 threads for fp32, of 1024 for 16-bit; ",1024" and
    ",512": that many for every dtype, MYOPS_SOFTMAX_ST_THREADS); 2 mis_fwd_cl_kernel and mis_bwd_cl_kernel over a
    cluster (fp32 50257 forward on 7 CTAs, 65535 on 8, 16-bit 50257 and 57343 backward on 4, 131071 on 8, 80 rows of
    50257 for more rows than the clusters that fit); 1 and 0 (every row) the rows.cuh engine; 3 every row of over 512
    threads on the clusters (fp32 8195 and 16-bit 32767 on 2); 5 the streaming kernels for every forward row past 4
    vectors a thread too (16-bit 50257 and 57343, fp32 20001); ",online": MYOPS_SOFTMAX_MIS_2P=0, the forward's
    statistics in the online pair, not two exact passes; short rows on the fewest lanes of 4 to 16, several rows a warp,
    a lane taking up to 4 of the head's and tail's elements where the lanes are fewer than those: ",ns4" / ",ns2" /
    ",ns1" hold the row at 4 / 2 / 1 vectors a lane in both passes (MYOPS_SOFTMAX_MIS_SUBNS; by default, [4], 1 in the
    backward, 2 in softmax's forward, which then keeps its sum's exps for the output, 4 in log_softmax's). At 4: 4
    lanes at 7, 13, 31, 63 and 16-bit 100 and 127, 8 at 16-bit 200, 16 at 16-bit 300 and fp32 200; at 2: 4 lanes at
    7, 13, 31 and 16-bit 63, 8 at fp32 63 and 16-bit 100 and 127, 16 at fp32 100 and 127 and 16-bit 200; at 1: 4 at
    7, 13 and 16-bit 31, 8 at fp32 31 and 16-bit 63, 16 at fp32 63 and 16-bit 100 and 127, 4 a lane past those.
    ",sub16": 16 lanes a 16-bit row (up to 512 elements), 8 an fp32 one (up to 128) (MYOPS_SOFTMAX_MIS_SUBWARP=1),
    ",warprow": a warp a row (=0). N under a vector (7, 13), a warp's rows past the end (37 rows of a warp each, eight a
    CTA; 16-bit 1001 too), rows of a CTA at 4 vectors a thread (fp32 1001 and 8195, 16-bit 32767 near 1024 threads)
    and, forward, at 8 (16-bit 50257, and 57343 near their limit), -inf entries, a row of -inf (NaN, as eager), a NaN
    (every shape of 4 rows or more) and a row whose every other element lies 90 below the rest (of 5 rows or more:
    exps near fp32's least normal, softmax's quotients there); fp32, bf16 and fp16: the output within TOL of float64,
    output and gradient within twice eager's error on the GPU."""
    cases = []
    for shape in [(5, 7), (64, 13), (37, 31), (21, 63), (50, 100), (37, 127), (37, 200), (33, 300), (9, 1001),
                  (300, 1001), (4, 8195), (4, 20001), (4, 32767), (80, 50257), (4, 57343), (4, 65535), (4, 131071),
                  (4, 262147)]:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = make_tensor(shape, dtype, "cpu", seed=shape[-1]) * 8
            if shape[0] > 3:
                x[1, ::7] = float("-inf")
                x[2] = float("-inf")
                x[3, shape[-1] // 2] = float("nan")
            if shape[0] > 4:
                x[4, ::2] -= 90
            cases.append((x, make_tensor(shape, dtype, "cpu", seed=shape[-1] + 1)))
    code = f"""
    OUTPUT = []
    for x, g in INPUTS:
        res = []
        for f in (ops.{sm.fn.__name__}, torch.{sm.torch_fn.__name__}):
            xc = x.cuda().requires_grad_()
            y = f(xc, -1)
            (dx,) = torch.autograd.grad(y, xc, g.cuda())
            res += [y.detach().cpu(), dx.cpu()]
        OUTPUT.append(res)
    """
    env = {"MYOPS_SOFTMAX_MIS": mis[0], "MYOPS_SOFTMAX_MIS_2P": "0" if "online" in mis else "1",
           "MYOPS_SOFTMAX_ST_THREADS": next((p for p in mis.split(",")[1:] if p.isdigit()), "0"),
           "MYOPS_SOFTMAX_MIS_SUBWARP": {"warprow": "0", "sub16": "1"}.get(mis.split(",")[-1], "2"),
           "MYOPS_SOFTMAX_MIS_SUBNS": {"ns4": "4", "ns2": "2", "ns1": "1"}.get(mis.split(",")[-1], "0")}
    for (x, g), (y, dx, y_eager, dx_eager) in zip(cases, run_in_process(code, cases, env)):
        x64 = x.double().requires_grad_()
        y64 = sm.torch_fn(x64, -1)
        (dx64,) = torch.autograd.grad(y64, x64, g.double())
        what = f"{tuple(x.shape)} {x.dtype}"
        check_close(y, y64, x.dtype, what=f"output {what}")
        check_vs_eager(y, y_eager, y64, x.dtype, what=f"output {what}")
        check_vs_eager(dx, dx_eager, dx64, x.dtype, what=f"gradient {what}")


@pytest.mark.cuda
@pytest.mark.parametrize("mis", ["4", "2"])
def test_misaligned_layouts(sm, mis):
    """Under MYOPS_SOFTMAX_MIS=4 (the default: rows of 50257 streamed) and 2 (over clusters; a subprocess, whatever
    the environment says) misaligned rows give one result whatever their layout: the kernels' sums follow each row's
    offset from a 16-byte boundary, so the registration layer copies operands laid out otherwise than a fresh tensor
    (transposed, padded rows, off a boundary) into one. Forward and backward of each layout of x and of the gradient
    bitwise equal to the contiguous ones, and torch.compile's gradient of a reduction over dim 0 equal to eager's (it
    reached the backward strided where eager's was contiguous: 1 ulp off before). Aligned rows past the register
    kernels (524296: the engine, whatever the layout) too: the streaming kernels once took their contiguous layout
    and not their transposed one."""
    cases = [(make_tensor(shape, dtype, "cpu", seed=shape[-1]), make_tensor(shape, dtype, "cpu", seed=shape[-1] + 1))
             for shape in [(33, 9), (64, 13), (20, 1001), (3, 8195), (2, 50257), (2, 524296)]
             for dtype in (torch.float32, torch.bfloat16, torch.float16)]
    code = f"""
    def layouts(t):
        t = t.cuda()
        M, N = t.shape
        yield t
        yield t.t().contiguous().t()  # transposed: strided columns
        yield t.new_empty(M, N + 3)[:, :N].copy_(t)  # padded rows
        yield t.new_empty(M * N + 1)[1:].view(M, N).copy_(t)  # off a boundary
    def run(f, x, g):
        x = x.detach().requires_grad_()
        y = f(x)
        (dx,) = torch.autograd.grad(y, x, g)
        return [y.detach().cpu(), dx.cpu()]
    f = lambda x: ops.{sm.fn.__name__}(x, -1)
    f0 = lambda x: ops.{sm.fn.__name__}(x, 0)
    OUTPUT = []
    for x, g in INPUTS:
        OUTPUT.append([run(f, xl, gl) for xl in layouts(x) for gl in layouts(g)])
        torch._dynamo.reset()
        xt = x.t().contiguous().cuda()
        gt = torch.empty_like(f0(xt)).copy_(g.t())  # (the output's strides, as check_compile's randn_like)
        OUTPUT[-1].append(run(f0, xt, gt) + run(torch.compile(f0, fullgraph=True, dynamic=True), xt, gt))
    """
    env = {"MYOPS_SOFTMAX_MIS": mis, "MYOPS_SOFTMAX_MIS_2P": "1", "MYOPS_SOFTMAX_ST_THREADS": "0"}
    for (x, g), res in zip(cases, run_in_process(code, cases, env)):
        what = f"{tuple(x.shape)} {x.dtype}"
        *runs, (y0, dx0, yc, dxc) = res
        for i, (y, dx) in enumerate(runs):
            assert torch.equal(y, runs[0][0]), f"output {what}, layouts {divmod(i, 4)}"
            assert torch.equal(dx, runs[0][1]), f"gradient {what}, layouts {divmod(i, 4)}"
        assert torch.equal(yc, y0) and torch.equal(dxc, dx0), f"torch.compile {what}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(sm, device, dtype):
    """-inf entries (masked attention), an all -inf row (NaN, as eager), NaN propagation, huge magnitudes."""
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[0.0, -inf, 1.0, -inf], [-inf] * 4, [1.0, nan, 2.0, 3.0], [1e4, -1e4, 0.0, 1e4]],
                     dtype=torch.float64)
    out = sm.fn(x.to(dtype=dtype, device=device))
    check_close(out, sm.torch_fn(x.to(dtype).double(), -1), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exp_range_edges(sm, device, dtype):
    """Rows and gradients about the CPU kernels' exp split (vmath.h myops_expf_u20_mid: rows whose least element lies
    within 87 of the max, log_softmax backward blocks of 512 with |y| <= 87, else the exp that keeps results below
    2^-126): spans of 86.5, 87 and 87.5 below the max, a block straddling the edge; the output within TOL of float64,
    the gradient within twice eager's error."""
    n = 1500  # (three blocks of the backward, the last short)
    rows = [torch.linspace(-span, 0.0, n, dtype=torch.float64) for span in (86.5, 87.0, 87.5, 120.0)]
    straddle = torch.zeros(n, dtype=torch.float64)
    straddle[600:700] = -90.0  # (one block of the backward past |y| = 87 in log_softmax, the others within)
    x = torch.stack(rows + [straddle]).to(dtype)
    g = make_tensor(tuple(x.shape), dtype, "cpu", seed=7)
    xd = x.to(device).requires_grad_()
    y = sm.fn(xd, -1)
    (dx,) = torch.autograd.grad(y, xd, g.to(device))
    x64 = x.double().requires_grad_()
    y64 = sm.torch_fn(x64, -1)
    (dx64,) = torch.autograd.grad(y64, x64, g.double())
    xe = x.to(device).requires_grad_()
    (dx_eager,) = torch.autograd.grad(sm.torch_fn(xe, -1), xe, g.to(device))
    check_close(y, y64, dtype)
    check_vs_eager(dx, dx_eager, dx64, dtype, what="gradient")

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [65536, 262144])
def test_long_special_values(sm, device, dtype, n):
    """The special values on rows split over a cluster (on the GPU, the pipelined forward's online (max, sum) pairs):
    -inf in every other column, an all -inf row, one NaN, and one huge entry in the last CTA's slice (every other
    slice's sum scaled by exp(-1e4) = 0)."""
    inf, nan = float("inf"), float("nan")
    x = make_tensor((5, n), torch.float64, "cpu", seed=n) * 4
    x[0, ::2] = -inf
    x[1] = -inf
    x[2, n // 3] = nan
    x[3, n - 5] = 1e4
    x[4, 7] = -1e4
    out = sm.fn(x.to(dtype=dtype, device=device))
    check_close(out, sm.torch_fn(x.to(dtype).double(), -1), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1000, 4096, 5001, 16385])
def test_half_rows_backward(sm, device, dtype, n):
    """16-bit rows on the CPU's widened-as-read backward (bf16, and log_softmax's fp16 rows of 4096 or more in
    blocks of 1024: whole blocks, a partial last one) and the buffered one, on the GPU the register kernels: output
    and gradient within twice eager's error."""
    x = make_tensor((3, n), dtype, device, seed=n) * 4
    run_case(sm.fn, lambda t: sm.torch_fn(t, -1), None, [x])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(sm, device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided").requires_grad_()
    check_gradcheck(lambda a: sm.fn(a, -1), [x])
    check_gradcheck(lambda a: sm.fn(a, 0), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(sm, device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided")
    check_func(lambda a: sm.fn(a, 0), lambda a: sm.torch_fn(a, 0), [x])  # (its own formula)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(sm, device, dtype):
    for shape, dim in [((5, 33), -1), ((4, 6, 5), 1), ((0, 4), 0), ((), 0), ((7,), 0)]:
        x = make_tensor(shape, dtype, device).requires_grad_()
        check_opcheck(sm.op, (x, dim))
        y = sm.op(x.detach(), dim)
        check_opcheck(sm.backward_op, (torch.randn_like(y), y, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(sm, device):
    check_compile(lambda x: sm.fn(x, -1), [make_tensor((9, 33), torch.float32, device)])
    check_compile(lambda x: sm.fn(x, 0), [make_tensor((9, 33), torch.float32, device)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_layout(sm, dtype):
    """On the CPU the output is laid out as x and the gradient as y (empty_like, eager's layouts): a dim that is not
    innermost in memory (dim 0 of a row-major x, the last of a transposed one, the middle of a permuted 3-D one) runs
    as the columns of [A, D, B] in tiles (csrc/cpu/softmax.h, softmax_cols_*), partial tiles too, and D over 16384
    (softmax's exps recomputed, not kept); fewer than 64 bytes of columns (B es) and d innermost with permuted
    leading dims as rows. Values within TOL of float64 and within
    twice eager's error (fp32 and narrower), gradients likewise, strides as empty_like's, and opcheck (the fake impl's
    strides)."""
    cases = [((300, 70), 0, None), ((37, 300), 0, None), ((5, 37, 70), 1, None), ((70, 300), 1, (1, 0)),
             ((6, 7, 9), 0, (2, 0, 1)), ((2, 3, 4, 5), 2, (0, 2, 3, 1)), ((4, 5, 6), 2, (1, 0, 2)),
             ((3, 1, 5), 0, None), ((300, 4), 0, None), ((17000, 70), 0, None)]
    for shape, dim, perm in cases:
        x = make_tensor(shape, dtype, "cpu", seed=len(shape) + dim) * 4
        if perm is not None:  # the same values stored in the order perm
            x = x.permute(perm).contiguous().permute([perm.index(i) for i in range(len(perm))])
        x.requires_grad_()
        y = sm.fn(x, dim)
        g = make_tensor(shape, dtype, "cpu", seed=7)
        (dx,) = torch.autograd.grad(y, x, g)
        x64 = x.detach().double().requires_grad_()
        y64 = sm.torch_fn(x64, dim)
        (dx64,) = torch.autograd.grad(y64, x64, g.double())
        xe = x.detach().clone().requires_grad_()
        ye = sm.torch_fn(xe, dim)
        (dxe,) = torch.autograd.grad(ye, xe, g)
        what = f"{shape} dim {dim} perm {perm} {dtype}"
        want = torch.empty_like(x).stride()
        assert y.stride() == want and dx.stride() == want, f"{what}: strides {y.stride()}, {dx.stride()}, want {want}"
        check_close(y, y64, dtype, what=f"output {what}")
        if dtype == torch.float64:  # (eager's fp64 is the reference itself; 16-bit gradients carry y's rounding)
            check_close(dx, dx64, dtype, what=f"gradient {what}")
        else:
            check_vs_eager(y.detach(), ye.detach(), y64, dtype, what=f"output {what}")
            check_vs_eager(dx, dxe, dx64, dtype, what=f"gradient {what}")
        check_opcheck(sm.op, (x, dim))
        check_opcheck(sm.backward_op, (g, y.detach(), dim))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(sm, device):
    x = make_tensor((4, 5), torch.float32, device)
    raises(sm.fn, x.int(), match="x must be a floating-point tensor")
    raises(sm.fn, x, 2, match="dim 2 is out of range")
    raises(sm.fn, x, -3, match="dim -3 is out of range")


@non_finite_cases
def test_non_finite_rows(sm, device, dtype, shape):
    """Rows holding inf or NaN come out NaN (and +-inf) where eager's do, forward and backward."""
    check_non_finite(sm.fn, lambda t: sm.torch_fn(t, -1), [non_finite_rows(shape, dtype, device)])
