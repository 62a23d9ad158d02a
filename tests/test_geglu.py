"""geglu(gate, up) = F.gelu(gate, approximate="tanh") * up; the shared GLU tests (glu_cases.py) with geglu's reference and ranges.
Wide range: exp(-2y), y = k (x + c x^3), overflows fp32 from gate ~ -10.5 (it is capped), eager's tanh form cancels for gate < 0; the derivative crosses zero at gate ~ -0.75."""

import pytest
import torch
import torch.nn.functional as F

import ops
from glu_cases import *  # noqa: F401,F403  (the tests, collected here)
from glu_cases import Glu


@pytest.fixture(scope="module")
def glu():
    return Glu("geglu", ops.geglu, ops.geglu_backward, torch.ops.myops.geglu.default,
               torch.ops.myops.geglu_backward.default, lambda gate, up: F.gelu(gate, approximate="tanh") * up, (5, 8, 10, 10.5, 11, 20, 30, 50, 88, 100, 200, 1000, 1e4), (-0.9, -0.6))
