"""What every op's tests share: the tolerance table, input strategies, the float64 reference comparison, and
checkers for gradcheck, opcheck, torch.compile and bad inputs."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Sequence

import pytest
import torch
from hypothesis import strategies as st

# One row per dtype: |out - ref| <= atol + rtol * scale, with ref the PyTorch expression in float64 and scale |ref|
# (or, for sums, the sum of the magnitudes of the terms). rtol is twice the unit roundoff of the output dtype
# (kernels compute in fp32 and round once), or a few fp32 roundoffs for fp32 outputs.
TOL = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2.0**-10, 1e-5),
    torch.bfloat16: (2.0**-7, 1e-5),
}

# Accuracy against eager (issue 4): |ours - ref|_max <= 2 |eager - ref|_max + FLOOR[dtype] * max(1, |ref|_max),
# ref in float64 and eager the PyTorch expression run in the op's dtype on the same device. FLOOR is four units in
# the last place at magnitude 1: it only matters when eager happens to be (nearly) exact, e.g. rows of one element,
# where any other rounding order of the same formula is a few ulps off. float64 is not compared: there eager *is*
# the reference, so the rule would demand bitwise agreement; float64 results are held to the TOL table instead.
FLOOR = {torch.float64: 2.0**-50, torch.float32: 2.0**-21, torch.float16: 2.0**-8, torch.bfloat16: 2.0**-5}
EAGER_FACTOR = 2.0

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
LAYOUTS = ["contiguous", "transposed", "row_strided", "col_strided", "permuted"]


def run_in_process(code: str, inputs: object, env: dict[str, str], timeout: float = 900) -> object:
    """Runs `code` in a fresh Python process from the checkout with `env` added to the environment (the kernels'
    knobs are read once per process), torch and ops imported and `inputs` (anything torch.save takes) loaded as
    INPUTS; returns what the code leaves in OUTPUT."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prog = ("import sys, torch, ops\nINPUTS = torch.load(sys.argv[1])\n" + textwrap.dedent(code) +
            "\ntorch.save(OUTPUT, sys.argv[2])\n")
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.pt"), os.path.join(d, "out.pt")
        torch.save(inputs, src)
        r = subprocess.run([sys.executable, "-c", prog, src, dst], cwd=root, env=dict(os.environ, **env),
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, r.stderr[-3000:]
        return torch.load(dst)


def poison_allocator(device: str, nbytes: int = 1 << 24) -> None:
    """Fills (and frees) a block with NaN so that the next outputs likely reuse memory holding NaN: an element a
    kernel forgets to write shows up as NaN instead of a lucky stale value."""
    torch.empty(nbytes // 4, device=device).fill_(float("nan"))


@st.composite
def shapes(draw, min_dims: int = 1, max_dims: int = 4, max_numel: int = 1 << 16) -> tuple[int, ...]:
    """Shapes with odd sizes, size 1, and sometimes an empty dim."""
    nd = draw(st.integers(min_dims, max_dims))
    size = st.one_of(st.sampled_from([1, 2, 3, 7, 8, 17, 31, 64, 129]), st.integers(1, 300))
    dims = [draw(size) for _ in range(nd)]
    while math.prod(dims) > max_numel:
        i = max(range(nd), key=lambda k: dims[k])
        dims[i] = max(1, dims[i] // 2)
    if nd and draw(st.integers(0, 15)) == 0:
        dims[draw(st.integers(0, nd - 1))] = 0
    return tuple(dims)


def make_tensor(shape: Sequence[int], dtype: torch.dtype, device: str, layout: str = "contiguous",
                seed: int = 0) -> torch.Tensor:
    """A randn tensor of `shape` whose memory layout is `layout`:
    contiguous; transposed (last two dims swapped in memory); row_strided (rows padded: row stride > row length);
    col_strided (every other element of the last dim); permuted (dims stored in reverse order)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    nd = len(shape)

    def randn(s):
        return torch.randn(s, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)

    if layout == "transposed" and nd >= 2:
        return randn(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
    if layout == "row_strided" and nd >= 1:
        return randn(shape[:-1] + (shape[-1] + 5,))[..., : shape[-1]]
    if layout == "col_strided" and nd >= 1:
        return randn(shape[:-1] + (2 * shape[-1],))[..., ::2]
    if layout == "permuted" and nd >= 2:
        return randn(shape[::-1]).permute(*reversed(range(nd)))
    return randn(shape)


def check_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor | None = None,
                what: str = "output") -> None:
    """Asserts out (in dtype) matches the float64 reference within TOL[dtype]; NaN must match NaN."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert out.dtype == dtype, f"{what}: dtype {out.dtype} != {dtype}"
    rtol, atol = TOL[dtype]
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    s = (r.abs() if scale is None else scale.detach().to("cpu", torch.float64))
    nan_ok = torch.isnan(o) == torch.isnan(r)
    err = (o - r).abs()
    bad = ~nan_ok | (~torch.isnan(r) & (o != r) & ~(err <= atol + rtol * s))  # o != r: inf matches inf
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {o.numel()} elements off (dtype {dtype}, rtol {rtol}, atol {atol}); "
            f"first at {idx}: got {o[tuple(idx)].item()!r}, reference {r[tuple(idx)].item()!r}; "
            f"max error {err[~torch.isnan(err)].max().item() if (~torch.isnan(err)).any() else 'nan'}")


def to64(*ts: torch.Tensor) -> list[torch.Tensor]:
    """Float64 CPU copies that require grad like their originals."""
    return [t.detach().to("cpu", torch.float64).requires_grad_(t.requires_grad) for t in ts]


def check_gradcheck(fn: Callable, inputs: Sequence[torch.Tensor]) -> None:
    assert torch.autograd.gradcheck(fn, tuple(inputs), eps=1e-6, atol=1e-5, rtol=1e-4)


def check_func(fn: Callable, eager_fn: Callable, inputs: Sequence[torch.Tensor]) -> None:
    """torch.func takes the op as it takes PyTorch's own: grad (of a random weighting of every output) and jacrev of
    the first output, with respect to every floating input, equal eager's. A second derivative with respect to the
    first floating input (reverse over reverse) equals eager's and passes gradgradcheck (through the backward op's
    formula of its own, its composite, or its plain ATen ops); forward-mode AD (jvp, jacfwd, the Hessian as jacfwd
    of jacrev) equals eager's. vmap of the op, and of its grad (per-sample gradients), equal the op and its grad run
    per sample, with every op and backward op taken by its vmap rule (csrc/ops/batching.h): PyTorch's per-sample
    fallback (which only prints a warning from C++) is switched off, so that an op without a rule raises."""
    with no_vmap_fallback(), warnings.catch_warnings():
        # (torch.func's import warns of torch.jit.script's deprecation)
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=FutureWarning)
        _check_func(fn, eager_fn, inputs)
        _check_vmap(fn, inputs)


@contextlib.contextmanager
def no_vmap_fallback():
    """vmap of an op without a batching rule raises inside (PyTorch's per-sample fallback is switched off)."""
    fallback = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(fallback)


def _check_vmap(fn: Callable, inputs: Sequence[torch.Tensor], batch: int = 3) -> None:
    """vmap(fn) and vmap(grad(sum of fn's floating outputs)) against per-sample calls: the first input batched alone
    (along dim 1 where it has one: the rules move it first) and then every input batched (the weights too: their
    rules run per sample)."""
    gen = torch.Generator().manual_seed(1)
    argnums = tuple(i for i, t in enumerate(inputs) if t.is_floating_point())

    def samples(t):
        if not t.is_floating_point():
            return [t] * batch
        return [t + 0.5 * k * torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device) for k in range(batch)]

    def total(*xs):
        return sum((y * y).sum() for y in _outputs(fn(*xs)) if y.is_floating_point())

    def stacked(outs):
        return torch.stack(outs) if isinstance(outs[0], torch.Tensor) else tuple(torch.stack(o) for o in zip(*outs))

    for which in ([0], list(range(len(inputs)))):
        dims = [None] * len(inputs)
        for i in which:
            dims[i] = 1 if i == 0 and inputs[0].dim() >= 1 else 0
        per = [samples(t) if d is not None else None for t, d in zip(inputs, dims)]
        args = [torch.stack(p, d) if d is not None else t for t, p, d in zip(inputs, per, dims)]
        sample = [[p[b] if p is not None else t for t, p in zip(inputs, per)] for b in range(batch)]
        torch.testing.assert_close(torch.func.vmap(fn, in_dims=tuple(dims))(*args),
                                   stacked([fn(*s) for s in sample]))
        torch.testing.assert_close(torch.func.vmap(torch.func.grad(total, argnums), in_dims=tuple(dims))(*args),
                                   stacked([torch.func.grad(total, argnums)(*s) for s in sample]))


