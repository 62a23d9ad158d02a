"""Shared pytest setup: builds/loads myops once, the `cuda` marker, hypothesis profiles.

Hypothesis profiles: `ci` (default on machines without a GPU: few examples, keeps the CPU suite to minutes) and
`thorough` (default where CUDA is available: many examples). Pick one with MYOPS_HYPOTHESIS_PROFILE.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

import ops  # noqa: F401  (builds and registers the ops before any test runs)

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
               derandomize=False, print_blob=True)
settings.register_profile("ci", max_examples=12, **_common)
settings.register_profile("thorough", max_examples=150, **_common)
settings.load_profile(os.environ.get("MYOPS_HYPOTHESIS_PROFILE",
                                     "thorough" if torch.cuda.is_available() else "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
