"""vmap's kernels (csrc/ops/batching.{h,cpp}): every op's rule is C++, and what the per-op tests' check_func does not
reach: nested vmaps (a level that batches none of an op's arguments, a batched weight under an outer level), empty
batches, and per-sample gradients inside torch.compile with dynamic shapes. Each op's own rule is checked against
per-sample calls in its test file (check_func)."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

import ops
from common import DEVICES, check_vs_eager, no_vmap_fallback


def myops_ops() -> list[str]:
    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("myops::"))


def test_every_op_has_a_cpp_rule():
    """Every op and backward op has a FuncTorchBatched kernel registered from its own C++ file (not a Python
    kernel: torch.library.register_vmap's cost 0.2-0.6 ms of host time a call on the CPU VM)."""
    names = myops_ops()
    assert {f"myops::{op}" for op in ops.OPS} <= set(names)
    for name in names:
        dump = torch._C._dispatch_dump(name)
        line = next((s for s in dump.splitlines() if s.startswith("FuncTorchBatched:")), None)
        assert line is not None, f"{name} has no vmap kernel"
        stem = name.split("::")[1].removesuffix("_backward")
        assert re.search(rf"csrc/ops/{stem}\.cpp:\d+", line), f"{name}'s vmap kernel is not its C++ file's: {line}"


def test_nested_vmap():
    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    ys = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 8, generator=gen, dtype=torch.float64)
    with no_vmap_fallback():
        # the inner vmap batches none of relu's arguments (x is batched at the outer level alone)
        got = vmap(lambda x: vmap(lambda y: ops.relu(x) + y)(ys))(xs)
        torch.testing.assert_close(got, torch.stack([torch.stack([x.relu() + y for y in ys]) for x in xs]))
        # the outer level batches the weight (per sample), the inner one x
        got = vmap(lambda ww: vmap(lambda x: ops.rms_norm(x, ww))(xs))(w)
        want = torch.stack([torch.stack([F.rms_norm(x, (8,), ww, 1e-6) for x in xs]) for ww in w])
        torch.testing.assert_close(got, want)
        # both levels batch the same argument
        torch.testing.assert_close(vmap(lambda x: vmap(ops.softmax, in_dims=1)(x))(xs), xs.softmax(1).transpose(1, 2))
        # per-sample gradients of per-sample gradients' sums: vmap(grad) inside vmap
        inner = vmap(grad(lambda ww, x: ops.layer_norm(x, ww).square().sum()), in_dims=(None, 0))
        got = vmap(lambda ww: inner(ww, xs))(w)
        want = torch.stack([vmap(grad(lambda v, x: F.layer_norm(x, (8,), v).square().sum()), in_dims=(None, 0))(
            ww, xs) for ww in w])
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("batched_weight", [False, True])
def test_empty_batch(batched_weight):
    """A batch of no samples gives outputs of no samples (with a batched weight too: the op without it, then the
    affine of no samples)."""
    x = torch.randn(0, 3, 8)
    with no_vmap_fallback():
        if batched_weight:
            out = vmap(lambda a, w: ops.layer_norm(a, w))(x, torch.randn(0, 8))
        else:
            out = vmap(lambda a: ops.layer_norm(a))(x)
        assert out.shape == (0, 3, 8)
        assert vmap(lambda a: ops.sum(a, 1))(x).shape == (0, 3)


