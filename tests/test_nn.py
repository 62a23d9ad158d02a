"""ops.nn modules against the torch modules they replace: structure (parameters, state_dict keys, extra_repr,
reset_parameters), state_dict round trips both ways, outputs and gradients (x and every parameter) within 2x
eager's error vs float64, a few training steps, and torch.compile(fullgraph=True) forward + backward.

LayerNorm / RMSNorm forward tests need ops.layer_norm / ops.rms_norm (another branch): they are skipped until
those ops exist, and run once they do."""

import copy

import pytest
import torch
import torch.nn.functional as F

import ops
from common import DEVICES, DTYPES, check_vs_eager, make_tensor

needs_layer_norm = pytest.mark.skipif(not hasattr(ops, "layer_norm"), reason="ops.layer_norm is not in this build")
needs_rms_norm = pytest.mark.skipif(not hasattr(ops, "rms_norm"), reason="ops.rms_norm is not in this build")

# (ops.nn class, torch.nn class, constructor kwargs)
NORMS = [
    (ops.nn.LayerNorm, torch.nn.LayerNorm, dict(normalized_shape=24)),
    (ops.nn.LayerNorm, torch.nn.LayerNorm, dict(normalized_shape=(3, 8), eps=1e-3)),
    (ops.nn.LayerNorm, torch.nn.LayerNorm, dict(normalized_shape=[24], bias=False)),
    (ops.nn.LayerNorm, torch.nn.LayerNorm, dict(normalized_shape=(2, 3, 4), elementwise_affine=False)),
    (ops.nn.RMSNorm, torch.nn.RMSNorm, dict(normalized_shape=24)),
    (ops.nn.RMSNorm, torch.nn.RMSNorm, dict(normalized_shape=(3, 8), eps=1e-6)),
    (ops.nn.RMSNorm, torch.nn.RMSNorm, dict(normalized_shape=24, elementwise_affine=False)),
]
NORM_IDS = [f"{c.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for c, _, kw in NORMS]
# the same, skipped while the op the module calls is missing
NORMS_NEEDING_OPS = [pytest.param(*n, id=i, marks=needs_layer_norm if n[0] is ops.nn.LayerNorm else needs_rms_norm)
                     for n, i in zip(NORMS, NORM_IDS)]


class LlamaMLP(torch.nn.Module):
    """Hugging Face's LlamaMLP (transformers.models.llama.modeling_llama), written out: the reference for
    ops.nn.SwiGLU / GEGLU, whose state_dict keys must match it."""

    def __init__(self, hidden_size, intermediate_size, act_fn, bias=False, dtype=None):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, bias=bias, dtype=dtype)
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, bias=bias, dtype=dtype)
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, bias=bias, dtype=dtype)
        self.act_fn = act_fn

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


GATED = [(ops.nn.SwiGLU, F.silu), (ops.nn.GEGLU, lambda t: F.gelu(t, approximate="tanh"))]


def randomize(module, seed=0):
    """Random parameters (the defaults, ones and zeros, would hide a weight or bias mix-up)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return module


def check_module(ours, theirs, x):
    """ours(x) and the gradients of x and of every parameter vs theirs (the torch module, same parameters, same
    dtype) and a float64 copy of theirs: ours' error at most 2x theirs (check_vs_eager). In float64 theirs is the
    reference itself, so ours must match it within float64 tolerances."""
    dtype, device = x.dtype, x.device
    ours, theirs = ours.to(device), theirs.to(device)
    ours.zero_grad(set_to_none=True)
    theirs.zero_grad(set_to_none=True)
    ref = copy.deepcopy(theirs).to("cpu", torch.float64)
    xo, xt = (x.detach().clone().requires_grad_() for _ in range(2))
    xr = x.detach().to("cpu", torch.float64).requires_grad_()
    out, eager, refout = ours(xo), theirs(xt), ref(xr)
    assert out.shape == refout.shape and out.dtype == dtype and out.device == device
    g = torch.randn(refout.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for o in (out, eager, refout):
        o.backward(g.to(o.dtype).to(o.device))
    pairs = [("output", out, eager, refout), ("grad of x", xo.grad, xt.grad, xr.grad)]
    params_t, params_r = dict(theirs.named_parameters()), dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, f"{name}: no gradient"
        pairs.append((f"grad of {name}", p.grad, params_t[name].grad, params_r[name].grad))
    for what, o, e, r in pairs:
        if dtype == torch.float64:
            torch.testing.assert_close(o.cpu(), r, msg=lambda m: f"{what}: {m}")
        else:
            check_vs_eager(o, e, r, dtype, what=what)


def loaded_from(theirs, cls, kwargs, dtype):
    """An ops.nn module built like theirs, with theirs' state_dict loaded (strict: same keys and shapes)."""
    ours = cls(**kwargs, dtype=dtype)
    ours.load_state_dict(theirs.state_dict())
    return ours


