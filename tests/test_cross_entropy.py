import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, check_close, check_compile, check_func, check_gradcheck, check_opcheck,
                    make_tensor, no_vmap_fallback, raises, run_in_process)
from rowops import check_graph_replay, run_case

OP = torch.ops.myops.cross_entropy.default


def targets(M, C, device, seed, ignore_frac=0.2, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, C, (M,), generator=g)
    t[torch.rand(M, generator=g) < ignore_frac] = ignore_index
    return t.to(device)


def fns(t, ignore_index, smoothing, reduction):
    def ours(x):
        return ops.cross_entropy(x, t, ignore_index, smoothing, reduction)

    def eager(x):
        return F.cross_entropy(x, t.to(x.device), ignore_index=ignore_index, label_smoothing=smoothing,
                               reduction=reduction)
    return ours, eager


@pytest.mark.parametrize("device", DEVICES)
@given(M=st.one_of(st.sampled_from([1, 2, 7]), st.integers(0, 64)),
       C=st.one_of(st.sampled_from([1, 2, 3, 8, 31, 129, 1000]), st.integers(1, 3000)),
       dtype=st.sampled_from(DTYPES), layout=st.sampled_from(["contiguous", "row_strided", "col_strided",
                                                               "transposed"]),
       smoothing=st.sampled_from([0.0, 0.0, 0.1, 1.0]), reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore_index=st.sampled_from([-100, 0]), seed=st.integers(0, 2**31))