def _check_func(fn: Callable, eager_fn: Callable, inputs: Sequence[torch.Tensor]) -> None:
    argnums = tuple(i for i, t in enumerate(inputs) if t.is_floating_point())
    gen = torch.Generator().manual_seed(0)
    outs = _outputs(fn(*inputs))
    weights = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) if o.is_floating_point() else None
               for o in outs]

    def scalar(f):
        def s(*xs):
            return sum((y * w).sum() for y, w in zip(_outputs(f(*xs)), weights) if w is not None)
        return s

    def first(f):
        def y0(*xs):
            return _outputs(f(*xs))[0]
        return y0

    for got, want in zip(torch.func.grad(scalar(fn), argnums)(*inputs),
                         torch.func.grad(scalar(eager_fn), argnums)(*inputs)):
        torch.testing.assert_close(got, want)
    for got, want in zip(torch.func.jacrev(first(fn), argnums)(*inputs),
                         torch.func.jacrev(first(eager_fn), argnums)(*inputs)):
        torch.testing.assert_close(got, want)
    k = argnums[0]

    def grad_norm(f):
        return lambda *xs: torch.func.grad(scalar(f), k)(*xs).square().sum()
    torch.testing.assert_close(torch.func.grad(grad_norm(fn), k)(*inputs),
                               torch.func.grad(grad_norm(eager_fn), k)(*inputs))
    # (every floating input at once: the backward op's own formula or composite against finite differences)
    torch.autograd.gradgradcheck(fn, [t.detach().requires_grad_(t.is_floating_point()) for t in inputs])
    # forward-mode AD (the op's ATen composite, csrc/ops/autograd.h): jvp in every floating input at once, jacfwd,
    # and the Hessian as forward over reverse (jacfwd of jacrev: tangents through the backward ops' composites)
    tangents = [torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device)
                for t in inputs if t.is_floating_point()]

    def of_floats(f):
        def g(*fl):
            it = iter(fl)
            return f(*[next(it) if t.is_floating_point() else t for t in inputs])
        return g
    primals = tuple(t for t in inputs if t.is_floating_point())
    torch.testing.assert_close(torch.func.jvp(of_floats(fn), primals, tuple(tangents)),
                               torch.func.jvp(of_floats(eager_fn), primals, tuple(tangents)))
    torch.testing.assert_close(torch.func.jacfwd(first(fn), k)(*inputs), torch.func.jacfwd(first(eager_fn), k)(*inputs))
    # bf16 primals and tangents: the composite computes in fp32 and returns the op's dtype (against float64 eager on
    # the same rounded values, within a few bf16 roundings)
    low = tuple(t.to(torch.bfloat16) for t in primals)
    got = torch.utils._pytree.tree_leaves(torch.func.jvp(of_floats(fn), low,
                                                         tuple(t.to(torch.bfloat16) for t in tangents)))
    want = torch.utils._pytree.tree_leaves(torch.func.jvp(of_floats(eager_fn), tuple(t.double() for t in low),
                                                          tuple(t.to(torch.bfloat16).double() for t in tangents)))
    assert len(got) == len(want) >= 2
    for g, w in zip(got, want):
        assert g.dtype == (torch.bfloat16 if w.is_floating_point() else w.dtype), (g.dtype, w.dtype)
        torch.testing.assert_close(g.double(), w, rtol=2e-2, atol=2e-2 * max(1.0, w.abs().max().item()))
    torch.testing.assert_close(torch.func.jacfwd(torch.func.jacrev(scalar(fn), k), k)(*inputs),
                               torch.func.jacfwd(torch.func.jacrev(scalar(eager_fn), k), k)(*inputs))


