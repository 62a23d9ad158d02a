import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, LAYOUTS, check_close, check_compile, check_gradcheck, check_opcheck,
                    make_tensor, raises, shapes)
from rowops import ROW_SHAPES, run_case

OP = torch.ops.myops.softmax.default


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data(), shape=shapes(min_dims=0), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2**31))
def test_matches_reference(device, data, shape, dtype, layout, seed):
    dim = data.draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    x = make_tensor(shape, dtype, device, layout, seed) * 4
    run_case(lambda t: ops.softmax(t, dim), lambda t: torch.softmax(t, dim), None, [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_lengths(device, dtype, shape):
    x = make_tensor(shape, dtype, device, "row_strided", seed=shape[-1]) * 8
    run_case(ops.softmax, lambda t: torch.softmax(t, -1), None, [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(device, dtype):
    """-inf entries (masked attention), an all -inf row (NaN, as eager), NaN propagation, huge magnitudes."""
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[0.0, -inf, 1.0, -inf], [-inf] * 4, [1.0, nan, 2.0, 3.0], [1e4, -1e4, 0.0, 1e4]],
                     dtype=torch.float64)
    out = ops.softmax(x.to(dtype=dtype, device=device))
    check_close(out, torch.softmax(x.to(dtype).double(), -1), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = make_tensor((4, 9), torch.float64, device, "col_strided").requires_grad_()
    check_gradcheck(lambda a: ops.softmax(a, -1), [x])
    check_gradcheck(lambda a: ops.softmax(a, 0), [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    for shape, dim in [((5, 33), -1), ((4, 6, 5), 1), ((0, 4), 0), ((), 0), ((7,), 0)]:
        x = make_tensor(shape, dtype, device).requires_grad_()
        check_opcheck(OP, (x, dim))
        y = OP(x.detach(), dim)
        check_opcheck(torch.ops.myops.softmax_backward.default, (torch.randn_like(y), y, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    check_compile(lambda x: ops.softmax(x, -1), [make_tensor((9, 33), torch.float32, device)])
    check_compile(lambda x: ops.softmax(x, 0), [make_tensor((9, 33), torch.float32, device)])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = make_tensor((4, 5), torch.float32, device)
    raises(ops.softmax, x.int(), match="x must be a floating-point tensor")
    raises(ops.softmax, x, 2, match="dim 2 is out of range")
    raises(ops.softmax, x, -3, match="dim -3 is out of range")