def test_matches_reference(device, M, C, dtype, layout, smoothing, reduction, ignore_index, seed):
    x = make_tensor((M, C), dtype, device, layout, seed) * 3
    t = targets(M, C, device, seed, ignore_index=ignore_index)
    if reduction == "mean" and M > 0 and bool((t == ignore_index).all()):
        t[0] = 1 % C if ignore_index == 0 else 0  # a mean over no rows is NaN in both; keep one row
    ours, eager = fns(t, ignore_index, smoothing, reduction)
    run_case(ours, eager, None, [x], tol_check=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 32000), (2, 65537), (2, 262144)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_vocab_sizes(device, dtype, shape, smoothing):
    x = make_tensor(shape, dtype, device, seed=shape[1]) * 4
    t = targets(shape[0], shape[1], device, 5, ignore_frac=0.0)
    ours, eager = fns(t, -100, smoothing, "sum")
    run_case(ours, eager, None, [x], tol_check=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("C", [2048, 4096, 8192, 32000])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_padded_rows(device, dtype, C, smoothing):
    """Rows read in place from a wider buffer: a row stride of C + 64 keeps each row 16-byte aligned, so the GPU's
    vector kernels take them (make_tensor's row_strided pads by 5 and goes to the general engine), with rows of 4-64
    KB: on the H200 the 16-bit ones run on the fold kernel at a warp, 128 threads and a CTA a row. Loss ("none") and
    gradient at most 2x eager's error against float64."""
    M = 37  # (a part-filled last CTA where several rows share one)
    wide = make_tensor((M, C + 64), dtype, device, seed=C) * 4
    x = wide[:, :C]
    assert x.stride(0) == C + 64
    t = targets(M, C, device, C)
    ours, eager = fns(t, -100, smoothing, "none")
    run_case(ours, eager, None, [x], tol_check=False)


def extreme_logits(dtype, C):
    """12 rows of C logits at the ends of dtype's range (see test_extreme_logits), their targets and a gradient."""
    big = torch.finfo(dtype).max
    x = make_tensor((12, C), torch.float32, "cpu", seed=C)
    x[0] = x[0] * 200 + 3e4  # a large max inside the fast range
    x[1] = x[1] * 2 + 6e4  # (fp16: near its end)
    x[2] = x[2] * 1e5 if dtype != torch.float16 else x[2] * 1e4  # max beyond 2^16 (bf16, fp32)
    x[3, 7] = big * 0.75  # one element near the dtype's end
    x[4] = -big * 0.75  # every element there, negative
    x[5, 11] = float("inf")
    x[6, 5] = float("nan")
    x[7] = float("-inf")
    x[7, 3] = 1.0  # one finite element
    x[8] = float("-inf")  # none (NaN, as eager)
    x[9, : C // 2] = float("-inf")
    x[10] = x[10] * 4
    x[11] = x[11] * 1e-3 - 65000 if dtype == torch.float16 else x[11] * 1e-3 - 1e6
    x = x.to(dtype)
    t = targets(12, C, "cpu", C, ignore_frac=0.0)
    t[7] = 3
    g = torch.randn(12, generator=torch.Generator().manual_seed(C))
    return x, t, g.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("C", [4096, 32000])
def test_extreme_logits(device, dtype, C):
    """Rows at the ends of the dtype's range, infinities and NaN, on the GPU's streaming forward (C a multiple of the
    16-byte vector). Its 16-bit exps are taken against m log2 e rounded to fp32, valid while |row max| < 2^16: rows
    beyond (bf16), +inf and NaN are redone exactly. Loss and gradient against float64, element by element."""
    x, t, g = extreme_logits(dtype, C)
    xd = x.to(device).requires_grad_()
    loss = ops.cross_entropy(xd, t.to(device), reduction="none")
    (dx,) = torch.autograd.grad(loss, xd, g.to(device, dtype))
    x64 = x.double().requires_grad_()
    ref = F.cross_entropy(x64, t, reduction="none")
    (dref,) = torch.autograd.grad(ref, x64, g.double())
    check_close(loss, ref, dtype, what="loss")
    check_close(dx, dref, dtype, what="grad")


@pytest.mark.parametrize("device", DEVICES)
def test_unbatched_and_all_ignored(device):
    x = make_tensor((10,), torch.float32, device, seed=1)
    t = torch.tensor(3, device=device)
    for red in ("mean", "sum", "none"):
        torch.testing.assert_close(ops.cross_entropy(x, t, reduction=red), F.cross_entropy(x, t, reduction=red))
    x = make_tensor((3, 10), torch.float32, device, seed=1)
    t = torch.full((3,), -100, device=device)
    assert torch.isnan(ops.cross_entropy(x, t)).item() and torch.isnan(F.cross_entropy(x, t)).item()
    assert ops.cross_entropy(x, t, reduction="sum").item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((5, 9), torch.float64, device, "col_strided").requires_grad_()
    t = torch.tensor([1, -100, 8, 0, 3], device=device)
    for red in ("mean", "sum", "none"):
        check_gradcheck(lambda a: ops.cross_entropy(a, t, -100, 0.2, red), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x = make_tensor((5, 9), torch.float64, device, "col_strided")
    t = torch.tensor([1, -100, 8, 0, 3], device=device)
    for red in ("mean", "sum", "none"):
        check_func(lambda a, tt: ops.cross_entropy(a, tt, -100, 0.2, red),
                   lambda a, tt: F.cross_entropy(a, tt, ignore_index=-100, label_smoothing=0.2, reduction=red), [x, t])


@pytest.mark.parametrize("device", DEVICES)
def test_forward_ad_unchecked_target(device):
    """Forward-mode AD (the op's composite) with check_target=False, as the kernels: a row whose target is outside
    [0, C) gets NaN (loss, tangent and second derivative), the others eager's, and nothing is read out of bounds."""
    x = make_tensor((3, 5), torch.float64, device)
    t, ok = torch.tensor([1, 7, 2], device=device), torch.tensor([1, 0, 2], device=device)
    tangent = make_tensor((3, 5), torch.float64, device, seed=1)
    loss, dloss = torch.func.jvp(lambda a: ops.cross_entropy(a, t, reduction="none", check_target=False), (x,),
                                 (tangent,))
    want, dwant = torch.func.jvp(lambda a: F.cross_entropy(a, ok, reduction="none"), (x,), (tangent,))
    assert torch.isnan(loss[1]) and torch.isnan(dloss[1])
    torch.testing.assert_close(loss[[0, 2]], want[[0, 2]])
    torch.testing.assert_close(dloss[[0, 2]], dwant[[0, 2]])
    # (in the first row's logits: the NaN row's factor reaches every gradient through it, as the kernels' NaN does)
    def first_loss(loss_fn, target):
        return lambda r0: loss_fn(torch.cat([r0[None], x[1:]]), target)[0]
    hess = torch.func.hessian(first_loss(lambda a, tt: ops.cross_entropy(a, tt, reduction="none", check_target=False),
                                         t))(x[0])
    want = torch.func.hessian(first_loss(lambda a, tt: F.cross_entropy(a, tt, reduction="none"), ok))(x[0])
    torch.testing.assert_close(hess, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("rows", [None, 3])
def test_vmap_samples(device, reduction, rows):
    """Per-sample losses and gradients (vmap of grad) of samples of logits [C] (rows None) or [3, C], the second
    sample's targets all ignore_index: vmap's rules run the batch's rows in one call; that sample's "mean" is NaN
    (0 / 0, as F.cross_entropy's) and its gradient 0."""
    x = make_tensor((4, 9) if rows is None else (4, rows, 9), torch.float64, device, seed=3)
    t = torch.tensor([1, -100, 8, 0], device=device)
    if rows is not None:
        t = torch.stack([t.roll(k) for k in range(rows)], 1)
        t[1] = -100

    def loss(a, tt):
        return ops.cross_entropy(a, tt, -100, 0.1, reduction)

    def ref(a, tt):
        return F.cross_entropy(a, tt, ignore_index=-100, label_smoothing=0.1, reduction=reduction)

    with no_vmap_fallback():
        torch.testing.assert_close(torch.func.vmap(loss)(x, t), torch.func.vmap(ref)(x, t), equal_nan=True)
        got = torch.func.vmap(torch.func.grad(lambda a, tt: loss(a, tt).sum()))(x, t)
    want = torch.stack([torch.func.grad(lambda a, tt: loss(a, tt).sum())(x[i], t[i]) for i in range(4)])
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(got[[0, 2, 3]], torch.func.vmap(torch.func.grad(lambda a, tt: ref(a, tt).sum()))(
        x, t)[[0, 2, 3]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = make_tensor((6, 33), dtype, device).requires_grad_()
    t = targets(6, 33, device, 1)
    for red in ("mean", "sum", "none"):
        check_opcheck(OP, (x, t, -100, 0.1, red))
        check_opcheck(OP, (x, t, -100, 0.0, red, False))
        loss, stats = OP(x.detach(), t, -100, 0.1, red)
        check_opcheck(torch.ops.myops.cross_entropy_backward.default,
                      (torch.randn_like(loss), x.detach(), t, stats, -100, 0.1, red))


@pytest.mark.parametrize("device", DEVICES)
def test_autograd(device):
    """The C++ autograd (csrc/ops/cross_entropy.cpp): stats not differentiable, no graph without grad, a non-leaf
    logits, the loss used twice, retain_graph, defaults filled by the schema."""
    w = make_tensor((6, 17), torch.float32, device, seed=3).requires_grad_()
    t = targets(6, 17, device, 3)
    loss, stats = OP(w * 2, t)
    assert loss.requires_grad and not stats.requires_grad
    w2 = w.detach().clone().requires_grad_()
    ref = F.cross_entropy(w2 * 2, t)
    torch.testing.assert_close(loss, ref)
    (g,) = torch.autograd.grad(loss * 3 + loss, w, retain_graph=True)
    (g_ref,) = torch.autograd.grad(ref * 4, w2)
    torch.testing.assert_close(g, g_ref)
    loss.backward(retain_graph=True)
    loss.backward()  # (the saved tensors outlive the first backward): both accumulate into w.grad
    torch.testing.assert_close(w.grad, g_ref / 2)
    with torch.no_grad():
        assert not OP(w, t)[0].requires_grad
    with torch.inference_mode():
        torch.testing.assert_close(ops.cross_entropy(w, t), F.cross_entropy(w.detach(), t))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    """fullgraph with dynamic shapes: two row counts, forward and backward equal to eager's."""
    for smoothing, red in ((0.1, "mean"), (0.0, "none")):
        torch._dynamo.reset()
        fn = torch.compile(lambda x, t: ops.cross_entropy(x, t, -100, smoothing, red) * 2, fullgraph=True,
                           dynamic=True)
        for M in (9, 8):
            x = make_tensor((M, 33), torch.float32, device, seed=M).requires_grad_()
            t = targets(M, 33, device, M)
            x2 = x.detach().clone().requires_grad_()
            out, ref = fn(x, t), ops.cross_entropy(x2, t, -100, smoothing, red) * 2
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
            g = torch.randn_like(out)
            torch.testing.assert_close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(ref, x2, g)[0],
                                       rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    t = torch.tensor([0, 1, 2, 3], device=device)
    raises(ops.cross_entropy, x.int(), t, match="logits must be a floating-point tensor")
    raises(ops.cross_entropy, x, t.float(), match="target must be an int64 tensor")
    raises(ops.cross_entropy, x, t[:3], match=r"target must have shape \[4\]")
    raises(ops.cross_entropy, x, torch.tensor([0, 1, 5, 3], device=device), match="class index 5 outside")
    raises(ops.cross_entropy, x, torch.tensor([0, -1, 2, 3], device=device), match="class index -1 outside")
    raises(ops.cross_entropy, x, t, -100, 0.0, "avg", match="reduction must be")
    raises(ops.cross_entropy, x, t, -100, 1.5, match="label_smoothing must be in")
    raises(ops.cross_entropy, x[None], t, match=r"logits must have shape \[M, C\]")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("C", [16, 4096])
def test_many_rows_strided_target(device, C):
    """Over many rows (the GPU's check runs several CTAs, each reporting its least bad row), a strided target with
    ignored rows: loss and gradient of every reduction match eager; the error names the class index of the first bad
    row; an ignore_index outside [0, C) is never bad; a valid call after a failed one is unaffected."""
    M = 3000
    x = make_tensor((M, C), torch.float32, device).requires_grad_()
    base = targets(2 * M, C, device, 5)
    t = base[::2]  # a strided view
    for red in ("mean", "sum", "none"):
        ours, eager = ops.cross_entropy(x, t, reduction=red), F.cross_entropy(x, t, reduction=red)
        torch.testing.assert_close(ours, eager)
        g = torch.randn_like(ours)
        torch.testing.assert_close(torch.autograd.grad(ours, x, g)[0], torch.autograd.grad(eager, x, g)[0])
    x = x.detach()
    for first, later in ((2999, None), (1100, 2500), (300, 290 + 256)):
        bad = base.clone()
        bad[2 * first] = C + first
        if later is not None:
            bad[2 * later] = -later
        raises(ops.cross_entropy, x, bad[::2], match=f"class index {C + first} outside")
    t = t.masked_fill(t == -100, C + 1)  # an ignore_index outside [0, C)
    torch.testing.assert_close(ops.cross_entropy(x, t, ignore_index=C + 1), F.cross_entropy(x, t, ignore_index=C + 1))


@pytest.mark.cuda
def test_check_modes():
    """MYOPS_CE_CHECK_OVERLAP=0 (read once per process: a subprocess) against the default 1: the no-grad forward's
    target check ahead of its row kernel with an event wait, against the row kernel overlapping the check while the
    host polls the check's slots. Losses bitwise alike (the same kernels), over one check CTA and several (M = 3000:
    12 slots) and every fast-path forward kernel (a warp per row, the bulk copy, the streaming kernel); in both modes
    a bad target raises naming the least bad row's class index, and a valid call after it is unaffected."""
    cases = []
    for shape in [(5, 32000), (3000, 1000), (40, 16000), (7, 262144)]:
        for dtype in (torch.float32, torch.bfloat16):
            x = make_tensor(shape, dtype, "cuda", seed=shape[1]) * 4
            t = targets(shape[0], shape[1], "cuda", shape[0], ignore_frac=0.1)
            cases.append((x.cpu(), t.cpu(), [ops.cross_entropy(x, t, reduction=r).cpu() for r in ("none", "mean")]))
    code = """
out = []
for x, t in INPUTS:
    x, t = x.cuda(), t.cuda()
    out.append([ops.cross_entropy(x, t, reduction=r).cpu() for r in ("none", "mean")])
x = torch.randn(3000, 1000, device="cuda")
t = torch.randint(0, 1000, (3000,), device="cuda")
bad = t.clone()
bad[1300], bad[2900], bad[2950] = 1300 + 1000, -5, 7000
errors = []
for b in (bad, t):
    try:
        ops.cross_entropy(x, b)
        errors.append("")
    except RuntimeError as e:
        errors.append(str(e))
OUTPUT = (out, errors)
"""
    # (a hung wait must not hold the GPU call)
    out, errors = run_in_process(code, [(x, t) for x, t, _ in cases], {"MYOPS_CE_CHECK_OVERLAP": "0"}, timeout=300)
    for (x, t, ref), got in zip(cases, out):
        for a, b in zip(got, ref):
            assert torch.equal(a, b), (tuple(x.shape), x.dtype)
    x = torch.randn(3000, 1000, device="cuda")
    t = torch.randint(0, 1000, (3000,), device="cuda")
    bad = t.clone()
    bad[1300], bad[2900], bad[2950] = 1300 + 1000, -5, 7000
    assert "class index 2300 outside" in errors[0], errors[0]
    assert errors[1] == "", errors[1]
    with pytest.raises(RuntimeError, match="class index 2300 outside"):  # (the default mode, this process)
        ops.cross_entropy(x, bad)
    ops.cross_entropy(x, t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(4, 5), (3, 4096)])
def test_unchecked_targets(device, shape):
    """check_target=False never syncs or raises: a row whose target is out of range gets a NaN loss and gradient, the
    other rows are unchanged (the 4096-wide rows take the GPU's streaming kernel, the 5-wide ones the general one)."""
    M, C = shape
    x = make_tensor(shape, torch.float32, device, seed=3).requires_grad_()
    good = targets(M, C, device, 4, ignore_frac=0.0)
    bad = good.clone()
    bad[1] = C + 7
    loss = ops.cross_entropy(x, bad, reduction="none", check_target=False)
    ref = F.cross_entropy(x.detach(), good, reduction="none")
    assert torch.isnan(loss[1]).item()
    keep = torch.arange(M, device=device) != 1
    torch.testing.assert_close(loss.detach()[keep], ref[keep])
    (g,) = torch.autograd.grad(loss[keep].sum(), x)
    assert torch.isnan(g[1]).all().item() and torch.isfinite(g[keep]).all().item()
    assert torch.isnan(ops.cross_entropy(x.detach(), bad, check_target=False)).item()  # the mean too
    for t in (bad, -bad):  # checked (the default) raises for either sign
        raises(ops.cross_entropy, x.detach(), t, match="outside")


def test_check_with_grad_cpu():
    """On the CPU the target check is read before the forward returns, whether or not the logits require grad (only
    the GPU defers it to backward: test_deferred_check)."""
    x = make_tensor((4, 9), torch.float32, "cpu", seed=4).requires_grad_()
    raises(ops.cross_entropy, x, torch.tensor([0, 9, 2, 3]), match="class index 9 outside")
    raises(ops.cross_entropy, x, torch.tensor([0, 1, -3, 3]), match="class index -3 outside")


@pytest.mark.cuda
def test_deferred_check():
    """Logits on the GPU that require grad: the forward queues the target check without waiting for it and backward
    raises for a bad target, after queuing its kernels, whose gradient it discards (x.grad stays None; a retained
    graph raises again); a graph freed without
    backward raises nothing; without grad (no_grad, detached logits) and in a compiled graph the forward raises;
    valid targets are unaffected."""
    C = 4096
    x = make_tensor((5, C), torch.float32, "cuda", seed=2).requires_grad_()
    good = targets(5, C, "cuda", 2, ignore_frac=0.0)
    bad = good.clone()
    bad[3] = C + 9
    loss = ops.cross_entropy(x, bad, reduction="none")
    assert torch.isnan(loss[3]).item() and torch.isfinite(loss[[0, 1, 2, 4]]).all().item()
    with pytest.raises(RuntimeError, match=f"class index {C + 9} outside .*read when backward ran"):
        loss.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=f"class index {C + 9} outside"):
        loss.sum().backward()
    assert x.grad is None
    for _ in range(3):  # graphs freed without backward
        ops.cross_entropy(x, bad)
    torch.cuda.synchronize()
    with torch.no_grad():
        raises(ops.cross_entropy, x, bad, match=f"class index {C + 9} outside")
    raises(ops.cross_entropy, x.detach(), -bad, match="class index -")
    fn = torch.compile(lambda a, t: ops.cross_entropy(a, t), fullgraph=True)
    raises(fn, x, bad, match=f"class index {C + 9} outside")
    x2 = x.detach().clone().requires_grad_()
    ours, ref = ops.cross_entropy(x, good), F.cross_entropy(x2, good)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, x)[0], torch.autograd.grad(ref, x2)[0])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replay(dtype):
    """Forward and backward captured into a CUDA graph (no target check while capturing; the warm-up before it takes
    the deferred check) and replayed on new logits equal eager, bit for bit: the loss's reduction is a programmatic
    dependent launch, which the capture must keep in order."""
    t = targets(64, 4096, "cuda", 7)
    check_graph_replay(lambda a: ops.cross_entropy(a, t), [make_tensor((64, 4096), dtype, "cuda", seed=7)])


@pytest.mark.cuda
@pytest.mark.parametrize("env", [{"MYOPS_CE_CLUSTER": "2", "MYOPS_CE_BULK": "0"},
                                 {"MYOPS_CE_CLUSTER": "8", "MYOPS_CE_BULK": "0"}, {"MYOPS_CE_BULK": "2"},
                                 {"MYOPS_CE_WARP": "2", "MYOPS_CE_FOLD32": "0"},
                                 {"MYOPS_CE_TPR": "64", "MYOPS_CE_FOLD32": "0"},
                                 {"MYOPS_CE_TPR": "128", "MYOPS_CE_FOLD32": "0"},
                                 {"MYOPS_CE_FOLD": "2"}, {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "32"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "64"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "128"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "8"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "16"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "4"},
                                 {"MYOPS_CE_FOLD": "2", "MYOPS_CE_FOLD_TPR": "2"},
                                 {"MYOPS_CE_BWD_FLAT": "2"}, {"MYOPS_CE_BWD_FLAT": "0"}, {"MYOPS_CE_FOLD32": "2"},
                                 {"MYOPS_CE_FOLD32": "2", "MYOPS_CE_FOLD_TPR": "16"},
                                 {"MYOPS_CE_FOLD32": "2", "MYOPS_CE_FOLD_TPR": "32"}, {"MYOPS_CE_FOLD32": "0"}],
                         ids=["cluster2", "cluster8", "bulk", "warp", "tpr64", "tpr128", "fold", "fold32", "fold64",
                              "fold128", "fold8", "fold16", "fold4", "fold2", "bwd_flat", "bwd_rows", "f32fold",
                              "f32fold16", "f32fold32", "f32warp"])
def test_forward_variants(env):
    """The GPU forward's variants on every row (knobs read once per process: run in a subprocess). MYOPS_CE_CLUSTER:
    the streaming kernel with each row split over a cluster (by default only long rows whose waves would leave the
    last one part-filled); MYOPS_CE_BULK=2: the bulk-copy kernel for every row up to 64 KB (by default rows of 32-64
    KB); MYOPS_CE_WARP=2: a warp per row for every row (by default rows up to 64 KB when there are enough to fill
    the SMs); MYOPS_CE_TPR=64 / 128: that many threads a row, several rows a CTA (by default fp32 rows of 16-64 KB
    on the H200), the last CTA's rows past the end included (these three with MYOPS_CE_FOLD32=0, so that fp32 rows
    of up to 2 KB take them too, not the fold kernel); MYOPS_CE_FOLD=2: the fold kernel for every 16-bit row
    (MYOPS_CE_FOLD_TPR=2 / 4 / 8 / 16 / 32 / 64 / 128: that many threads a row, several rows a CTA, or a warp;
    fp32 rows at 2 take 4);
    MYOPS_CE_BWD_FLAT=2 / 0: the backward's flat kernel (CTAs over any rows' vectors; by default rows under 1024
    vectors) / its row-chunk kernel for every row; MYOPS_CE_FOLD32=2 / 0: the fold kernel for every fp32 row (4 or 8
    threads a row by its bytes, or MYOPS_CE_FOLD_TPR's 16 / 32; by default rows up to 2 KB) / none. Rows far
    longer and far shorter than a CTA's or cluster's threads (C = 8: one thread holds the row), a partial last group
    (C = 1000, 16000), a warp whose last rows are past the end (37 rows), smoothing, an ignored row, and
    test_extreme_logits' rows (a CTA's or warp's rows redone exactly beside rows that are not); loss and gradient
    against float64."""
    cases = []
    for shape in [(5, 32000), (4, 16000), (3, 4096), (7, 1000), (37, 1024), (2, 8)]:
        for dtype in (torch.float32, torch.bfloat16):
            for smoothing in (0.0, 0.1):
                x = make_tensor(shape, dtype, "cpu", seed=shape[1]) * 4
                t = targets(shape[0], shape[1], "cpu", shape[0], ignore_frac=0.0)
                t[1] = -100
                g = torch.randn(shape[0], generator=torch.Generator().manual_seed(1)).to(dtype)
                cases.append((x, t, g, smoothing))
    for dtype in (torch.float32, torch.bfloat16):
        cases.append((*extreme_logits(dtype, 4096), 0.0))
    code = """
OUTPUT = []
for x, t, g, smoothing in INPUTS:
    x = x.cuda().requires_grad_()
    loss = ops.cross_entropy(x, t.cuda(), -100, smoothing, "none")
    (dx,) = torch.autograd.grad(loss, x, g.cuda())
    OUTPUT.append((loss.detach().cpu(), dx.cpu()))
"""
    for (x, t, g, smoothing), (loss, dx) in zip(cases, run_in_process(code, cases, env)):
        x64 = x.double().requires_grad_()
        ref = F.cross_entropy(x64, t, ignore_index=-100, label_smoothing=smoothing, reduction="none")
        (dref,) = torch.autograd.grad(ref, x64, g.double())
        check_close(loss, ref, x.dtype, what=f"loss {tuple(x.shape)} {x.dtype} smoothing {smoothing}")
        check_close(dx, dref, x.dtype, what=f"grad {tuple(x.shape)} {x.dtype} smoothing {smoothing}")


@pytest.mark.cuda
@pytest.mark.parametrize("env", [{}, {"MYOPS_CE_PACKED_BWD": "2"}, {"MYOPS_CE_PACKED_BWD": "3"},
                                 {"MYOPS_CE_MISALIGNED": "0"}], ids=["fold", "packed_seg", "packed_elem", "engine"])
def test_misaligned_rows(env):
    """Rows that do not start on a 16-byte boundary or do not hold whole 16-byte vectors, under MYOPS_CE_MISALIGNED
    (read once per process: a subprocess) = 1 (the default): the fold forward (16-bit, fp32), and the backward over
    the packed buffer's vectors (short rows: a vector may span two rows; by default the SEG form for 16-bit rows of
    512 bytes or more, MYOPS_CE_PACKED_BWD=2 for every row, =3 the per-element form for every row) or row chunks
    with each row's head and tail one element a thread; = 0: the rows.cuh engine. Odd C (every row at another
    offset; GPT-2's 50257; 13, under two bf16 vectors; 300 rows of 1001: several CTAs of the packed backward), logits
    one column into a wider tensor (a misaligned pointer, x and dx at different offsets: the backward's engine), a row
    stride of C + 3 (one such row: packed all the same), rows shorter than a vector, a warp's last rows past the end
    (37 rows of 4 threads), smoothing, an ignored row, and test_extreme_logits' rows one column in (16-bit: the exact
    second pass over head and tail); loss and gradient against float64."""
    cases = []
    for (M, C), layout in [((5, 7), "odd"), ((9, 1001), "odd"), ((300, 1001), "odd"), ((64, 13), "odd"),
                           ((3, 50257), "odd"), ((37, 130), "offset"), ((6, 8192), "offset"), ((4, 2048), "stride"),
                           ((3, 8195), "odd"), ((1, 1001), "stride")]:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for smoothing in (0.0, 0.1):
                wide = C + (1 if layout == "offset" else 3 if layout == "stride" else 0)
                big = make_tensor((M, wide), dtype, "cpu", seed=C + M) * 4
                t = targets(M, C, "cpu", M, ignore_frac=0.0)
                if M > 1:
                    t[1] = -100
                g = torch.randn(M, generator=torch.Generator().manual_seed(C)).to(dtype)
                cases.append((big, layout, C, t, g, smoothing))
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x, t, g = extreme_logits(dtype, 4097)
        t = t.clamp(max=4095)
        t[7] = 2  # (row 7's one finite logit, column 3, is column 2 one column in)
        cases.append((x, "offset", 4096, t, g, 0.0))
    code = """
OUTPUT = []
for big, layout, C, t, g, smoothing in INPUTS:
    big = big.cuda()
    x = (big[:, 1:] if layout == "offset" else big[:, :C]).detach().requires_grad_()
    loss = ops.cross_entropy(x, t.cuda(), -100, smoothing, "none")
    (dx,) = torch.autograd.grad(loss, x, g.cuda())
    OUTPUT.append((loss.detach().cpu(), dx.cpu()))
"""
    for (big, layout, C, t, g, smoothing), (loss, dx) in zip(cases, run_in_process(code, cases, env)):
        x = big[:, 1:] if layout == "offset" else big[:, :C]
        x64 = x.double().requires_grad_()
        ref = F.cross_entropy(x64, t, ignore_index=-100, label_smoothing=smoothing, reduction="none")
        (dref,) = torch.autograd.grad(ref, x64, g.double())
        what = f"{tuple(x.shape)} {layout} {x.dtype} smoothing {smoothing}"
        check_close(loss, ref, x.dtype, what=f"loss {what}")
        check_close(dx, dref, x.dtype, what=f"grad {what}")


@pytest.mark.cuda
@pytest.mark.parametrize("parts", ["1", "2"])
def test_loss_parts(parts):
    """The GPU's "mean" / "sum" over many rows in parts (MYOPS_CE_PARTS, read once per process: run in a
    subprocess): 1 reduces M >= 65536 rows in parts of 4096, 2 every M > 1 in parts of 3 rows (a short last part
    included). Loss and gradient against float64 for ignored rows, a strided target, every row ignored (mean: NaN),
    one row, the backward's count alone ("mean") and its factor unscaled ("sum"); the same loss twice, bit for bit
    (the parts' order is fixed)."""
    cases = []
    for M, C in [(1, 40), (5, 40), (7, 1000), (3001, 64), (70001, 8)]:
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            for reduction in ("mean", "sum"):
                x = make_tensor((M, C), dtype, "cpu", seed=M + C) * 3
                t = targets(M, C, "cpu", M)
                cases.append((x, t, reduction))
    cases.append((make_tensor((9, 16), torch.float32, "cpu", seed=9), torch.full((9,), -100), "mean"))
    code = """
OUTPUT = []
for x, t, reduction in INPUTS:
    x = x.cuda().requires_grad_()
    t2 = torch.zeros(2 * t.numel(), dtype=t.dtype, device="cuda")
    t2[::2] = t.cuda()
    t = t2[::2]  # (a strided target)
    loss = ops.cross_entropy(x, t, -100, 0.0, reduction)
    again = ops.cross_entropy(x.detach(), t, -100, 0.0, reduction)
    (dx,) = torch.autograd.grad(loss, x, torch.tensor(0.75, dtype=x.dtype, device="cuda"))
    OUTPUT.append((loss.detach().cpu(), again.cpu(), dx.cpu()))
"""
    for (x, t, reduction), (loss, again, dx) in zip(cases, run_in_process(code, cases, {"MYOPS_CE_PARTS": parts})):
        what = f"{tuple(x.shape)} {x.dtype} {reduction}"
        x64 = x.double().requires_grad_()
        ref = F.cross_entropy(x64, t, ignore_index=-100, reduction=reduction)
        (dref,) = torch.autograd.grad(ref, x64, torch.tensor(0.75, dtype=torch.float64))
        check_close(loss, ref, x.dtype, what=f"loss {what}")
        check_close(dx, dref, x.dtype, what=f"grad {what}")
        assert torch.equal(loss, again) or (loss.isnan() and again.isnan()), what
