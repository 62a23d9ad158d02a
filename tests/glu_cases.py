"""The tests of the gated-linear-unit ops (swiglu, geglu): each op's test file defines the `glu` fixture (a Glu)
and imports these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from common import (DEVICES, DTYPES, LAYOUTS, check_against_eager, check_against_reference, check_close, check_compile,
                    check_func, check_gradcheck, check_opcheck, check_output_layout, layout_operands, make_tensor,
                    raises, shapes)


@dataclass(frozen=True)
class Glu:
    name: str
    fn: Callable            # ops.<name>
    backward: Callable      # ops.<name>_backward
    op: object              # torch.ops.myops.<name>.default
    backward_op: object
    ref: Callable           # the PyTorch expression
    big: tuple[float, ...]  # |gate| values around where the op's exp overflows
    crossing: tuple[float, float]  # an interval where the derivative crosses zero


def ref_backward(glu, grad, gate, up):
    """(dgate, dup) of ref by autograd in float64."""
    g, u = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (gate, up))
    return torch.autograd.grad(glu.ref(g, u), [g, u], grad.detach().to("cpu", torch.float64))


def check_accuracy(glu, gate, up):
    """Outputs and gradients: within TOL of float64, and at most 2x eager's error in the same dtype. For float64
    the eager expression is the reference itself (the 2x rule would ask for bitwise agreement with a different
    formula): TOL[float64] alone covers it."""
    check_against_reference(glu.fn, glu.ref, [gate, up])
    if gate.dtype != torch.float64:
        check_against_eager(glu.fn, glu.ref, None, [gate, up])


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), gate_layout=st.sampled_from(LAYOUTS),
       up_layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_matches_reference(glu, device, shape, dtype, gate_layout, up_layout, seed):
    gate = make_tensor(shape, dtype, device, gate_layout, seed)
    up = make_tensor(shape, dtype, device, up_layout, seed + 1)
    check_accuracy(glu, gate, up)


def wide_range_gate(glu, dtype, device):
    """glu.big (where exp overflows), the region where the derivative crosses zero, tiny |gate|. A column, so that
    every row is one value."""
    f64 = dict(dtype=torch.float64)
    big = torch.tensor(glu.big, **f64)
    x = torch.cat([torch.linspace(-30, 30, 601, **f64), torch.linspace(*glu.crossing, 31, **f64),
                   torch.logspace(-8, 1, 50, **f64), -torch.logspace(-8, 1, 50, **f64), big, -big,
                   torch.zeros(1, **f64)])
    return x.to(dtype=dtype, device=device).reshape(-1, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_range(glu, device, dtype):
    gate = wide_range_gate(glu, dtype, device)
    for up in (torch.ones_like(gate), make_tensor(gate.shape, dtype, device, seed=3)):
        out = glu.fn(gate, up)
        assert torch.isfinite(out).all()
        check_close(out, glu.ref(gate.double(), up.double()), dtype)
        grad = make_tensor(gate.shape, dtype, device, seed=4)
        dgate, dup = glu.backward(grad, gate, up)
        assert torch.isfinite(dgate).all() and torch.isfinite(dup).all()
        rgate, rup = ref_backward(glu, grad, gate, up)
        check_close(dgate, rgate, dtype, what="dgate")
        check_close(dup, rup, dtype, what="dup")
        check_accuracy(glu, gate, up)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_propagates(glu, device, dtype):
    gate = torch.tensor([float("nan"), 1.0, 0.0], dtype=dtype, device=device)
    up = torch.tensor([1.0, float("nan"), float("nan")], dtype=dtype, device=device)
    assert torch.isnan(glu.fn(gate, up)).all()
    dgate, dup = glu.backward(torch.ones_like(gate), gate, up)
    assert torch.isnan(dgate).all() and torch.isnan(dup[:1]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_split_halves(glu, device, dtype):
    """gate and up as the two halves of one [..., 2H] tensor (strided rows): results and gradients, also when the
    halves are views of one leaf (its gradient is assembled from both)."""
    H = 37
    h = make_tensor((3, 5, 2 * H), dtype, device, seed=5)
    gate, up = h[..., :H], h[..., H:]
    assert not gate.is_contiguous() and not up.is_contiguous()
    check_accuracy(glu, gate, up)
    leaf = h.detach().clone().requires_grad_()
    out = glu.fn(*leaf.chunk(2, dim=-1))
    grad = make_tensor(out.shape, dtype, device, seed=6)
    out.backward(grad)
    leaf64 = h.detach().to("cpu", torch.float64).requires_grad_()
    glu.ref(*leaf64.chunk(2, dim=-1)).backward(grad.to("cpu", torch.float64))
    check_close(leaf.grad, leaf64.grad, dtype, what="grad of h")


def _profiled_ops(fn, *args) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    return {e.name for e in prof.events()}


@pytest.mark.parametrize("device", DEVICES)
def test_split_halves_no_copy(glu, device):
    """The halves collapse to [rows, H] with row stride 2H: the kernel reads them in place. The profiler sees every
    aten op the registration layer calls, so a copy to contiguous memory would show up as aten::clone / copy_."""
    copies = {"aten::contiguous", "aten::clone", "aten::copy_"}
    H = 64
    h = make_tensor((4, 6, 2 * H), torch.float32, device)
    names = _profiled_ops(glu.fn, h[..., :H], h[..., H:])
    assert f"myops::{glu.name}" in names and not names & copies, sorted(names)
    names = _profiled_ops(glu.backward, h[..., :H], h[..., :H], h[..., H:])
    assert f"myops::{glu.name}_backward" in names and not names & copies, sorted(names)
    # the check can fail: a permuted 3-D view does not collapse to 2-D and is copied first
    p = make_tensor((4, 6, 8), torch.float32, device, "permuted")
    assert _profiled_ops(glu.fn, p, make_tensor((4, 6, 8), torch.float32, device)) & copies


@pytest.mark.parametrize("device", DEVICES)
def test_backward_op(glu, device):
    grad, gate, up = (make_tensor((5, 9), torch.float32, device, seed=s) for s in range(3))
    dgate, dup = glu.backward(grad, gate, up)
    rgate, rup = ref_backward(glu, grad, gate, up)
    check_close(dgate, rgate, torch.float32, what="dgate")
    check_close(dup, rup, torch.float32, what="dup")
    # one input requiring grad: the other gets none
    g = gate.detach().requires_grad_()
    (dg,) = torch.autograd.grad(glu.fn(g, up), [g], grad)
    check_close(dg, rgate, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(glu, device):
    gate = make_tensor((5, 6), torch.float64, device, "col_strided").requires_grad_()
    up = make_tensor((5, 6), torch.float64, device, "transposed", seed=1).requires_grad_()
    check_gradcheck(glu.fn, [gate, up])
    h = make_tensor((4, 12), torch.float64, device, seed=2).requires_grad_()
    check_gradcheck(lambda t: glu.fn(t[:, :6], t[:, 6:]), [h])


@pytest.mark.parametrize("device", DEVICES)
def test_func(glu, device):
    gate = make_tensor((5, 6), torch.float64, device, "col_strided")
    # (the backward op's formula: csrc/ops/glu.h)
    check_func(glu.fn, glu.ref, [gate, make_tensor((5, 6), torch.float64, device, "transposed", seed=1)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(glu, device, dtype):
    for shape, rg in [((5, 3), True), ((0, 4), False), ((2, 3, 4), True), ((7,), True), ((), True)]:
        gate = make_tensor(shape, dtype, device).requires_grad_(rg)
        up = make_tensor(shape, dtype, device, seed=1).requires_grad_(rg)
        check_opcheck(glu.op, (gate, up))
    h = make_tensor((6, 10), dtype, device, seed=2)
    check_opcheck(glu.op, (h[:, :5], h[:, 5:]))
    grad, gate, up = (make_tensor((4, 4), dtype, device, seed=s) for s in range(3))
    check_opcheck(glu.backward_op, (grad, gate, up))
    check_opcheck(glu.backward_op, (grad, h[:4, :4], h[:4, 5:9]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted", "transposed,contiguous", "permuted,transposed"])
def test_output_layout(glu, device, layout):
    """Outputs laid out as gate (a transposed or permuted 3-D tensor; up of its layout or another), forward and
    backward."""
    gate, up = layout_operands(device, layout, 2)
    check_output_layout(glu.op, (gate, up))
    grad = make_tensor((3, 5, 7), torch.float32, device, seed=2)
    check_output_layout(glu.backward_op, (grad, gate.detach(), up.detach()), like=1)


@pytest.mark.parametrize("device", DEVICES)
def test_compile(glu, device):
    check_compile(glu.fn, [make_tensor((9, 33), torch.float32, device),
                               make_tensor((9, 33), torch.float32, device, seed=1)])
    check_compile(lambda h: glu.fn(*h.chunk(2, dim=-1)), [make_tensor((9, 66), torch.float32, device)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(glu, device):
    gate = make_tensor((4, 5), torch.float32, device)
    up = make_tensor((4, 5), torch.float32, device, seed=1)
    raises(glu.fn, gate.to(torch.int64), up.to(torch.int64), match="gate must be a floating-point tensor")
    raises(glu.fn, gate, up.to(torch.int32), match="up must have the same dtype as gate")
    raises(glu.fn, gate, up.double(), match="up must have the same dtype as gate")
    raises(glu.fn, gate, up[:3], match=r"up must have the same shape as gate \[4, 5\], got \[3, 5\]")
    raises(glu.fn, gate, up[..., None], match=r"up must have the same shape as gate")
    raises(glu.backward, up[:3], gate, up, match=r"grad must have the same shape as gate \[4, 5\]")
    raises(glu.backward, up.double(), gate, up, match="grad must have the same dtype as gate")
    raises(glu.backward, up, gate, up[:2], match="up must have the same shape as gate")
    raises(glu.backward, up, gate.half(), up.half()[:, :2], match=f"myops.{glu.name}_backward: up must have")


@pytest.mark.cuda
def test_device_mismatch(glu):
    gate = make_tensor((4, 5), torch.float32, "cuda")
    up = make_tensor((4, 5), torch.float32, "cuda", seed=1)
    raises(glu.fn, gate, up.cpu(), match="up must be on the same device as gate")
    raises(glu.fn, gate.cpu(), up, match="up must be on the same device as gate")
    raises(glu.backward, up.cpu(), gate, up, match="grad must be on the same device as gate")