def check_opcheck(op, args: tuple, kwargs: dict | None = None) -> None:
    torch.library.opcheck(op, args, kwargs or {})


def layout_operands(device: str, layout: str, n: int) -> tuple[torch.Tensor, ...]:
    """n float32 [3, 5, 7] operands (seeds 0..n-1) that require grad, check_output_layout's inputs: of one layout, or
    of a comma-separated list's in turn ("transposed,contiguous": a mixed pair, whose second is copied into the
    first's layout)."""
    ls = layout.split(",")
    return tuple(make_tensor((3, 5, 7), torch.float32, device, ls[s % len(ls)], seed=s).requires_grad_()
                 for s in range(n))


def check_output_layout(op, args: tuple, like: int = 0) -> None:
    """op's tensor outputs laid out as args[like] (torch.empty_like: outputs of a transposed or permuted operand's
    strides, as eager's elementwise ops give, so that neither side of the op pays a transposing copy), and its fake
    impl saying the same (opcheck compares the strides)."""
    want = torch.empty_like(args[like]).stride()
    for o in _outputs(op(*args)):
        assert o.stride() == want, f"output strides {o.stride()}, want {want} (those of argument {like})"
    check_opcheck(op, tuple(args))


def check_compile(fn: Callable, inputs: Sequence[torch.Tensor], backward: bool = True, tol: float = 0.0) -> None:
    """fn under torch.compile(fullgraph=True, dynamic=True) gives eager's result and gradients (no graph break:
    fullgraph raises on one). Run on two shapes to exercise the dynamic graph. Results must be bitwise equal
    (tol 0: the same kernels run) unless part of the op's backward is plain torch code, which Inductor may fuse
    and round differently."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    for xs in (inputs, [t.detach()[: max(1, t.shape[0] - 1)] if t.dim() > 1 else t.detach() for t in inputs]):
        eager_in = [t.detach().clone().requires_grad_(t.is_floating_point() and backward) for t in xs]
        comp_in = [t.detach().clone().requires_grad_(t.is_floating_point() and backward) for t in xs]
        e = fn(*eager_in)
        c = compiled(*comp_in)
        torch.testing.assert_close(c, e, rtol=tol, atol=tol)
        if backward:
            g = torch.randn_like(e)
            ge = torch.autograd.grad(e, [t for t in eager_in if t.requires_grad], g)
            gc = torch.autograd.grad(c, [t for t in comp_in if t.requires_grad], g)
            for a, b in zip(gc, ge):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def raises(fn: Callable, *args, match: str) -> None:
    """fn(*args) raises RuntimeError whose message matches `match` (the argument's name and what was expected)."""
    with pytest.raises(RuntimeError, match=match):
        fn(*args)


def check_against_reference(fn: Callable, ref_fn: Callable, inputs: Sequence[torch.Tensor],
                            row_broadcast: Sequence[int] = (), grad: bool = True) -> None:
    """fn(*inputs) and its input gradients match ref_fn evaluated in float64.

    row_broadcast lists inputs (per-feature vectors) that ref_fn broadcasts over all leading dims: their gradient
    is a sum over rows, so its tolerance scales with the sum of the magnitudes of the summed terms."""
    dtype = inputs[0].dtype
    device = inputs[0].device.type
    xs = [t.detach().requires_grad_(grad) for t in inputs]
    poison_allocator(device)
    out = fn(*xs)
    ref_in = to64(*xs)
    full_shape = ref_in[0].shape
    # Broadcast vectors enter the reference as full tensors so that the per-element terms of their gradient exist.
    ref_args = [t.detach().expand(full_shape).clone().requires_grad_(grad) if i in row_broadcast else t
                for i, t in enumerate(ref_in)]
    ref = ref_fn(*ref_args)
    check_close(out, ref, dtype)
    if not grad or out.numel() == 0:
        return
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(out.numel()))
    poison_allocator(device)
    grads = torch.autograd.grad(out, xs, g.to(dtype=dtype, device=out.device))
    ref_grads = torch.autograd.grad(ref, ref_args, g.to(dtype=ref.dtype))
    for i, (gi, ri) in enumerate(zip(grads, ref_grads)):
        if i in row_broadcast:
            lead = list(range(ri.dim() - 1))
            red, scale = (ri.sum(lead), ri.abs().sum(lead)) if lead else (ri, ri.abs())
            check_close(gi, red, dtype, scale=scale, what=f"grad of input {i}")
        else:
            check_close(gi, ri, dtype, what=f"grad of input {i}")


