import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_against_reference, check_close, check_compile, check_func,
                    check_gradcheck, check_opcheck, check_output_layout, layout_operands, make_tensor, raises, shapes)

OP = torch.ops.myops.mul.default


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), la=st.sampled_from(LAYOUTS),
       lb=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, la, lb, seed):
    a = make_tensor(shape, dtype, device, la, seed)
    b = make_tensor(shape, dtype, device, lb, seed + 1)
    check_against_reference(ops.mul, torch.mul, [a, b])
    # mul_backward(g, a, b) = (g * b, g * a) in one pass (the autograd above takes it: both operands need a gradient)
    g = make_tensor(shape, dtype, device, lb, seed + 2)
    da, db = ops.mul_backward(g, a, b)
    g64, a64, b64 = (t.cpu().double() for t in (g, a, b))
    check_close(da, g64 * b64, dtype, what="da")
    check_close(db, g64 * a64, dtype, what="db")


@pytest.mark.parametrize("device", DEVICES)
def test_one_sided_grad(device):
    """Only one operand requires grad: its gradient alone (mul, not mul_backward), as eager's."""
    a = make_tensor((7, 5), torch.float32, device, seed=3)
    b = make_tensor((7, 5), torch.float32, device, seed=4)
    g = make_tensor((7, 5), torch.float32, device, seed=5)
    for first in (True, False):
        x, y = a.detach().requires_grad_(first), b.detach().requires_grad_(not first)
        (gx,) = torch.autograd.grad(ops.mul(x, y), [x if first else y], g)
        torch.testing.assert_close(gx, g * (y if first else x).detach())


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    a = make_tensor((3, 6), torch.float64, device, "row_strided").requires_grad_()
    b = make_tensor((3, 6), torch.float64, device, seed=1).requires_grad_()
    check_gradcheck(ops.mul, [a, b])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    a, b = make_tensor((3, 6), torch.float64, device, "row_strided"), make_tensor((3, 6), torch.float64, device, seed=1)
    check_func(ops.mul, torch.mul, [a, b])  # (d(g b)/da = 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_opcheck(device, dtype):
    for shape, rg in [((5, 3), True), ((0, 4), False), ((2, 3, 4), True)]:
        a = make_tensor(shape, dtype, device).requires_grad_(rg)
        b = make_tensor(shape, dtype, device, seed=1).requires_grad_(rg)
        check_opcheck(OP, (a, b))
        check_opcheck(torch.ops.myops.mul_backward.default, (make_tensor(shape, dtype, device, seed=2), a.detach(),
                                                             b.detach()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted", "transposed,contiguous", "permuted,transposed"])
def test_output_layout(device, layout):
    """Outputs laid out as a (a transposed or permuted 3-D tensor; b of its layout or another), forward and backward."""
    a, b = layout_operands(device, layout, 2)
    check_output_layout(OP, (a, b))
    grad = make_tensor((3, 5, 7), torch.float32, device, layout, seed=2)
    check_output_layout(torch.ops.myops.mul_backward.default, (grad, a.detach(), b.detach()), like=1)


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(ops.mul, [make_tensor((9, 33), torch.float32, device), make_tensor((9, 33), torch.float32, device, seed=1)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    a = make_tensor((4, 5), torch.float32, device)
    raises(ops.mul, a.long(), a.long(), match="a must be a floating-point tensor")
    raises(ops.mul, a.half(), a, match="b must have the same dtype as a")
    raises(ops.mul, a, a.t(), match="b must have the same shape as a")
    raises(ops.mul_backward, a[:3], a, a, match="grad must have the same shape as a")
    raises(ops.mul_backward, a.half(), a, a, match="grad must have the same dtype as a")


@pytest.mark.cuda
def test_device_mismatch():
    a = make_tensor((4, 5), torch.float32, "cuda")
    raises(ops.mul, a, a.cpu(), match="b must be on the same device as a")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16bit_value(device, dtype):
    """Every bit pattern of the 16-bit type times a few factors, bit for bit against eager (NaN against NaN): the
    conversions to and from fp32 (on the CPU, unit strides in hardware where the CPU has F16C, strided operands
    through the portable loops), their rounding to nearest even, subnormals, overflow to inf and NaN."""
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).to(device).reshape(256, 256)
    for f in (1.0, 0.5, 3.0, 2.0**-10, 1.0 + 2.0**-9):
        y = torch.full_like(x, f)
        for a, b in ((x, y), (x.t(), y.t())):  # (unit stride; a transposed view)
            got, want = ops.mul(a, b), a * b
            nan = torch.isnan(want)
            assert torch.equal(torch.isnan(got), nan), f"factor {f}: NaN where eager has none (or v.v.)"
            assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), f"factor {f}"
