"""The build machinery: in-process reload, locking, corruption, permissions, the command line.

These run C kernels only (MYOPS_NO_CUDA_KERNELS=1) in copies of the source tree, in subprocesses: the test process
itself keeps serving the real kernels. Copies reuse the session's registration layer (same sources, same digest)
so that no test rebuilds the C++ layer.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torch_ops_jit as jit

ROOT = jit.ROOT


def _env(cache: str, **extra: str) -> dict:
    env = dict(os.environ, MYOPS_CACHE_DIR=str(cache), MYOPS_NO_CUDA_KERNELS="1", PYTHONUNBUFFERED="1")
    env.pop("MYOPS_QUIET", None)
    env.update(extra)
    return env


def _run(tree: str, cache: str, code: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tree, env=_env(cache, **env),
                          capture_output=True, text=True, timeout=timeout)


def _copy_tree(dst) -> str:
    dst = str(dst)
    os.makedirs(dst, exist_ok=True)
    for name in ("csrc", "ops"):
        shutil.copytree(os.path.join(ROOT, name), os.path.join(dst, name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "torch_ops_jit.py"), dst)
    return dst


def _seed_cache(cache) -> str:
    """A fresh cache holding a copy of this session's registration layer."""
    reg = jit._State.reg_path
    assert reg is not None, "ops must be loaded (tests/conftest.py imports it)"
    d = os.path.join(str(cache), os.path.basename(os.path.dirname(reg)))
    os.makedirs(d, mode=0o700)
    os.chmod(str(cache), 0o700)
    for f in (reg, reg + ".sha256"):
        shutil.copy(f, d)
    return str(cache)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A source tree copy with a warm cache: (tree, cache)."""
    base = tmp_path_factory.mktemp("jit")
    t, cache = _copy_tree(base / "tree"), _seed_cache(base / "cache")
    r = _run(t, cache, "import ops")
    assert r.returncode == 0, r.stderr
    return t, cache


# The C kernels a build-only test's tree keeps: the ABI stamp and two elementwise ops (relu.c is the one
# test_changed_source_gets_a_new_library edits). Locking, corruption, signals and the cache's layout do not depend on
# how many kernels a build compiles, and the full set took about 45 s a cold build on a 2-core VM, 6 of the CPU
# suite's 9 minutes with the six tests below.
SMALL_TREE_KERNELS = {"abi.c", "add.c", "relu.c"}


@pytest.fixture
def fresh_tree(tmp_path):
    """A source tree copy with an empty cache (for build-only tests: they never load the registration layer), its C
    kernels cut to SMALL_TREE_KERNELS."""
    t = _copy_tree(tmp_path / "tree")
    cpu = os.path.join(t, "csrc", "cpu")
    for f in os.listdir(cpu):
        if f.endswith(".c") and f not in SMALL_TREE_KERNELS:
            os.remove(os.path.join(cpu, f))
    return t, str(tmp_path / "cache")


def test_reload_edit_compile_error_and_fix(tree):
    t, cache = tree
    r = _run(t, cache, """
        import importlib, pathlib, sys
        import torch, ops
        a, b = torch.randn(37), torch.randn(37)
        src = pathlib.Path("csrc/cpu/add.c")
        text = src.read_text()
        line = "out[0][e] = in[0][e] + in[1][e];"
        assert line in text
        assert torch.equal(ops.add(a, b), a + b)
        compiled = torch.compile(lambda x, y: ops.add(x, y), fullgraph=True)
        assert torch.equal(compiled(a, b), a + b)

        print("MARK edit", file=sys.stderr, flush=True)
        src.write_text(text.replace(line, "out[0][e] = in[0][e] - in[1][e];"))
        ops.reload()
        print("MARK reloaded", file=sys.stderr, flush=True)
        assert torch.equal(ops.add(a, b), a - b), "eager call did not pick up the edit"
        torch._dynamo.reset()
        fresh = torch.compile(lambda x, y: ops.add(x, y), fullgraph=True)
        assert torch.equal(fresh(a, b), a - b), "a freshly compiled graph did not pick up the edit"

        src.write_text(text.replace(line, "out[0][e] = in[0][e] + ;"))
        try:
            ops.reload()
        except ops.BuildError as e:
            assert "add.c:" in str(e) and "error" in str(e), str(e)
        else:
            raise SystemExit("a compile error did not raise")
        assert torch.equal(ops.add(a, b), a - b), "the previous kernels stopped serving after a failed build"

        src.write_text(text.replace(line, "out[0][e] = in[0][e] * in[1][e];"))
        importlib.reload(ops)
        assert torch.equal(ops.add(a, b), a * b), "importlib.reload(ops) did not pick up the edit"
        src.write_text(text)
        ops.reload()
        assert torch.equal(ops.add(a, b), a + b)
        print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    edit = r.stderr.split("MARK edit")[1].split("MARK reloaded")[0]
    compiled = [line for line in edit.splitlines() if "compiling" in line]
    assert compiled == [line for line in compiled if "csrc/cpu/add.c" in line] and len(compiled) == 1, edit


