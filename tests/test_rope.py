import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ops
from common import (DEVICES, DTYPES, check_against_eager, check_against_reference, check_compile, check_func,
                    check_gradcheck, check_opcheck, make_tensor, raises)
from ops.rope import rotate

OP = torch.ops.myops.rope.default
BACKWARD = torch.ops.myops.rope_backward.default

D_SIZES = [2, 4, 6, 8, 64, 66, 128]
# Memory layouts of x (see place()): contiguous; qkv (a slice of a fused projection, qkv.view(..., S, 3, H, D)[..., 1,
# :, :] style: the outer of S/H strided by 3, a storage offset); transposed (S and H swapped in memory, e.g. HF's view(B, S, H, D).transpose
# for heads_first); padded (rows of D + 2: unaligned row strides); offset (storage offset 1: unaligned base);
# col_strided (last dim stride 2: copied by the op); batch_transposed (two batch dims swapped: copied by the op);
# batch_inner (batch dim between S/H in memory: an unusual but collapsible stride).
X_LAYOUTS = ["contiguous", "qkv", "transposed", "padded", "offset", "col_strided", "batch_transposed", "batch_inner"]
# cos/sin layouts: contiguous; padded rows; col_strided (D stride 2, read in place); offset; expanded (stride 0 over
# every leading dim).
TABLE_LAYOUTS = ["contiguous", "padded", "col_strided", "offset", "expanded"]


def reference(x, cos, sin, heads_first, interleaved):
    """The rotation written out pair by pair (independent of rotate_half): for each pair (d1, d2) with
    (a, b) = (x[d1], x[d2]), out[d1] = a cos[d1] - b sin[d1] and out[d2] = b cos[d2] + a sin[d2]."""
    c, s = cos.unsqueeze(-3 if heads_first else -2), sin.unsqueeze(-3 if heads_first else -2)
    if interleaved:
        a, b, c1, c2, s1, s2 = x[..., 0::2], x[..., 1::2], c[..., 0::2], c[..., 1::2], s[..., 0::2], s[..., 1::2]
        return torch.stack((a * c1 - b * s1, b * c2 + a * s2), dim=-1).flatten(-2)
    h = x.shape[-1] // 2
    a, b, c1, c2, s1, s2 = x[..., :h], x[..., h:], c[..., :h], c[..., h:], s[..., :h], s[..., h:]
    return torch.cat((a * c1 - b * s1, b * c2 + a * s2), dim=-1)


def eager(x, cos, sin, heads_first=False, interleaved=False):
    """The Hugging Face expression, cos/sin unsqueezed over the heads dim."""
    unsq = -3 if heads_first else -2
    return x * cos.unsqueeze(unsq) + rotate(x, interleaved) * sin.unsqueeze(unsq)


def place(t: torch.Tensor, layout: str, nb: int = 0) -> torch.Tensor:
    """A tensor equal to t (at least 2-D; nb batch dims) whose memory layout is `layout` (X_LAYOUTS, TABLE_LAYOUTS)."""
    shape = tuple(t.shape)
    if layout == "qkv" and t.dim() >= 3:
        base = torch.zeros(shape[:-2] + (3,) + shape[-2:], dtype=t.dtype, device=t.device)
        base[..., 1, :, :] = t
        return base[..., 1, :, :]
    if layout == "transposed" and t.dim() >= 3:
        return t.transpose(-3, -2).contiguous().transpose(-3, -2)
    if layout == "padded":
        base = torch.zeros(shape[:-1] + (shape[-1] + 2,), dtype=t.dtype, device=t.device)
        base[..., : shape[-1]] = t
        return base[..., : shape[-1]]
    if layout == "offset":
        flat = torch.zeros(t.numel() + 1, dtype=t.dtype, device=t.device)
        flat[1:] = t.flatten()
        return flat[1:].view(shape)
    if layout == "col_strided":
        base = torch.zeros(shape[:-1] + (2 * shape[-1],), dtype=t.dtype, device=t.device)
        base[..., ::2] = t
        return base[..., ::2]
    if layout == "batch_transposed" and nb >= 2:
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "batch_inner" and nb >= 1:
        return t.movedim(0, nb).contiguous().movedim(nb, 0)
    if layout == "expanded" and t.dim() > 2 and t.numel() > 0:  # (an empty leading dim has no slice to expand)
        return t[(0,) * (t.dim() - 2)].expand(shape)
    return t.contiguous()