def _outputs(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def check_vs_eager(out: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype,
                   what: str = "output") -> None:
    """max|out - ref| <= EAGER_FACTOR * max|eager - ref| + FLOOR[dtype] * max(1, max|ref|) (NaNs must agree)."""
    o, e, r = (t.detach().to("cpu", torch.float64) for t in (out, eager, ref))
    assert o.shape == r.shape, f"{what}: shape {tuple(o.shape)} != reference {tuple(r.shape)}"
    if o.numel() == 0:
        return
    assert torch.equal(torch.isnan(o), torch.isnan(r)), f"{what}: NaN where the reference has none (or v.v.)"
    finite = torch.isfinite(r)
    assert torch.equal(o[~finite].nan_to_num(0.0), r[~finite].nan_to_num(0.0)), (
        f"{what}: infinities differ from the reference")
    ours = (o - r)[finite].abs().max().item() if finite.any() else 0.0
    theirs = (e - r)[finite].abs().nan_to_num(float("inf")).max().item() if finite.any() else 0.0
    floor = FLOOR[dtype] * max(1.0, r[finite].abs().max().item() if finite.any() else 1.0)
    assert ours <= EAGER_FACTOR * theirs + floor, (
        f"{what}: max error {ours:.3g} > {EAGER_FACTOR} x eager's {theirs:.3g} + floor {floor:.3g} (dtype {dtype})")


def check_against_eager(fn: Callable, eager_fn: Callable, ref_fn: Callable | None, inputs: Sequence[torch.Tensor],
                        grad: bool = True, grad_inputs: Sequence[int] | None = None) -> None:
    """fn(*inputs) (one tensor or a tuple) and its gradients are at most EAGER_FACTOR times as far from the
    float64 reference as eager_fn(*inputs) in the same dtype (plus FLOOR). ref_fn defaults to eager_fn (run on
    float64 CPU copies). grad_inputs: the inputs to differentiate (default: every floating-point one)."""
    ref_fn = ref_fn or eager_fn
    if any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in inputs):
        return  # eager is the reference itself (see FLOOR)
    floating = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    diff = list(floating if grad_inputs is None else grad_inputs) if grad else []
    device = next(t for t in inputs if isinstance(t, torch.Tensor)).device.type

    def prepared(cast):
        return [cast(t).requires_grad_(i in diff) if isinstance(t, torch.Tensor) else t
                for i, t in enumerate(inputs)]

    xs = prepared(lambda t: t.detach())
    es = prepared(lambda t: t.detach().clone())
    rs = prepared(lambda t: t.detach().to("cpu", torch.float64) if t.is_floating_point() else t.detach().cpu())
    poison_allocator(device)
    outs, eags, refs = _outputs(fn(*xs)), _outputs(eager_fn(*es)), _outputs(ref_fn(*rs))
    assert len(outs) == len(refs), f"{len(outs)} outputs, reference has {len(refs)}"
    for k, (o, e, r) in enumerate(zip(outs, eags, refs)):
        check_vs_eager(o, e, r, o.dtype, what=f"output {k}")
    if not diff:
        return
    pairs = [(o, e, r) for o, e, r in zip(outs, eags, refs) if o.requires_grad and o.numel() > 0]
    if not pairs:
        return
    gs = [torch.randn(r.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7 + k))
          for k, (_, _, r) in enumerate(pairs)]
    poison_allocator(device)
    targets = [xs[i] for i in diff]
    got = torch.autograd.grad([o for o, _, _ in pairs], targets, [g.to(o.dtype).to(o.device) for g, (o, _, _) in
                                                                   zip(gs, pairs)], allow_unused=True)
    eag = torch.autograd.grad([e for _, e, _ in pairs], [es[i] for i in diff],
                              [g.to(e.dtype).to(e.device) for g, (_, e, _) in zip(gs, pairs)], allow_unused=True)
    ref = torch.autograd.grad([r for _, _, r in pairs], [rs[i] for i in diff], gs, allow_unused=True)
    for i, a, b, c in zip(diff, got, eag, ref):
        if c is None:
            assert a is None or not a.abs().any(), f"grad of input {i}: reference has none"
            continue
        assert a is not None, f"grad of input {i}: missing"
        check_vs_eager(a, b, c, a.dtype, what=f"grad of input {i}")


# Ops with a per-feature bias, on shapes past what hypothesis draws: the CUDA backward sums the bias gradient per
# block of rows (csrc/cuda/elementwise.cuh, ew_sum_kernel): narrow rows (many rows per block), a few rows in flight
# per thread and a tail, odd widths (the scalar path), one long row, no rows.
BIAS_SHAPES = [(4099, 8), (1000, 4096), (3, 5, 1001), (1, 70000), (2, 1, 3), (129, 0)]
bias_cases = pytest.mark.parametrize("shape,dtype,layout", [
    (s, d, lay) for s in BIAS_SHAPES for d, lay in [(torch.bfloat16, "contiguous"), (torch.float32, "transposed"),
                                                     (torch.float16, "row_strided"), (torch.float64, "contiguous")]])


def check_bias_op(fn: Callable, ref_fn: Callable, device: str, shape, dtype: torch.dtype, layout: str) -> None:
    """fn(x, bias) and its gradients (bias's summed over rows) against ref_fn in float64."""
    x = make_tensor(shape, dtype, device, layout, seed=3)
    bias = make_tensor(shape[-1:], dtype, device, seed=4)
    check_against_reference(fn, ref_fn, [x, bias], row_broadcast=[1])
