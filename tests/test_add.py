import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_against_reference, check_compile, check_func, check_gradcheck,
                    check_opcheck, check_output_layout, layout_operands, make_tensor, raises, shapes)

OP = torch.ops.myops.add.default


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), la=st.sampled_from(LAYOUTS),
       lb=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, la, lb, seed):
    a = make_tensor(shape, dtype, device, la, seed)
    b = make_tensor(shape, dtype, device, lb, seed + 1)
    check_against_reference(ops.add, torch.add, [a, b])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    a = make_tensor((4, 7), torch.float64, device, "transposed").requires_grad_()
    b = make_tensor((4, 7), torch.float64, device, seed=1).requires_grad_()
    check_gradcheck(ops.add, [a, b])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    a, b = make_tensor((4, 7), torch.float64, device, "transposed"), make_tensor((4, 7), torch.float64, device, seed=1)
    check_func(ops.add, torch.add, [a, b])  # (its backward passes the gradient on)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, rg in [((5, 3), True), ((0, 4), False), ((), True)]:
        a = make_tensor(shape, dtype, device).requires_grad_(rg)
        b = make_tensor(shape, dtype, device, seed=1).requires_grad_(rg)
        check_opcheck(OP, (a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted", "transposed,contiguous", "permuted,transposed"])
def test_output_layout(device, layout):
    """Outputs laid out as a (a transposed or permuted 3-D tensor; b of its layout or another), forward."""
    check_output_layout(OP, layout_operands(device, layout, 2))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(ops.add, [make_tensor((9, 33), torch.float32, device), make_tensor((9, 33), torch.float32, device, seed=1)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    a = make_tensor((4, 5), torch.float32, device)
    raises(ops.add, a.to(torch.int32), a.to(torch.int32), match="a must be a floating-point tensor")
    raises(ops.add, a, a.double(), match="b must have the same dtype as a")
    raises(ops.add, a, a[:, :4], match=r"b must have the same shape as a")
    raises(ops.add, a, a[None], match=r"b must have the same shape as a")


@pytest.mark.cuda
def test_device_mismatch():
    a = make_tensor((4, 5), torch.float32, "cuda")
    raises(ops.add, a, a.cpu(), match="b must be on the same device as a")
    raises(ops.add, a.cpu(), a, match="b must be on the same device as a")
