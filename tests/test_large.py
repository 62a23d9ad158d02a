"""More than 2^31 elements: every index is 64-bit (a 32-bit index would wrap and write the wrong place)."""

import pytest
import torch

import ops

N = 2**31 + 1029  # past int32, not a multiple of any vector width


@pytest.mark.cuda
@pytest.mark.slow
def test_over_2_to_31_elements():
    free, _ = torch.cuda.mem_get_info()
    if free < 40 * 2**30:
        pytest.skip("needs 40 GiB of free GPU memory")
    x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    y = ops.relu(x)
    tail = slice(N - 4096, N)
    assert torch.equal(y[tail], torch.relu(x[tail]))
    assert torch.equal(y[:4096], torch.relu(x[:4096]))
    del y
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    z = ops.add(x, b)
    assert torch.equal(z[tail], x[tail] + b[tail])
    del z, b
    rows = x[: (N // 1024) * 1024].view(-1, 1024)
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    w = ops.bias_gelu(rows, bias)
    last = rows[-3:]
    torch.testing.assert_close(w[-3:], torch.nn.functional.gelu(last.float() + bias.float(), approximate="tanh")
                               .to(torch.bfloat16), rtol=2**-7, atol=1e-5)
    del w
    s = ops.sum(x.view(1, -1), [1])
    ref = torch.sum(x, dtype=torch.float64).item()
    mag = torch.sum(x.abs(), dtype=torch.float64).item()
    assert abs(s.double().item() - ref) <= 1e-5 * mag + 2**-7 * abs(ref)
