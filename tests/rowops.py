"""What the tests of the row-wise ops (norms, softmax, cross_entropy) share: row lengths that exercise every
kernel plan (a warp per row, a CTA per row, a cluster of CTAs per row, streaming), and a property-test driver."""

from __future__ import annotations

import torch

from common import check_against_eager, check_close, make_tensor

# (rows, N): tiny, odd, a warp per row, a CTA per row, long rows split over a cluster, very long rows.
ROW_SHAPES = [(5, 1), (3, 7), (4, 64), (2, 769), (3, 5125), (2, 65536), (2, 65537), (1, 262144)]


def run_case(fn, eager_fn, ref_fn, inputs, grad=True, grad_inputs=None, tol_check=True):
    """Outputs (and gradients) at most 2x eager's error vs float64; the first output also within TOL."""
    check_against_eager(fn, eager_fn, ref_fn, inputs, grad=grad, grad_inputs=grad_inputs)
    if tol_check:
        out = fn(*[t.detach() if isinstance(t, torch.Tensor) else t for t in inputs])
        out = out if isinstance(out, torch.Tensor) else out[0]
        ref = (ref_fn or eager_fn)(*[t.detach().cpu().double() if isinstance(t, torch.Tensor) and
                                     t.is_floating_point() else t for t in inputs])
        ref = ref if isinstance(ref, torch.Tensor) else ref[0]
        check_close(out, ref, out.dtype)


def param(shape, dtype, device, present, seed):
    """A per-feature weight/bias of shape [shape[-1]] (None when not present)."""
    return make_tensor(shape[-1:], dtype, device, seed=seed) if present else None
