import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, bias_cases, check_against_reference, check_bias_op, check_compile,
                    check_func, check_gradcheck, check_opcheck, check_output_layout, make_tensor, raises, shapes)

OP = torch.ops.myops.scale_bias_relu.default


def ref(x, bias, scale):
    return torch.relu(x * scale + bias)


@pytest.mark.parametrize("device", DEVICES)
@given(shape=shapes(min_dims=1), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       bias_layout=st.sampled_from(["contiguous", "col_strided"]),
       scale=st.sampled_from([1.0, -0.5, 2.0, 0.0, 1e-3]), seed=st.integers(0, 2**31))
def test_matches_reference(device, shape, dtype, layout, bias_layout, scale, seed):
    x = make_tensor(shape, dtype, device, layout, seed)
    bias = make_tensor(shape[-1:], dtype, device, bias_layout, seed + 1)
    check_against_reference(lambda a, b: ops.scale_bias_relu(a, b, scale), lambda a, b: ref(a, b, scale),
                            [x, bias], row_broadcast=[1])


@pytest.mark.parametrize("device", DEVICES)
@bias_cases
def test_bias_grad_shapes(device, shape, dtype, layout):
    check_bias_op(lambda a, b: ops.scale_bias_relu(a, b, 0.75), lambda a, b: ref(a, b, 0.75), device, shape, dtype,
                  layout)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((5, 6), torch.float64, device, "transposed").requires_grad_()
    bias = make_tensor((6,), torch.float64, device, seed=1).requires_grad_()
    check_gradcheck(lambda a, b: ops.scale_bias_relu(a, b, 0.7), [x, bias])


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x, bias = make_tensor((5, 6), torch.float64, device, "transposed"), make_tensor((6,), torch.float64, device, seed=1)
    check_func(lambda a, b: ops.scale_bias_relu(a, b, 0.7), lambda a, b: ref(a, b, 0.7), [x, bias])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, rg in [((5, 3), True), ((0, 4), False), ((2, 3, 4), True), ((7,), True)]:
        x = make_tensor(shape, dtype, device).requires_grad_(rg)
        bias = make_tensor(shape[-1:], dtype, device, seed=1).requires_grad_(rg)
        check_opcheck(OP, (x, bias, 1.5))
    g, out = make_tensor((4, 4), dtype, device), make_tensor((4, 4), dtype, device, seed=1)
    check_opcheck(torch.ops.myops.scale_bias_relu_backward.default, (g, out, 0.5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["transposed", "permuted"])
def test_output_layout(device, layout):
    """The output laid out as x (a transposed or permuted 3-D tensor)."""
    x = make_tensor((3, 5, 7), torch.float32, device, layout).requires_grad_()
    check_output_layout(OP, (x, make_tensor((7,), torch.float32, device, seed=1).requires_grad_(), 1.5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(lambda x, b: ops.scale_bias_relu(x, b, 0.5),
                  [make_tensor((9, 33), torch.float32, device), make_tensor((33,), torch.float32, device, seed=1)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    b = make_tensor((5,), torch.float32, device)
    raises(ops.scale_bias_relu, x.int(), b.int(), 1.0, match="x must be a floating-point tensor")
    raises(ops.scale_bias_relu, x, b.half(), 1.0, match="bias must have the same dtype as x")
    raises(ops.scale_bias_relu, x, b[:4], 1.0, match=r"bias must have shape \[5\]")
    raises(ops.scale_bias_relu, x, x, 1.0, match=r"bias must have shape \[5\]")
    raises(ops.scale_bias_relu, x[0, 0], b[:1], 1.0, match="x must have at least 1 dimension")


@pytest.mark.cuda
def test_device_mismatch():
    x = make_tensor((4, 5), torch.float32, "cuda")
    raises(ops.scale_bias_relu, x, x[0].cpu(), 1.0, match="bias must be on the same device as x")
