"""swiglu(gate, up) = F.silu(gate) * up; the shared GLU tests (glu_cases.py) with swiglu's reference and ranges.
Wide range: exp(-gate) overflows fp32 past 88, fp64 past 709: no inf / inf or 0 * inf allowed; the derivative crosses zero at gate ~ -1.28."""

import pytest
import torch
import torch.nn.functional as F

import ops
from glu_cases import *  # noqa: F401,F403  (the tests, collected here)
from glu_cases import Glu


@pytest.fixture(scope="module")
def glu():
    return Glu("swiglu", ops.swiglu, ops.swiglu_backward, torch.ops.myops.swiglu.default,
               torch.ops.myops.swiglu_backward.default, lambda gate, up: F.silu(gate) * up, (20, 30, 50, 87, 88, 89, 100, 200, 709, 710, 1000, 1e4), (-1.4, -1.1))
