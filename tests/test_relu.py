import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_against_reference, check_close, check_compile, check_func,
                    check_gradcheck, check_opcheck, check_output_layout, make_tensor, raises, shapes)

OP = torch.ops.myops.relu.default


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, layout, seed):
    x = make_tensor(shape, dtype, device, layout, seed)
    check_against_reference(ops.relu, torch.relu, [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(device, dtype):
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30], dtype=dtype,
                     device=device)
    check_close(ops.relu(x), torch.relu(x.double()), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_op(device):
    g, out = make_tensor((5, 9), torch.float32, device), ops.relu(make_tensor((5, 9), torch.float32, device, seed=1))
    torch.testing.assert_close(ops.relu_backward(g, out), torch.where(out > 0, g, torch.zeros_like(g)))
    raises(ops.relu_backward, g, out[:4], match="out must have the same shape as grad")


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((4, 7), torch.float64, device, "permuted").requires_grad_()
    check_gradcheck(ops.relu, [x])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    check_func(ops.relu, torch.relu, [make_tensor((4, 7), torch.float64, device, "permuted")])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, rg in [((5, 3), True), ((0,), False), ((2, 3, 4), True)]:
        check_opcheck(OP, (make_tensor(shape, dtype, device).requires_grad_(rg),))
    out = ops.relu(make_tensor((4, 4), dtype, device))
    check_opcheck(torch.ops.myops.relu_backward.default, (make_tensor((4, 4), dtype, device, seed=2), out))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted"])
def test_output_layout(device, layout):
    """Outputs laid out as x (a transposed or permuted 3-D tensor); the backward's as out."""
    x = make_tensor((3, 5, 7), torch.float32, device, layout).requires_grad_()
    check_output_layout(OP, (x,))
    grad = make_tensor((3, 5, 7), torch.float32, device, seed=2)
    check_output_layout(torch.ops.myops.relu_backward.default, (grad, ops.relu(x.detach())), like=1)


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(ops.relu, [make_tensor((9, 33), torch.float32, device)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    raises(ops.relu, torch.arange(6, device=device), match="x must be a floating-point tensor")
    raises(ops.relu, torch.ones(3, dtype=torch.bool, device=device), match="x must be a floating-point tensor")