@st.composite
def problems(draw, max_numel: int = 1 << 15):
    """A rope problem, made into tensors by make_problem(): 0-2 batch dims, odd and size-1 sizes, sometimes an empty
    dim, every D of D_SIZES, heads_first and interleaved, x and cos/sin in the layouts above, cos/sin of shape [S, D],
    [1, S, D], [B, S, D] (or with some batch dims 1, or fewer leading dims than x has batch dims)."""
    nb = draw(st.integers(0, 2))
    batch = [draw(st.integers(1, 3)) for _ in range(nb)]
    S = draw(st.one_of(st.sampled_from([1, 2, 7, 17]), st.integers(1, 40)))
    H = draw(st.one_of(st.sampled_from([1, 2, 3, 8]), st.integers(1, 12)))
    D = draw(st.sampled_from(D_SIZES))
    while math.prod(batch) * S * H * D > max_numel:
        S, H = (max(1, S // 2), H) if S >= H else (S, max(1, H // 2))
    if draw(st.integers(0, 15)) == 0:  # an empty dim
        which = draw(st.integers(0, nb + 1))
        if which < nb:
            batch[which] = 0
        elif which == nb:
            S = 0
        else:
            H = 0
    heads_first = draw(st.booleans())
    lead_n = draw(st.integers(0, nb))
    lead = [draw(st.sampled_from([1, n])) for n in batch[nb - lead_n:]]
    return dict(batch=batch, S=S, H=H, D=D, heads_first=heads_first, interleaved=draw(st.booleans()), lead=lead,
                x_layout=draw(st.sampled_from(X_LAYOUTS)), cos_layout=draw(st.sampled_from(TABLE_LAYOUTS)),
                sin_layout=draw(st.sampled_from(TABLE_LAYOUTS)), seed=draw(st.integers(0, 2**31)))


def make_problem(p: dict, dtype: torch.dtype, device: str):
    """x, cos, sin for a problems() draw: x ~ randn, cos/sin of random angles (values in [-1, 1], as in a model)."""
    g = torch.Generator().manual_seed(p["seed"])
    S, H, D, nb = p["S"], p["H"], p["D"], len(p["batch"])
    x_shape = tuple(p["batch"]) + ((H, S) if p["heads_first"] else (S, H)) + (D,)
    x = torch.randn(x_shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
    theta = torch.rand(tuple(p["lead"]) + (S, D), generator=g, dtype=torch.float64) * (2 * math.pi)
    cos = place(theta.cos().to(dtype=dtype, device=device), p["cos_layout"])
    sin = place(theta.sin().to(dtype=dtype, device=device), p["sin_layout"])
    return place(x, p["x_layout"], nb), cos, sin


@pytest.mark.parametrize("device", DEVICES)
@given(p=problems(), dtype=st.sampled_from(DTYPES))
def test_matches_reference(device, p, dtype):
    x, cos, sin = make_problem(p, dtype, device)
    hf, il = p["heads_first"], p["interleaved"]
    cos64, sin64 = cos.detach().to("cpu", torch.float64), sin.detach().to("cpu", torch.float64)
    # The reference's gradient is taken for an unrounded float64 output gradient; dx is a sum of two products, so
    # for half types the rounding of that gradient alone exceeds TOL (relative to |dx|) where the two cancel. Half
    # types' gradients are compared with eager's instead (test_matches_eager), which sees the same rounding.
    check_against_reference(lambda t: ops.rope(t, cos, sin, hf, il), lambda t: reference(t, cos64, sin64, hf, il),
                            [x], grad=dtype in (torch.float32, torch.float64))


@pytest.mark.parametrize("device", DEVICES)
@given(p=problems(), dtype=st.sampled_from(DTYPES))
def test_matches_eager(device, p, dtype):
    """Output and gradients of x, cos and sin at most 2x as far from the float64 reference as eager's."""
    x, cos, sin = make_problem(p, dtype, device)
    hf, il = p["heads_first"], p["interleaved"]
    check_against_eager(lambda a, c, s: ops.rope(a, c, s, hf, il), lambda a, c, s: eager(a, c, s, hf, il), None,
                        [x, cos, sin])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_path_shapes(device, dtype):
    """The benchmark's layouts at a small size: D = 128 (the CUDA kernel's 16-byte path), [S, H, D] with cos
    [S, D], heads_first [B, H, S, D] with cos [B, S, D], and q of a fused qkv projection."""
    g = torch.Generator().manual_seed(1)
    S, H, D, B = 33, 6, 128, 2
    theta = torch.rand(B, S, D, generator=g, dtype=torch.float64) * 6.3
    cos, sin = theta.cos().to(dtype=dtype, device=device), theta.sin().to(dtype=dtype, device=device)
    qkv = torch.randn(B, S, 3 * H * D, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
    cases = [
        (torch.randn(S, H, D, generator=g, dtype=torch.float64).to(dtype=dtype, device=device), cos[0], sin[0], False),
        (torch.randn(B, H, S, D, generator=g, dtype=torch.float64).to(dtype=dtype, device=device), cos, sin, True),
        (qkv.view(B, S, 3, H, D)[:, :, 0], cos, sin, False),
        (qkv.view(B, S, 3, H, D)[:, :, 1].transpose(1, 2), cos[:1], sin[:1], True),
    ]
    for x, c, s, hf in cases:
        for il in (False, True):
            check_against_eager(lambda a, cc, ss: ops.rope(a, cc, ss, hf, il),
                                lambda a, cc, ss: eager(a, cc, ss, hf, il), None, [x, c, s], grad_inputs=[0])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape,heads_first", [((2, 1024, 40, 128), False), ((3, 12, 700, 64), True),
                                               ((1, 70, 33, 128), True), ((3, 5, 8192), False),
                                               ((2, 3, 4, 12288), True), ((5000, 3, 66), False)])
def test_cuda_grids(dtype, shape, heads_first):
    """Sizes for both CUDA kernels (the flat kernel by default, the register kernel in test_kernel_variants): many
    heads (the register kernel's teams split a position's heads, G between 1 and H, a partial last round), long rows
    (D = 8192, 12288: a thread's vector loop), heads first with an odd head count, and a scalar-path D with many
    positions (the register kernel under both)."""
    g = torch.Generator().manual_seed(2)
    S, D = shape[-2] if heads_first else shape[-3], shape[-1]
    x = torch.randn(shape, generator=g).to(dtype=dtype, device="cuda")
    theta = torch.rand(S, D, generator=g, dtype=torch.float64) * 6.3
    cos, sin = theta.cos().to(dtype=dtype, device="cuda"), theta.sin().to(dtype=dtype, device="cuda")
    for il in (False, True):
        check_against_eager(lambda a, c, s: ops.rope(a, c, s, heads_first, il),
                            lambda a, c, s: eager(a, c, s, heads_first, il), None, [x, cos, sin], grad_inputs=[0])


@pytest.mark.cuda
@pytest.mark.parametrize("env", [{"MYOPS_ROPE_FLAT": "0"}, {"MYOPS_ROPE_HEADS": "1"}, {"MYOPS_ROPE_HEADS": "2"},
                                 {"MYOPS_ROPE_PAIR": "0"}, {"MYOPS_ROPE_PAIR": "1"}],
                         ids=["register", "heads1", "heads2", "unpaired", "paired"])
def test_kernel_variants(env):
    """The CUDA tests above under each kernel variant (knobs read once per process: run in a subprocess):
    MYOPS_ROPE_FLAT=0, the register kernel on every layout (by default the flat kernel takes every 16-byte layout);
    MYOPS_ROPE_HEADS=1 / 2, the flat kernel's heads per thread on every layout with an even head count (by default 2
    only for fp32 with the heads inner on an H200-class device, so one of the two is otherwise untested on any one
    machine); MYOPS_ROPE_PAIR=0 / 1, the 16-bit NeoX flat kernel at one or two output vectors a thread (by default two
    on an H200-class device only)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-q", "-p", "no:cacheprovider",
                        "-k", "fast_path_shapes or cuda_grids"], cwd=root, env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-2000:]


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float64).to(device)

    for hf in (False, True):
        for il in (False, True):
            x = rand(2, 3, 3, 2, 4)[:, :, 1].requires_grad_()  # [2, 3, 2, 4]: q of a fused qkv (strided)
            S = x.shape[-2] if hf else x.shape[-3]
            cos, sin = rand(S, 4).requires_grad_(), rand(2, S, 4).requires_grad_()  # [S, D] and [B, S, D]
            check_gradcheck(lambda a, c, s: ops.rope(a, c, s, hf, il), [x, cos, sin])
            check_gradcheck(lambda a, c, s: ops.rope(a, c, s, hf, il), [x, rand(1, S, 4).requires_grad_(), sin])
            # rope_backward is the adjoint of the rotation: <rope(x), g> == <x, rope_backward(g)>.
            gr, xd, cd, sd = rand(*x.shape), x.detach(), cos.detach(), sin.detach()
            lhs, rhs = (ops.rope(xd, cd, sd, hf, il) * gr).sum(), (xd * ops.rope_backward(gr, cd, sd, hf, il)).sum()
            torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_func(device):
    x = make_tensor((2, 3, 3, 2, 4), torch.float64, device)[:, :, 1]  # [2, 3, 2, 4] (strided)
    cos, sin = make_tensor((3, 4), torch.float64, device, seed=1), make_tensor((2, 3, 4), torch.float64, device, seed=2)
    for hf, il in [(False, False), (True, True)]:
        c, s = (cos, sin) if not hf else (cos[:2], sin[:, :2])
        check_func(lambda a, cc, ss: ops.rope(a, cc, ss, hf, il), lambda a, cc, ss: eager(a, cc, ss, hf, il), [x, c, s])  # (linear in x: rope_backward's result does not depend on it)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    g = torch.Generator().manual_seed(0)

    def rand(*shape, rg=False):
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device).requires_grad_(rg)

    for x_shape, t_shape, hf, il, rg_table in [((5, 3, 8), (5, 8), False, False, False),
                                               ((2, 3, 5, 6), (2, 5, 6), True, True, True),
                                               ((2, 0, 3, 4), (1, 0, 4), False, False, True),
                                               ((3, 4, 2, 66), (1, 4, 66), False, True, False)]:
        args = (rand(*x_shape, rg=True), rand(*t_shape, rg=rg_table), rand(*t_shape, rg=rg_table), hf, il)
        check_opcheck(OP, args)
        check_opcheck(BACKWARD, (rand(*x_shape),) + tuple(a.detach() if isinstance(a, torch.Tensor) else a
                                                         for a in args[1:]))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(shape, generator=g).to(device)

    # check_compile's second round trims dim 0 of every input: S for these (x [S, H, D], cos/sin [S, D]). The cos/sin
    # gradients are torch code in ops/rope.py, which Inductor fuses and rounds its own way: 1e-6, not bitwise.
    check_compile(lambda x, c, s: ops.rope(x, c, s), [rand(9, 4, 16), rand(9, 16), rand(9, 16)], tol=1e-6)
    check_compile(lambda x, c, s: ops.rope(x, c, s, interleaved=True) * 2, [rand(7, 3, 6), rand(7, 6), rand(7, 6)],
                  tol=1e-6)
    # heads_first [B, H, S, D] with cos/sin [B, S, D] (trimmed together along B); x only differentiable.
    x, c, s = rand(3, 4, 5, 8), rand(3, 5, 8), rand(3, 5, 8)
    check_compile(lambda x: ops.rope(x, c[: x.shape[0]], s[: x.shape[0]], heads_first=True), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x = torch.randn(2, 5, 3, 8, device=device)
    c = torch.randn(5, 8, device=device)
    raises(ops.rope, x.int(), c.int(), c.int(), match="x must be a floating-point tensor")
    raises(ops.rope, x[0, 0], c, c, match="x must have at least 3 dimensions")
    raises(ops.rope, x[..., :7], c[:, :7], c[:, :7], match=r"x's last dimension \(D\) must be even, got 7")
    raises(ops.rope, x, c.double(), c, match="cos must have the same dtype as x")
    raises(ops.rope, x, c, c.half(), match="sin must have the same dtype as x")
    raises(ops.rope, x, c.int(), c, match="cos must have the same dtype as x")
    raises(ops.rope, x, c[:4], c, match=r"cos must have shape \[S, D\] = \[5, 8\]")
    raises(ops.rope, x, c, c[:, :6], match=r"sin must have shape \[S, D\] = \[5, 8\].*got \[5, 6\]")
    raises(ops.rope, x, c[None].expand(3, 5, 8), c, match=r"cos must have shape .* batch dims \[2\], got \[3, 5, 8\]")
    raises(ops.rope, x, c[None, None], c, match=r"cos must have shape .*got \[1, 1, 5, 8\]")
    raises(ops.rope, x, c[0], c, match=r"cos must have shape .*got \[8\]")
    raises(ops.rope, x, c, c, True, match=r"cos must have shape \[S, D\] = \[3, 8\]")  # heads_first: S = 3
    raises(ops.rope_backward, x[0, 0], c, c, match="grad must have at least 3 dimensions")
    raises(ops.rope_backward, x, c[:4], c, match=r"myops.rope_backward: cos must have shape \[S, D\]")


@pytest.mark.cuda
def test_device_mismatch():
    x = torch.randn(5, 3, 8, device="cuda")
    c = torch.randn(5, 8, device="cuda")
    raises(ops.rope, x, c.cpu(), c, match="cos must be on the same device as x")
    raises(ops.rope, x, c, c.cpu(), match="sin must be on the same device as x")