def test_per_sample_grads_compiled():
    """vmap(grad) inside torch.compile(fullgraph, dynamic shapes): the rules run on fake tensors of symbolic sizes."""
    gen = torch.Generator().manual_seed(1)
    xs = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(8, generator=gen, dtype=torch.float64)
    mine = torch.compile(vmap(grad(lambda v, x: ops.rms_norm(x, v).square().sum()), in_dims=(None, 0)),
                         fullgraph=True, dynamic=True)
    want = vmap(grad(lambda v, x: F.rms_norm(x, (8,), v, 1e-6).square().sum()), in_dims=(None, 0))(w, xs)
    torch.testing.assert_close(mine(w, xs), want)
    logits = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    target = torch.randint(0, 7, (3, 5), generator=gen)
    target[1, 2] = -100
    mine = torch.compile(vmap(grad(lambda a, t: ops.cross_entropy(a, t))), fullgraph=True, dynamic=True)
    torch.testing.assert_close(mine(logits, target), vmap(grad(lambda a, t: F.cross_entropy(a, t)))(logits, target))
    # two per-sample sums (layer_norm's weight and bias), and batched weights (an ensemble's: one call)
    b = torch.randn(8, generator=gen, dtype=torch.float64)
    mine = torch.compile(vmap(grad(lambda v, c, x: ops.layer_norm(x, v, c).square().sum(), (0, 1)),
                              in_dims=(None, None, 0)), fullgraph=True, dynamic=True)
    want = vmap(grad(lambda v, c, x: F.layer_norm(x, (8,), v, c).square().sum(), (0, 1)), in_dims=(None, None, 0))(
        w, b, xs)
    torch.testing.assert_close(mine(w, b, xs), want)
    ws = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    mine = torch.compile(vmap(lambda x, v: ops.rms_norm(x, v)), fullgraph=True, dynamic=True)
    torch.testing.assert_close(mine(xs, ws), torch.stack([F.rms_norm(xs[i], (8,), ws[i], 1e-6) for i in range(3)]))
    bs = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    mine = torch.compile(vmap(grad(lambda v, c, x: ops.layer_norm(x, v, c).square().sum(), (0, 1))), fullgraph=True,
                         dynamic=True)
    want = vmap(grad(lambda v, c, x: F.layer_norm(x, (8,), v, c).square().sum(), (0, 1)))(ws, bs, xs)
    torch.testing.assert_close(mine(ws, bs, xs), want)


@pytest.mark.parametrize("case", ["sum_dim", "softmax_dim", "weight", "target", "batched_weight_shape",
                                  "batched_bias_dtype", "batched_weight_backward"])