def test_registration_change_needs_restart(tree):
    t, cache = tree
    r = _run(t, cache, """
        import pathlib, ops
        p = pathlib.Path("csrc/ops/add.cpp")
        text = p.read_text()
        p.write_text(text + "\\n// edited\\n")
        try:
            ops.reload()
        except RuntimeError as e:
            assert "restart Python" in str(e), str(e)
            print("OK")
        finally:
            p.write_text(text)
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


_CLONES_CODE = """
    import torch, ops
    g = torch.Generator().manual_seed(3)
    res = {}
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        def rnd(*shape, scale=4.0):
            return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dt)
        x, r, w, b = rnd(37, 1003), rnd(37, 1003), rnd(1003), rnd(1003)
        x[3, 5], x[4, :] = float("nan"), float("-inf")
        x[5, 7] = 90.0  # exp of it overflows fp32 before the max is subtracted
        t = torch.randint(0, 1003, (37,), generator=g)
        t[2] = -100
        for name, fn in {"softmax": lambda x: ops.softmax(x), "log_softmax": lambda x: ops.log_softmax(x),
                         "layer_norm": lambda x: ops.layer_norm(x, w, b), "rms_norm": lambda x: ops.rms_norm(x, w),
                         "add_rms_norm": lambda x: ops.add_rms_norm(x, r, w)[0],
                         "cross_entropy": lambda x: ops.cross_entropy(x, t, label_smoothing=0.1),
                         "swiglu": lambda x: ops.swiglu(x, r), "geglu": lambda x: ops.geglu(x, r),
                         "bias_gelu": lambda x: ops.bias_gelu(x, b)}.items():
            xi = x.clone().requires_grad_()
            y = fn(xi)
            (gx,) = torch.autograd.grad(y, xi, torch.ones_like(y) if y.dim() == 0 else rnd(*y.shape, scale=1.0))
            res[f"{name} {dt}"] = (y.detach(), gx)
    torch.save(res, OUT)
