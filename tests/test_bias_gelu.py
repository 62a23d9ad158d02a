import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, bias_cases, check_against_reference, check_bias_op, check_close,
                    check_compile, check_func, check_gradcheck, check_opcheck, check_output_layout, make_tensor, raises,
                    shapes)

OP = torch.ops.myops.bias_gelu.default


def ref(x, bias):
    return F.gelu(x + bias, approximate="tanh")


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=1), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       bias_layout=st.sampled_from(["contiguous", "col_strided"]), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, layout, bias_layout, seed):
    x = make_tensor(shape, dtype, device, layout, seed)
    bias = make_tensor(shape[-1:], dtype, device, bias_layout, seed + 1)
    check_against_reference(ops.bias_gelu, ref, [x, bias], row_broadcast=[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_range(device, dtype):
    """Large |x| (tanh saturates; the fast CUDA tanh must not overflow into NaN) and tiny |x|."""
    x = torch.cat([torch.linspace(-30, 30, 601), torch.logspace(-8, 1, 50), -torch.logspace(-8, 1, 50)])
    x = x.to(dtype=dtype, device=device).reshape(-1, 1)
    bias = torch.zeros(1, dtype=dtype, device=device)
    check_close(ops.bias_gelu(x, bias), ref(x.double(), bias.double()), dtype)


@pytest.mark.parametrize("device", DEVICES)
@bias_cases
def test_bias_grad_shapes(device, shape, dtype, layout):
    check_bias_op(ops.bias_gelu, ref, device, shape, dtype, layout)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((5, 6), torch.float64, device, "col_strided").requires_grad_()
    bias = make_tensor((6,), torch.float64, device, seed=1).requires_grad_()
    check_gradcheck(ops.bias_gelu, [x, bias])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x = make_tensor((5, 6), torch.float64, device, "col_strided")
    check_func(ops.bias_gelu, ref, [x, make_tensor((6,), torch.float64, device, seed=1)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, rg in [((5, 3), True), ((0, 4), False), ((2, 3, 4), True)]:
        x = make_tensor(shape, dtype, device).requires_grad_(rg)
        bias = make_tensor(shape[-1:], dtype, device, seed=1).requires_grad_(rg)
        check_opcheck(OP, (x, bias))
    g, x, b = make_tensor((4, 4), dtype, device), make_tensor((4, 4), dtype, device, seed=1), make_tensor((4,), dtype, device, seed=2)
    check_opcheck(torch.ops.myops.bias_gelu_backward.default, (g, x, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted"])
def test_output_layout(device, layout):
    """The output laid out as x (a transposed or permuted 3-D tensor)."""
    x = make_tensor((3, 5, 7), torch.float32, device, layout).requires_grad_()
    check_output_layout(OP, (x, make_tensor((7,), torch.float32, device, seed=1).requires_grad_()))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(ops.bias_gelu, [make_tensor((9, 33), torch.float32, device), make_tensor((33,), torch.float32, device, seed=1)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    b = make_tensor((5,), torch.float32, device)
    raises(ops.bias_gelu, x.to(torch.int64), b.to(torch.int64), match="x must be a floating-point tensor")
    raises(ops.bias_gelu, x, b.double(), match="bias must have the same dtype as x")
    raises(ops.bias_gelu, x, b[None], match=r"bias must have shape \[5\]")
    raises(ops.bias_gelu_backward, x, x[:3], b, match="x must have the same shape as grad")


@pytest.mark.cuda
def test_device_mismatch():
    x = make_tensor((4, 5), torch.float32, "cuda")
    raises(ops.bias_gelu, x, x[0].cpu(), match="bias must be on the same device as x")