def test_errors_under_vmap(case):
    """A bad argument under vmap raises the op's own RuntimeError, naming the argument, with a sample's dims; a batched
    parameter, which the norms' rules take out of the op's call, too (forward and backward)."""
    x = torch.randn(2, 4, 5)
    calls = {
        "sum_dim": (lambda a: ops.sum(a, 2), r"myops\.sum: dim 2 is out of range for x with 2 dimensions"),
        "softmax_dim": (lambda a: ops.softmax(a, -3), r"myops\.softmax: dim -3 is out of range for a tensor with 2"),
        "weight": (lambda a: ops.rms_norm(a, torch.ones(4)), r"myops\.rms_norm: weight must have shape \[5\]"),
        "target": (lambda a: ops.cross_entropy(a, torch.tensor([0, 7, 1, 2])), r"target"),
        "batched_weight_shape": (lambda a, w: ops.layer_norm(a, w), r"myops\.layer_norm: weight must have shape \[5\]"),
        "batched_bias_dtype": (lambda a, w: ops.layer_norm(a, None, w.double()), r"myops\.layer_norm: .*bias"),
        "batched_weight_backward": (lambda a, w: torch.ops.myops.rms_norm_backward(a, a, a[:, 0], w, True, 1e-6),
                                    r"myops\.rms_norm_backward: weight must have shape \[5\]"),
    }
    fn, message = calls[case]
    args = (x, torch.ones(2, 4)) if case.startswith("batched") else (x,)
    if case == "batched_bias_dtype":
        args = (x, torch.ones(2, 5))
    with no_vmap_fallback(), pytest.raises(RuntimeError, match=message):
        vmap(fn)(*args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads_first, interleaved", [(False, False), (True, True)])
@pytest.mark.parametrize("which", ["all", "tables", "cos"])
def test_rope_per_sample_tables(device, which, heads_first, interleaved):
    """rope under vmap with per-sample tables (positions) takes the batch in one call (the tables' batch dim lined up
    with x's first batch dim), x's own batch dims too: against the op per sample, and per-sample gradients."""
    gen = torch.Generator().manual_seed(2)
    batch, S, H, D = 3, 5, 2, 8
    x = torch.randn(batch, 4, H, S, D, generator=gen) if heads_first else torch.randn(batch, 4, S, H, D, generator=gen)
    cos, sin = torch.randn(batch, S, D, generator=gen), torch.randn(batch, 1, S, D, generator=gen)
    x, cos, sin = x.to(device), cos.to(device), sin.to(device)
    dims = {"all": (0, 0, 0), "tables": (None, 0, 0), "cos": (0, 0, None)}[which]
    args = [t if d is not None else t[0] for t, d in zip((x, cos, sin), dims)]

    def one(a, c, s):
        return ops.rope(a, c, s, heads_first=heads_first, interleaved=interleaved)

    def sample(i):
        return [t[i] if d is not None else t for t, d in zip(args, dims)]

    with no_vmap_fallback():
        torch.testing.assert_close(vmap(one, in_dims=dims)(*args), torch.stack([one(*sample(i)) for i in range(batch)]))
        loss = grad(lambda a, c, s: one(a, c, s).square().sum(), argnums=(0, 1, 2))
        got = vmap(loss, in_dims=dims)(*args)
        want = [loss(*sample(i)) for i in range(batch)]
        for k in range(3):
            torch.testing.assert_close(got[k], torch.stack([w[k] for w in want]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ["rms_norm", "add_rms_norm", "layer_norm"])
def test_norm_per_sample_sums_16bit(device, dtype, op):
    """The norms' per-sample weight (and bias) gradients of 16-bit inputs, summed in fp32 by the vmap rules (the
    16-bit tensors promoted inside ATen's kernels), equal the op's own backward per sample within one rounding."""
    gen = torch.Generator().manual_seed(3)
    xs = torch.randn(4, 6, 33, generator=gen).to(device, dtype)
    res = torch.randn(4, 6, 33, generator=gen).to(device, dtype)
    w = torch.randn(33, generator=gen).to(device, dtype)
    b = torch.randn(33, generator=gen).to(device, dtype)
    fns = {
        "rms_norm": lambda v, c, x, r: ops.rms_norm(x, v),
        "add_rms_norm": lambda v, c, x, r: ops.add_rms_norm(x, r, v)[0],
        "layer_norm": lambda v, c, x, r: ops.layer_norm(x, v, c),
    }
    argnums = (0, 1) if op == "layer_norm" else (0,)
    loss = grad(lambda v, c, x, r: fns[op](v, c, x, r).float().square().sum(), argnums)
    with no_vmap_fallback():
        got = vmap(loss, in_dims=(None, None, 0, 0))(w, b, xs, res)
    for k in range(len(argnums)):
        want = torch.stack([loss(w, b, xs[i], res[i])[k] for i in range(4)])
        torch.testing.assert_close(got[k], want)


def norm_cases(B, dtype, device, gen):
    """(name, fn, args, in_dims) of the norms with batched parameters: an ensemble's weights and biases."""
    def r(*shape):
        return torch.randn(*shape, generator=gen).to(device, dtype)
    x, res, w, b = r(B, 5, 3, 16), r(B, 5, 3, 16), r(B, 16), r(B, 16)
    ln = lambda x, w, b: ops.layer_norm(x, w, b)  # noqa: E731
    return [("layer_norm w, b", ln, (x, w, b), (0, 0, 0)),
            ("layer_norm w", ln, (x, w, b[0]), (0, 0, None)),
            ("layer_norm b", ln, (x, w[0], b), (0, None, 0)),
            ("layer_norm x shared", ln, (x[0], w, b), (None, 0, 0)),
            ("layer_norm x at dim 1", ln, (x.movedim(0, 1), w, b), (1, 0, 0)),
            ("rms_norm", lambda x, w: ops.rms_norm(x, w), (x, w), (0, 0)),
            ("add_rms_norm", lambda x, r, w: ops.add_rms_norm(x, r, w), (x, res, w), (0, 0, 0))]


def sample(args, dims, i):
    return [a.select(d, i) if d is not None else a for a, d in zip(args, dims)]


def myops_calls(fn) -> int:
    """How many times fn calls a myops op (each dispatcher call, the batched one and those below it)."""
    with torch.autograd.profiler.profile() as prof:
        fn()
    return sum(e.name.startswith("myops::") for e in prof.function_events)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batched_params(device, dtype):
    """vmap over the norms' weights and biases (an ensemble's, as torch.func.stack_module_state gives them), with x
    batched or shared, runs the op once over the batch (its affine applied after it), and the backward op once
    (grad times the weight before it); outputs and per-sample gradients of every input equal per-sample calls."""
    B = 4
    gen = torch.Generator().manual_seed(5)
    for name, fn, args, dims in norm_cases(B, dtype, device, gen):
        def total(*a, fn=fn):
            out = fn(*a)
            return sum((t * t).sum() for t in (out if isinstance(out, tuple) else (out,)) if t.is_floating_point())

        argnums = tuple(range(len(args)))
        with no_vmap_fallback():
            got = vmap(fn, in_dims=dims)(*args)
            grads = vmap(grad(total, argnums), in_dims=dims)(*args)
            calls = myops_calls(lambda: vmap(grad(total, argnums), in_dims=dims)(*args))
        per = [fn(*sample(args, dims, i)) for i in range(B)]
        want = torch.stack(per) if isinstance(per[0], torch.Tensor) else tuple(torch.stack(o) for o in zip(*per))
        torch.testing.assert_close(got, want, msg=name)
        per_grads = [grad(total, argnums)(*sample(args, dims, i)) for i in range(B)]
        for k in argnums:
            torch.testing.assert_close(grads[k], torch.stack([g[k] for g in per_grads]), msg=f"{name}: grad {k}")
        # forward and backward op, each once batched and once below: not once per sample
        assert calls <= 4, f"{name}: {calls} myops calls for {B} samples"


@pytest.mark.parametrize("batched_weight", [False, True])
def test_norm_sums_large_cpu_batch(batched_weight):
    """On the CPU a norm's backward over a batch of 2^22 elements or more runs per sample (fold_norm_sums); its
    per-sample gradients still equal per-sample calls."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 1024, 1024, generator=gen)
    w = torch.randn(4, 1024, generator=gen) if batched_weight else torch.randn(1024, generator=gen)
    loss = grad(lambda v, x: ops.rms_norm(x, v).square().sum(), (0, 1))
    with no_vmap_fallback():
        got = vmap(loss, in_dims=(0 if batched_weight else None, 0))(w, x)
    for k in range(2):
        want = torch.stack([loss(w[i] if batched_weight else w, x[i])[k] for i in range(4)])
        torch.testing.assert_close(got[k], want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batched_params_16bit(device, dtype):
    """16-bit norms with batched parameters (the affine rounded once after the op's own rounding, as PyTorch's vmap
    of F.layer_norm rounds twice): within the issue's rule against float64, eager being PyTorch's own ops under the
    same vmap."""
    B = 4
    gen = torch.Generator().manual_seed(6)
    eager = {"layer_norm": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
             "rms_norm": lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6),
             "add_rms_norm": lambda x, r, w: F.rms_norm(x + r, x.shape[-1:], w, 1e-6)}
    for name, fn, args, dims in norm_cases(B, dtype, device, gen):
        op = name.split()[0]
        with no_vmap_fallback():
            got = vmap(fn, in_dims=dims)(*args)
        got = got[0] if isinstance(got, tuple) else got
        theirs = vmap(eager[op], in_dims=dims)(*args)
        ref = vmap(eager[op], in_dims=dims)(*[a.double() for a in args])
        check_vs_eager(got, theirs, ref, dtype, what=name)


def test_vmap_of_other_transforms():
    """vmap around and inside jacrev, jacfwd, hessian and vmap(grad): the rules find their level among the others
    (jacrev's own vmap over cotangents sits above the outer vmap)."""
    from torch.func import hessian, jacfwd, jacrev
    gen = torch.Generator().manual_seed(4)
    xs = torch.randn(3, 2, 6, generator=gen, dtype=torch.float64)
    w = torch.randn(6, generator=gen, dtype=torch.float64)

    def mine(x):
        return ops.rms_norm(x, w)

    def ref(x):
        return F.rms_norm(x, (6,), w, 1e-6)

    def mine_loss(x):
        return ops.layer_norm(x, w).square().sum()

    def ref_loss(x):
        return F.layer_norm(x, (6,), w).square().sum()

    with no_vmap_fallback():
        torch.testing.assert_close(vmap(jacrev(mine))(xs), vmap(jacrev(ref))(xs))
        torch.testing.assert_close(jacrev(vmap(mine))(xs), jacrev(vmap(ref))(xs))
        torch.testing.assert_close(vmap(jacfwd(mine))(xs), vmap(jacfwd(ref))(xs))
        torch.testing.assert_close(vmap(hessian(mine_loss))(xs), vmap(hessian(ref_loss))(xs))
        torch.testing.assert_close(vmap(vmap(grad(mine_loss)))(xs), vmap(vmap(grad(ref_loss)))(xs))
        logits = torch.randn(3, 4, 7, generator=gen, dtype=torch.float64)
        target = torch.randint(0, 7, (3, 4), generator=gen)
        torch.testing.assert_close(vmap(jacrev(lambda a, t: ops.cross_entropy(a, t, reduction="none")))(logits, target),
                                   vmap(jacrev(lambda a, t: F.cross_entropy(a, t, reduction="none")))(logits, target))