"""


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return set()


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
                    reason="the C kernels are multi-versioned on x86-64 Linux only")
def test_cpu_clones_compute_the_same_bits(tree):
    """The C kernels' AVX-512 / AVX2 / baseline clones (csrc/cpu/vmath.h) give bitwise the same outputs and
    gradients: each is built alone (MYOPS_CFLAGS) next to the multi-versioned default, on the same inputs."""
    t, cache = tree
    cpu = _cpu_flags()
    variants = {"default": "", "baseline": "-DMYOPS_CPU_NO_CLONES"}
    if {"avx2", "fma", "bmi2", "movbe"} <= cpu:
        variants["x86-64-v3"] = "-DMYOPS_CPU_NO_CLONES -march=x86-64-v3"
    results = {}
    for name, flags in variants.items():
        out = os.path.join(t, f"clones-{name}.pt")
        r = _run(t, cache, f"OUT = {out!r}\n" + textwrap.dedent(_CLONES_CODE), MYOPS_CFLAGS=flags)
        assert r.returncode == 0, f"{name}: {r.stdout[-2000:]} {r.stderr[-3000:]}"
        results[name] = torch.load(out)
    ref = results.pop("default")
    for name, res in results.items():
        for key, (y, gx) in ref.items():
            y2, gx2 = res[key]
            for what, a, c in (("output", y, y2), ("grad", gx, gx2)):
                same = (a == c) | (a.isnan() & c.isnan())
                assert bool(same.all()), f"{key} {what}: the {name} build differs from the default in " \
                                         f"{int((~same).sum())} elements"


# Functions of the CPU sources: a static helper of theirs found out of line in the kernel library was compiled once,
# for the baseline ISA, and every clone calls that copy.
_CPU_FUNC = re.compile(r"^(?:MYOPS_CPU_HOT|static|MYOPS_CPU_VEC)[\w\s\*()]*?\b(\w+)\(", re.M)
# Out of line on purpose: the f16 conversions, which pick F16C at run time (common.h).
_CPU_OUT_OF_LINE = {"myops_load_f16", "myops_store_f16", "myops_f16c_load8", "myops_f16c_store8", "myops_f16c_load16",
                    "myops_f16c_store16"}


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64")
                    or shutil.which("nm") is None, reason="GCC's target clones on x86-64 Linux, and nm")
def test_cpu_helpers_compiled_into_every_clone():
    """Every helper a cloned CPU kernel calls is inlined into each clone (MYOPS_CPU_HOT, vmath.h). GCC left some
    `static inline` ones out of line, compiled once for SSE2 and called from the AVX-512 clone: softmax's row forward
    ran 3.5x slower that way. No timing here: nm lists the library's local functions, and none of them may be one of
    the CPU sources' helpers (the kernels' own clones, name.arch_x86_64_v4 / name.default, are the point)."""
    path = jit.build_kernels(jit.Config())
    syms = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout.split()
    local = {n for k, n in zip(syms[1::3], syms[2::3]) if k == "t"} if len(syms) % 3 == 0 else set()
    if not any(".arch_x86_64_v4" in n for n in local):
        pytest.skip("a build without target clones")
    ours = set()
    cpu = os.path.join(ROOT, "csrc", "cpu")
    for f in os.listdir(cpu):
        with open(os.path.join(cpu, f)) as fh:
            ours |= set(_CPU_FUNC.findall(fh.read()))
    outlined = sorted({n for n in local if ".arch_" not in n and ".resolver" not in n and not n.endswith(".default")
                       and n.split(".")[0] in ours - _CPU_OUT_OF_LINE})
    assert not outlined, f"compiled once, out of line, for the baseline ISA: {outlined} (make them MYOPS_CPU_HOT)"


def _build_kernels_code() -> str:
    return "import torch_ops_jit as j; print('PATH', j.build_kernels(j.Config()))"


def test_concurrent_cold_builds_compile_once(fresh_tree):
    t, cache = fresh_tree
    procs = [subprocess.Popen([sys.executable, "-c", _build_kernels_code()], cwd=t, env=_env(cache),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outs = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in outs), outs
    paths = {out.split("PATH ")[1].strip() for out, _, _ in outs}
    assert len(paths) == 1, paths
    builders = [err for _, err, _ in outs if "building kernels" in err]
    assert len(builders) == 1, [err for _, err, _ in outs]


def test_sigkilled_build_does_not_block(fresh_tree):
    t, cache = fresh_tree
    p = subprocess.Popen([sys.executable, "-c", _build_kernels_code()], cwd=t, env=_env(cache),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in p.stderr:
        if "compiling" in line:
            break
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    t0 = time.monotonic()
    r = _run(t, cache, _build_kernels_code(), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "waiting" not in r.stderr  # nothing held the lock
    path = r.stdout.split("PATH ")[1].strip()
    assert jit._verified(path)
    assert time.monotonic() - t0 < 120


def test_corrupt_library_is_rebuilt(fresh_tree):
    t, cache = fresh_tree
    r = _run(t, cache, _build_kernels_code())
    assert r.returncode == 0, r.stderr
    path = r.stdout.split("PATH ")[1].strip()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    assert not jit._verified(path)
    r = _run(t, cache, _build_kernels_code())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("PATH ")[1].strip() == path
    assert jit._verified(path) and os.path.getsize(path) == size


def test_changed_source_gets_a_new_library(fresh_tree):
    t, cache = fresh_tree
    first = _run(t, cache, _build_kernels_code()).stdout.split("PATH ")[1].strip()
    with open(os.path.join(t, "csrc", "cpu", "relu.c"), "a") as f:
        f.write("\n/* edited */\n")
    second = _run(t, cache, _build_kernels_code()).stdout.split("PATH ")[1].strip()
    assert first != second and jit._verified(first) and jit._verified(second)


def test_cache_is_private(fresh_tree, tmp_path):
    t, cache = fresh_tree
    r = _run(t, cache, _build_kernels_code())
    assert r.returncode == 0, r.stderr
    cfg_dir = os.path.dirname(r.stdout.split("PATH ")[1].strip())
    for d in (cache, cfg_dir):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    os.chmod(cache, 0o777)
    r = _run(t, cache, "import ops")
    assert r.returncode != 0 and "writable by other users" in r.stderr, r.stderr


def test_cache_key_follows_torch_version(monkeypatch):
    import torch

    a = jit.Config().dir
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    b = jit.Config().dir
    assert a != b and "torch9.9.9" in b


def test_command_line(fresh_tree):
    t, cache = fresh_tree
    r = subprocess.run([sys.executable, "-m", "torch_ops_jit", "info"], cwd=t, env=_env(cache),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for key in ("cache_root", "torch", "cuda_home", "archs", "ops_with_cuda_code"):
        assert key in r.stdout
    r = _run(t, cache, _build_kernels_code())
    assert "[1/" in r.stderr and "linking" in r.stderr  # progress: files compiled / total
    r = subprocess.run([sys.executable, "-m", "torch_ops_jit", "clean"], cwd=t, env=_env(cache),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not os.path.exists(cache)


@pytest.mark.cuda
def test_cuda_kernel_reload(tmp_path):
    t, cache = _copy_tree(tmp_path / "tree"), _seed_cache(tmp_path / "cache")
    r = _run(t, cache, """
        import pathlib
        import torch, ops
        a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
        assert torch.equal(ops.add(a, b), a + b)
        src = pathlib.Path("csrc/cuda/add.cu")
        text = src.read_text()
        line = "o[0] = i[0] + i[1];"
        assert line in text
        src.write_text(text.replace(line, "o[0] = i[0] - i[1];"))
        ops.reload()
        assert torch.equal(ops.add(a, b), a - b), "the CUDA edit did not take effect"
        src.write_text(text.replace(line, "o[0] = i[0] + ;"))
        try:
            ops.reload()
        except ops.BuildError as e:
            assert "add.cu(" in str(e) and "error" in str(e), str(e)
        else:
            raise SystemExit("a CUDA compile error did not raise")
        assert torch.equal(ops.add(a, b), a - b)
        src.write_text(text)
        ops.reload()
        assert torch.equal(ops.add(a, b), a + b)
        print("OK")
    """, MYOPS_NO_CUDA_KERNELS="0")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not jit.with_cuda(), reason="needs a CUDA toolkit and a CUDA build of torch")
def test_ptxas_report_finds_local_memory(tmp_path, monkeypatch):
    """`python -m torch_ops_jit ptxas` reports each kernel's registers and local memory: a stack frame without
    spills (an array indexed at run time) counts, not only spills."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    src = tmp_path / "local.cu"
    src.write_text(textwrap.dedent("""
        __global__ void indexed(float* o, const int* idx) {
          float a[64];
        #pragma unroll
          for (int i = 0; i < 64; ++i) a[i] = o[i * 256 + threadIdx.x];
          a[idx[threadIdx.x] & 63] += 1.f;
          o[threadIdx.x] = a[idx[threadIdx.x + 1] & 63];
        }
        __global__ void plain(float* o) { o[threadIdx.x] *= 2.f; }
    """))
    rows = {("indexed" if "indexed" in r["kernel"] else "plain"): r for r in jit.ptxas_report(jit.Config(), [str(src)])}
    assert set(rows) == {"indexed", "plain"}, rows
    assert rows["indexed"]["stack"] >= 256 and rows["indexed"]["spill_stores"] == 0, rows["indexed"]
    assert rows["plain"]["stack"] == 0 and rows["plain"]["registers"] > 0, rows["plain"]
