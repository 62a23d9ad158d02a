"""softmax(x, dim): the shared tests of the softmax ops (softmax_cases.py)."""

import pytest
import torch

import ops
from softmax_cases import *  # noqa: F401,F403  (the tests, collected here)
from softmax_cases import Softmax


@pytest.fixture(scope="module")
def sm():
    return Softmax(ops.softmax, torch.softmax, torch.ops.myops.softmax.default, torch.ops.myops.softmax_backward.default)