# ---- norms: structure (runs without ops.layer_norm / ops.rms_norm) ----------------------------------------------

@pytest.mark.parametrize("cls, torch_cls, kwargs", NORMS, ids=NORM_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_structure(cls, torch_cls, kwargs, dtype):
    ours, theirs = cls(**kwargs, dtype=dtype), torch_cls(**kwargs, dtype=dtype)
    assert isinstance(ours, torch_cls)
    assert ours.extra_repr() == theirs.extra_repr()
    assert repr(ours) == repr(theirs)
    assert [(n, p.shape, p.dtype) for n, p in ours.named_parameters()] == \
        [(n, p.shape, p.dtype) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):  # reset_parameters: ones, zeros
        assert torch.equal(a, b)
    # round trips: torch -> ours -> torch
    randomize(theirs)
    ours.load_state_dict(theirs.state_dict())
    back = torch_cls(**kwargs, dtype=dtype)
    back.load_state_dict(ours.state_dict())
    for a, b in zip(back.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a, b)
    ours.reset_parameters()
    for a, b in zip(ours.state_dict().values(), torch_cls(**kwargs, dtype=dtype).state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cls", [ops.nn.LayerNorm, ops.nn.RMSNorm])
def test_norm_wrong_trailing_shape(cls):
    m = cls((3, 8))
    for shape in [(4, 8, 3), (24,), (8,), (4, 3, 7)]:
        with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 3, 8\].*got input of shape"):
            m(torch.randn(shape))


# ---- norms: numerics (need the ops) ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls, torch_cls, kwargs", NORMS_NEEDING_OPS)
def test_norm_matches_torch(device, dtype, cls, torch_cls, kwargs):
    theirs = randomize(torch_cls(**kwargs, dtype=dtype))
    ours = loaded_from(theirs, cls, kwargs, dtype)
    shape = tuple(ours.normalized_shape)
    for lead, layout in [((5, 7), "contiguous"), ((5, 7), "transposed"), ((3,), "row_strided"), ((), "contiguous")]:
        check_module(ours, theirs, make_tensor(lead + shape, dtype, device, layout, seed=len(lead)))
    if cls is ops.nn.RMSNorm:
        # small inputs: the mean square is near eps, so the default eps (None) must be torch's
        check_module(ours, theirs, make_tensor((4,) + shape, dtype, device, seed=9) * 0.01)


# ---- SwiGLU / GEGLU ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls, act", GATED, ids=[c.__name__ for c, _ in GATED])
def test_gated_structure(cls, act):
    for bias in (False, True):
        ours, theirs = cls(16, 40, bias=bias), LlamaMLP(16, 40, act, bias=bias)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert [(n, p.shape) for n, p in ours.named_parameters()] == \
            [(n, p.shape) for n, p in theirs.named_parameters()]
    m = cls(16, 40, out_features=8, bias=True, dtype=torch.bfloat16)
    assert (m.gate_proj.weight.shape, m.up_proj.weight.shape, m.down_proj.weight.shape) == ((40, 16), (40, 16), (8, 40))
    assert m.down_proj.bias.dtype == torch.bfloat16
    assert "in_features=16, hidden_features=40, out_features=8, bias=True" in repr(m)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("cls, act", GATED, ids=[c.__name__ for c, _ in GATED])
def test_gated_matches_llama_mlp(device, dtype, bias, cls, act):
    theirs = randomize(LlamaMLP(16, 40, act, bias=bias, dtype=dtype))
    ours = loaded_from(theirs, cls, dict(in_features=16, hidden_features=40, bias=bias), dtype)
    for shape, layout in [((6, 16), "contiguous"), ((2, 3, 16), "permuted"), ((16,), "contiguous")]:
        check_module(ours, theirs, make_tensor(shape, dtype, device, layout, seed=len(shape)))
    back = LlamaMLP(16, 40, act, bias=bias, dtype=dtype)  # and the other way round
    back.load_state_dict(ours.state_dict())
    for a, b in zip(back.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu())


def test_loads_transformers_llama_mlp():
    modeling = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = modeling.LlamaConfig(hidden_size=16, intermediate_size=40, hidden_act="silu", num_attention_heads=4,
                                  num_key_value_heads=4)  # recent versions check hidden_size % heads == 0
    theirs = randomize(modeling.LlamaMLP(config))
    ours = ops.nn.SwiGLU(16, 40, bias=getattr(config, "mlp_bias", False))
    ours.load_state_dict(theirs.state_dict())
    x = make_tensor((5, 16), torch.float32, "cpu")
    torch.testing.assert_close(ours(x), theirs(x))


# ---- training and compile -----------------------------------------------------------------------------------------

class Residual(torch.nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.body = torch.nn.Sequential(*layers)

    def forward(self, x):
        return x + self.body(x)


def tiny_model(with_norms: bool) -> torch.nn.Module:
    """Two residual gated-MLP blocks (pre-norm, as in a transformer, when with_norms) between linear layers."""
    norm1 = [ops.nn.LayerNorm(16)] if with_norms else []
    norm2 = [ops.nn.RMSNorm(16, eps=1e-6)] if with_norms else []
    return torch.nn.Sequential(torch.nn.Linear(8, 16), Residual(*norm1, ops.nn.SwiGLU(16, 32, bias=True)),
                               Residual(*norm2, ops.nn.GEGLU(16, 32)), torch.nn.Linear(16, 4))


def run_training(with_norms: bool) -> None:
    """30 SGD steps on a small regression: the loss falls, every parameter gets a finite non-zero gradient and
    moves."""
    torch.manual_seed(0)
    model = tiny_model(with_norms)
    x = torch.randn(64, 8)
    y = torch.sin(x[:, :4]) + 0.5 * x[:, 4:]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    for step in range(30):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if step == 0:
            for name, p in model.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[-1] < 0.5 * losses[0], losses
    for name, p in model.named_parameters():
        assert not torch.equal(p.detach(), before[name]), f"{name} did not change"


def test_training_loop_gated():
    run_training(with_norms=False)


@needs_layer_norm
@needs_rms_norm
def test_training_loop_with_norms():
    run_training(with_norms=True)


@needs_layer_norm
@needs_rms_norm
def test_ensemble_vmap():
    """An ensemble of the tiny model (torch.func.stack_module_state, functional_call under vmap, as PyTorch's model
    ensembling tutorial): outputs and each member's parameter gradients equal the members run one by one, with every
    op taken by its vmap rule (the norms' batched weights and biases in one call)."""
    from torch.func import functional_call, grad, stack_module_state, vmap

    from common import no_vmap_fallback
    torch.manual_seed(3)
    # (float64: the random members' activations reach the thousands, where batched and single matmuls' fp32 orders
    #  part by more than fp32's tolerance)
    models = [randomize(tiny_model(True), seed=i).double() for i in range(3)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x = torch.randn(10, 8, dtype=torch.float64)
    y = torch.randn(10, 4, dtype=torch.float64)

    def loss(p, b, x):
        return F.mse_loss(functional_call(base, (p, b), (x,)), y)

    with no_vmap_fallback():
        out = vmap(lambda p, b, x: functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(params, buffers, x)
        grads = vmap(grad(loss), in_dims=(0, 0, None))(params, buffers, x)
    torch.testing.assert_close(out, torch.stack([m(x) for m in models]))
    for i, m in enumerate(models):
        m.zero_grad()
        F.mse_loss(m(x), y).backward()
        for name, p in m.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad, msg=name)


def check_compiled_module(module: torch.nn.Module, shape: tuple[int, ...], device: str) -> None:
    """torch.compile(fullgraph=True, dynamic=True) of the module: same output, input and parameter gradients as
    eager, on two batch sizes."""
    module = randomize(module).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for batch in (shape[0], shape[0] - 1):
        x = make_tensor((batch,) + shape[1:], torch.float32, device, seed=batch)
        results = []
        for fn in (module, compiled):
            module.zero_grad()
            xi = x.clone().requires_grad_()
            out = fn(xi)
            out.backward(torch.ones_like(out))
            results.append([out, xi.grad] + [p.grad.clone() for p in module.parameters()])
        for a, b in zip(*results):
            torch.testing.assert_close(b, a)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_gated(device):
    check_compiled_module(ops.nn.SwiGLU(16, 40, bias=True), (9, 16), device)
    check_compiled_module(ops.nn.GEGLU(16, 40, out_features=8), (9, 5, 16), device)


@pytest.mark.parametrize("device", DEVICES)
@needs_layer_norm
def test_compile_layer_norm(device):
    check_compiled_module(ops.nn.LayerNorm(24), (9, 24), device)
    check_compiled_module(ops.nn.LayerNorm((3, 8), bias=False), (9, 3, 8), device)


@pytest.mark.parametrize("device", DEVICES)
@needs_rms_norm
def test_compile_rms_norm(device):
    check_compiled_module(ops.nn.RMSNorm(24), (9, 24), device)
    check_compiled_module(ops.nn.RMSNorm((3, 8), eps=1e-6), (9, 3, 8), device)


@pytest.mark.cuda
def test_module_to_cuda():
    """A module built on the CPU and moved (.to / .cuda) runs on the GPU, in bf16 too."""
    m = ops.nn.SwiGLU(16, 40, bias=True).cuda().to(torch.bfloat16)
    x = torch.randn(3, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = m(x)
    out.sum().backward()
    assert out.device.type == "cuda" and out.dtype == torch.bfloat16
    assert x.grad is not None and all(p.grad is not None and p.grad.is_cuda for p in m.parameters())
