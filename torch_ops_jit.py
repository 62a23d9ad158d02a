"""torch_ops_jit: builds, caches and loads myops' two native libraries just in time.

Two libraries, so that kernels can be rebuilt and swapped inside a running process:

* the registration layer (``csrc/ops/*.cpp``, C++ with light torch headers): schemas, argument checks, device
  guard, stream, output allocation. Built through ``torch.utils.cpp_extension.load`` and loaded once per process
  (a ``TORCH_LIBRARY`` namespace cannot be registered twice).
* the kernel library (``csrc/cpu/*.c`` in C11, ``csrc/cuda/*.cu`` in CUDA C; no torch headers): plain C entry
  points (``csrc/myops.h``). Built with ninja directly, one object per source, so an edit recompiles one file.
  Its file name carries a hash of its sources (``myops_kernels_<hash>.so``): a rebuild is a new file that the
  registration layer ``dlopen``s next to the old one and switches to (``reload()``).

Cache layout (root: ``$MYOPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/myops``, else ``~/.cache/myops``)::

    <root>/<torch version>-<cuda>-py<ver>-<hash of archs, flags, compilers>/
        myops_reg_<hash>.so, myops_kernels_<hash>.so    published libraries (+ .sha256 beside each)
        reg/  kernels/                                  ninja build trees (objects reused across edits)
        .lock                                           fcntl lock held while building

Nothing here knows about individual ops: sources are found by directory.

Command line: ``python -m torch_ops_jit build|info|clean|watch [--run CMD]``.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import threading
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(ROOT, "csrc")
BUILD_FORMAT = 1  # bump when the build recipe changes in a way the flags do not show


class BuildError(RuntimeError):
    """A compile or link step failed; the message carries the compiler's output (file:line)."""


def _log(msg: str) -> None:
    if os.environ.get("MYOPS_QUIET", "0") != "1":
        print(f"myops: {msg}", file=sys.stderr, flush=True)


# ---- toolchain ---------------------------------------------------------------------------------------------------
def _torch():
    import torch

    return torch


def cuda_home() -> str | None:
    """The CUDA toolkit root (bin/nvcc and include/cuda_runtime.h), or None."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
        # a wrapper script (as /usr/local/bin/nvcc here) names the real one
        with contextlib.suppress(OSError, UnicodeDecodeError):
            with open(nvcc, encoding="utf-8") as f:
                head = f.read(4096)
            m = re.search(r"(/\S+)/bin/nvcc", head)
            if m:
                cands.append(m.group(1))
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "bin", "nvcc")) and os.path.isfile(
            os.path.join(c, "include", "cuda_runtime.h")
        ):
            return c
    return None


def with_cuda() -> bool:
    """CUDA kernels are built when torch is a CUDA build and a toolkit is found (MYOPS_NO_CUDA=1 turns it off)."""
    return os.environ.get("MYOPS_NO_CUDA", "0") != "1" and _torch().version.cuda is not None and cuda_home() is not None


def arch_list() -> list[str]:
    """Target archs, e.g. ['9.0']: TORCH_CUDA_ARCH_LIST if set, else the visible GPUs, else 9.0 (H100/H200)."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        return sorted(set(a for a in re.split(r"[;\s,]+", env) if a))
    torch = _torch()
    if torch.cuda.is_available():
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        return sorted(f"{a}.{b}" for a, b in caps)
    return ["9.0"]


def _gencode_flags(archs: list[str]) -> list[str]:
    flags = []
    for a in archs:
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", a)
        if not m:
            raise ValueError(f"TORCH_CUDA_ARCH_LIST entry {a!r} is not of the form 9.0, 9.0a or 8.6+PTX")
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def _tool_version(cmd: list[str], line: int = -1) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.strip().splitlines()[line] if out.strip() else "none"


# ---- cache -------------------------------------------------------------------------------------------------------
def cache_root() -> str:
    root = os.environ.get("MYOPS_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "myops")
    return os.path.abspath(root)


def _secure_dir(path: str) -> str:
    """Creates path (0700) and refuses to use one that other users can write to or that someone else owns."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise RuntimeError(f"myops: cache directory {path} belongs to uid {st.st_uid}, not to you; "
                           f"set MYOPS_CACHE_DIR to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuntimeError(f"myops: cache directory {path} is writable by other users (mode "
                           f"{stat.S_IMODE(st.st_mode):o}); libraries are never loaded from such a directory. "
                           f"Run chmod 700 on it or set MYOPS_CACHE_DIR")
    return path


class Config:
    """Everything that decides what a build produces; its digest names the cache directory."""

    def __init__(self) -> None:
        torch = _torch()
        self.torch_version = torch.__version__
        self.cuda = with_cuda()
        self.cuda_home = cuda_home() if self.cuda else None
        self.cuda_version = torch.version.cuda if self.cuda else None
        self.archs = arch_list() if self.cuda else []
        self.cc = os.environ.get("CC", "cc")
        self.cxx = os.environ.get("CXX", "c++")
        self.nvcc = os.path.join(self.cuda_home, "bin", "nvcc") if self.cuda else None
        # MYOPS_NO_CUDA_KERNELS=1 builds the C kernels alone (seconds instead of minutes on a small CPU machine);
        # the registration layer is unchanged and CUDA calls then say that the kernels are missing.
        self.cuda_kernels = self.cuda and os.environ.get("MYOPS_NO_CUDA_KERNELS", "0") != "1"
        # On a many-core host, each elementwise .cu file is compiled as one translation unit per dtype plus its
        # entry point (MYOPS_EW_PART, csrc/cuda/elementwise.cuh), in parallel: an edit rebuilds in the time of a
        # quarter of the file. On a small machine the total work would grow, so one unit per file.
        split = os.environ.get("MYOPS_SPLIT_PARTS", "auto")  # 1 / 0 force it on / off
        self.split_parts = split == "1" or (split == "auto" and (os.cpu_count() or 1) >= 8)
        # -fno-trapping-math: no op reads the FP exception flags, and with them GCC would not if-convert (so not
        # vectorize) a loop where a clamped branch may overflow; -fopenmp-simd: `omp simd` pragmas only (no OpenMP
        # runtime), for reductions the order of which is free (csrc/cpu/rows.h). Neither changes a result.
        # MYOPS_CFLAGS: extra C flags, in the cache key like MYOPS_NVCC_FLAGS.
        self.cflags = ["-O3", "-std=c11", "-fPIC", "-Wall", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd"]
        self.cflags += shlex.split(os.environ.get("MYOPS_CFLAGS", ""))
        self.nvcc_flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-lineinfo", "--expt-relaxed-constexpr"]
        self.nvcc_flags += _gencode_flags(self.archs)
        # MYOPS_NVCC_FLAGS: extra nvcc flags (e.g. -D switches of a kernel variant to A/B in one process tree); they
        # enter the cache key, so each set of flags builds into its own directory.
        self.nvcc_flags += shlex.split(os.environ.get("MYOPS_NVCC_FLAGS", ""))
        self.reg_cflags = ["-O3"] + (["-DMYOPS_WITH_CUDA"] if self.cuda else [])
        # at::parallel_for is a header template: with ATen's OpenMP backend it only runs in parallel when the
        # calling code is compiled with -fopenmp (without it the pragma is ignored and every CPU op ran on one
        # thread). Compile only: the GOMP symbols resolve through libtorch_cpu's own OpenMP runtime at load time,
        # so the process never holds a second one.
        if torch._C.has_openmp and sys.platform.startswith("linux"):
            self.reg_cflags.append("-fopenmp")
        self.key_fields = {
            "format": BUILD_FORMAT,
            "torch": self.torch_version,
            "torch_git": getattr(torch.version, "git_version", ""),
            "cuda": self.cuda_version,
            "archs": self.archs,
            "python": sys.implementation.cache_tag,
            "platform": sysconfig.get_platform(),
            "reg_cflags": self.reg_cflags,
            "cc": [self.cc, self.cxx],
        }
        # The kernel library's own flags key only its file and its build tree: a kernel variant built with other
        # MYOPS_CFLAGS / MYOPS_NVCC_FLAGS shares this directory and the registration layer in it.
        self.kernel_fields = {"cflags": self.cflags, "nvcc_flags": self.nvcc_flags}
        digest = hashlib.sha256(json.dumps(self.key_fields, sort_keys=True).encode()).hexdigest()[:12]
        tag = f"torch{self.torch_version}-{'cu' + self.cuda_version if self.cuda else 'cpu'}-{sys.implementation.cache_tag}"
        self.dir = os.path.join(cache_root(), re.sub(r"[^A-Za-z0-9._+-]", "_", tag) + "-" + digest)


def _sources(subdir: str, pattern: str) -> list[str]:
    return sorted(glob.glob(os.path.join(CSRC, subdir, pattern)))


def kernel_sources(cfg: Config) -> list[str]:
    return _sources("cpu", "*.c") + (_sources("cuda", "*.cu") if cfg.cuda_kernels else [])


def reg_sources() -> list[str]:
    return _sources("ops", "*.cpp")


def _digest(paths: list[str], extra: object) -> str:
    h = hashlib.sha256(json.dumps(extra, sort_keys=True).encode())
    for p in paths:
        h.update(os.path.relpath(p, CSRC).encode() + b"\0")
        with open(p, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:16]


def kernel_digest(cfg: Config) -> str:
    hdrs = [os.path.join(CSRC, "myops.h")] + _sources("cpu", "*.h")
    hdrs += _sources("cuda", "*.cuh") if cfg.cuda_kernels else []
    return _digest(kernel_sources(cfg) + hdrs, [cfg.key_fields, cfg.kernel_fields, cfg.cuda_kernels, cfg.split_parts])


def reg_digest(cfg: Config) -> str:
    return _digest(reg_sources() + _sources("ops", "*.h") + [os.path.join(CSRC, "myops.h")], cfg.key_fields)


@contextlib.contextmanager
def _build_lock(cfg: Config):
    """An fcntl lock: the kernel drops it when its holder dies (SIGKILL included), so nothing is left to hang on."""
    _secure_dir(cache_root())
    _secure_dir(cfg.dir)
    fd = os.open(os.path.join(cfg.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log("another process is building this cache; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _publish(built: str, dest: str) -> None:
    """Copies a built library to its final name with a checksum beside it, both by atomic rename."""
    tmp = dest + f".tmp{os.getpid()}"
    shutil.copyfile(built, tmp)
    os.chmod(tmp, 0o700)
    digest = _sha256_file(tmp)
    with open(tmp + ".sha256", "w") as f:
        f.write(digest + "\n")
    os.replace(tmp + ".sha256", dest + ".sha256")
    os.replace(tmp, dest)


def _verified(path: str) -> bool:
    """True if path exists and matches its recorded checksum (a truncated or corrupt library is rebuilt)."""
    try:
        with open(path + ".sha256") as f:
            want = f.read().strip()
        return _sha256_file(path) == want
    except OSError:
        return False


# ---- building ------------------------------------------------------------------------------------------------------
def _ninja() -> str:
    exe = shutil.which("ninja")
    if exe:
        return exe
    with contextlib.suppress(ImportError):
        import ninja  # the PyPI package puts its binary here

        return os.path.join(ninja.BIN_DIR, "ninja")
    raise RuntimeError("myops: ninja is required to build the kernels (pip install ninja)")


def _run_streaming(cmd: list[str], env: dict | None, filt, what: str) -> None:
    """Runs cmd, printing the progress lines filt() returns; raises BuildError with the whole output on failure."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            errors="replace", cwd=ROOT)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        shown = filt(line)
        if shown:
            _log(shown)
    rc = proc.wait()
    if rc != 0:
        out = "".join(lines)
        errors = [l for l in lines if re.search(r":\d+(:\d+)?: (fatal )?error|error:|\berror\b", l)]
        head = "".join(errors[:20]) if errors else out[-4000:]
        raise BuildError(f"myops: building {what} failed (exit {rc}). Compiler errors:\n{head}\n"
                         f"---- full output ----\n{out}")


def _ninja_escape(s: str) -> str:
    return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _write_kernel_ninja(cfg: Config, bdir: str, out_name: str) -> None:
    srcs = kernel_sources(cfg)
    lines = [
        "ninja_required_version = 1.3",
        f"cc = {cfg.cc}",
        f"cflags = {' '.join(cfg.cflags)} -I{_ninja_escape(CSRC)}",
        "rule cc",
        "  command = $cc -MD -MF $out.d $cflags -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CC $desc",
    ]
    ldflags = "-shared -Wl,-z,defs"
    if cfg.cuda_kernels:
        lib = os.path.join(cfg.cuda_home, "lib64")
        lines += [
            f"nvcc = {cfg.nvcc}",
            f"nvcc_flags = {' '.join(cfg.nvcc_flags)} -I{_ninja_escape(CSRC)}",
            "rule nvcc",
            "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $nvcc_flags "
            "-c $in -o $out",
            "  depfile = $out.d",
            "  deps = gcc",
            "  description = NVCC $desc",
        ]
        ldflags += f" -L{_ninja_escape(lib)} -lcudart -Wl,-rpath,{_ninja_escape(lib)}"
    lines += [f"cxx = {cfg.cxx}", "rule link", f"  command = $cxx $in -o $out {ldflags} -lm",
              "  description = LINK $out"]
    objs = []
    for s in srcs:
        rel = os.path.relpath(s, CSRC)
        base = "obj/" + rel.replace(os.sep, "_")
        rule = "nvcc" if s.endswith(".cu") else "cc"
        with open(s, encoding="utf-8", errors="replace") as f:
            split = cfg.split_parts and rule == "nvcc" and "MYOPS_EW_CUDA_ENTRY" in f.read()
        for part in range(5) if split else [None]:
            obj = base + (f".part{part}.o" if split else ".o")
            objs.append(obj)
            lines += [f"build {obj}: {rule} {_ninja_escape(s)}", f"  desc = csrc/{rel}" + (f"#{part}" if split else "")]
            if split:
                lines.append(f"  nvcc_flags = $nvcc_flags -DMYOPS_EW_PART={part}")
    lines += [f"build {out_name}: link {' '.join(objs)}", f"default {out_name}", ""]
    path = os.path.join(bdir, "build.ninja")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(path + ".tmp", path)


def _progress_filter(line: str) -> str | None:
    m = re.match(r"\[(\d+)/(\d+)\] (CC|NVCC|LINK) (\S+)", line)
    if m:
        verb = "linking" if m.group(3) == "LINK" else "compiling"
        return f"[{m.group(1)}/{m.group(2)}] {verb} {os.path.basename(m.group(4)) if verb == 'linking' else m.group(4)}"
    return None


def build_kernels(cfg: Config, force: bool = False) -> str:
    """Builds (if needed) and returns the path of the kernel library for the current sources."""
    name = f"myops_kernels_{kernel_digest(cfg)}.so"
    dest = os.path.join(cfg.dir, name)
    if not force and _verified(dest):
        return dest
    with _build_lock(cfg):
        if not force and _verified(dest):  # built by another process while we waited
            return dest
        # one build tree per source checkout (its ninja file names absolute source paths) and set of flags (so that
        # switching between two variants recompiles neither)
        tree = hashlib.sha256(json.dumps([CSRC, cfg.kernel_fields]).encode()).hexdigest()[:8]
        bdir = _secure_dir(os.path.join(cfg.dir, f"kernels-{tree}"))
        _write_kernel_ninja(cfg, bdir, "out/" + name)
        n = len(kernel_sources(cfg))
        _log(f"building kernels ({n} files, {'C + CUDA for sm ' + ','.join(cfg.archs) if cfg.cuda_kernels else 'C only'}) "
             f"in {bdir}")
        env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
        _run_streaming([_ninja(), "-C", bdir], env, _progress_filter, "the kernel library")
        _publish(os.path.join(bdir, "out", name), dest)
        _prune(cfg.dir, "myops_kernels_", keep=dest)
    return dest


def _prune(d: str, prefix: str, keep: str, max_keep: int = 8) -> None:
    """Drops old published libraries beyond the newest max_keep (a running process keeps its mapping)."""
    libs = sorted((p for p in glob.glob(os.path.join(d, prefix + "*.so")) if p != keep), key=os.path.getmtime)
    for p in libs[: max(0, len(libs) - (max_keep - 1))]:
        for q in (p, p + ".sha256"):
            with contextlib.suppress(OSError):
                os.remove(q)


def _reg_child_main(spec_json: str) -> None:
    """Runs in a child process: torch.utils.cpp_extension.load builds the registration layer (and loads it there,
    where a second TORCH_LIBRARY registration could not hurt the parent)."""
    spec = json.loads(spec_json)
    if spec["cuda_home"]:
        os.environ["CUDA_HOME"] = spec["cuda_home"]
    os.environ["TORCH_CUDA_ARCH_LIST"] = spec["arch_list"] or "9.0"
    import torch.utils.cpp_extension as cpp

    if spec["cuda_home"]:
        cpp.CUDA_HOME = spec["cuda_home"]
    path = cpp.load(name="myops_reg", sources=spec["sources"], extra_cflags=spec["cflags"],
                    extra_include_paths=[CSRC], build_directory=spec["build_dir"], with_cuda=spec["cuda"],
                    is_python_module=False, verbose=True)
    print(f"MYOPS_BUILT {path}", flush=True)


def build_registration(cfg: Config, force: bool = False) -> str:
    """Builds (if needed) and returns the path of the registration layer for the current sources."""
    name = f"myops_reg_{reg_digest(cfg)}.so"
    dest = os.path.join(cfg.dir, name)
    if not force and _verified(dest):
        return dest
    with _build_lock(cfg):
        if not force and _verified(dest):
            return dest
        bdir = _secure_dir(os.path.join(cfg.dir, "reg"))
        srcs = reg_sources()
        spec = {"sources": srcs, "cflags": cfg.reg_cflags, "build_dir": bdir, "cuda": cfg.cuda,
                "cuda_home": cfg.cuda_home, "arch_list": ";".join(cfg.archs)}
        _log(f"building the registration layer ({len(srcs)} C++ files, torch {cfg.torch_version}) in {bdir}")
        built = []
        total = len(srcs) + 1

        def filt(line: str) -> str | None:
            m = re.match(r"\[(\d+)/(\d+)\] .* -c (\S+\.cpp) ", line)
            if m:
                return f"[{m.group(1)}/{total}] compiling {os.path.relpath(m.group(3), ROOT)}"
            m = re.match(r"\[(\d+)/(\d+)\] .* -shared ", line)
            if m:
                return f"[{total}/{total}] linking {name}"
            if line.startswith("MYOPS_BUILT "):
                built.append(line.split(" ", 1)[1].strip())
            return None

        code = f"import sys; sys.path.insert(0, {ROOT!r}); import torch_ops_jit as j; j._reg_child_main(sys.argv[1])"
        _run_streaming([sys.executable, "-c", code, json.dumps(spec)], None, filt, "the registration layer")
        if not built:
            raise BuildError("myops: the registration build reported no library")
        _publish(built[0], dest)
        _prune(cfg.dir, "myops_reg_", keep=dest)
    return dest


# ---- loading -------------------------------------------------------------------------------------------------------
class _State:
    lock = threading.RLock()
    cfg: Config | None = None
    reg_path: str | None = None  # the registration layer loaded in this process (once)
    reg_digest: str | None = None
    reg_lib: ctypes.CDLL | None = None
    kernel_path: str | None = None


def _install_kernels(path: str) -> None:
    err = ctypes.create_string_buffer(4096)
    rc = _State.reg_lib.myops_runtime_load_kernels(path.encode(), err, ctypes.c_size_t(len(err)))
    if rc != 0:
        raise RuntimeError(f"myops: could not load kernel library {path}: {err.value.decode(errors='replace')}")
    _State.kernel_path = path


def _install_kernels_or_rebuild(cfg: Config, path: str) -> str:
    """Loads the kernel library; if it does not load (a build tree damaged behind ninja's back), rebuilds it
    from scratch once."""
    try:
        _install_kernels(path)
        return path
    except RuntimeError as e:
        _log(f"{e}; rebuilding the kernel library from scratch")
        tree = hashlib.sha256(CSRC.encode()).hexdigest()[:8]
        shutil.rmtree(os.path.join(cfg.dir, f"kernels-{tree}"), ignore_errors=True)
        path = build_kernels(cfg, force=True)
        _install_kernels(path)
        return path


def load(verbose_notice: bool = True) -> str:
    """Builds what is missing and loads both libraries; returns the kernel library's path. Idempotent."""
    with _State.lock:
        if _State.reg_path is not None:
            return _State.kernel_path
        cfg = Config()
        if not cfg.cuda and verbose_notice and _torch().version.cuda is not None:
            _log("no CUDA toolkit (nvcc) found: building CPU kernels only")
        # Never load from a directory others can write to (checked on the warm path too, not only when building).
        _secure_dir(cache_root())
        _secure_dir(cfg.dir)
        reg = build_registration(cfg)
        kern = build_kernels(cfg)
        import torch

        torch.ops.load_library(reg)
        lib = ctypes.CDLL(reg)
        lib.myops_runtime_load_kernels.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.myops_runtime_load_kernels.restype = ctypes.c_int
        _State.cfg, _State.reg_path, _State.reg_digest, _State.reg_lib = cfg, reg, reg_digest(cfg), lib
        return _install_kernels_or_rebuild(cfg, kern)


def reload() -> str:
    """Rebuilds the kernel library from the current sources (only changed files recompile) and switches every op
    to it. On a compile error raises BuildError and the loaded kernels keep serving. Returns the library path."""
    with _State.lock:
        if _State.reg_path is None:
            return load()
        cfg = _State.cfg
        if reg_digest(cfg) != _State.reg_digest:
            raise RuntimeError("myops: the registration layer (csrc/ops/*.cpp or its headers) changed since this "
                               "process loaded it; a TORCH_LIBRARY cannot be registered twice in one process, so "
                               "restart Python to pick it up (kernel files under csrc/cpu and csrc/cuda reload live)")
        path = build_kernels(cfg)
        if path != _State.kernel_path:
            path = _install_kernels_or_rebuild(cfg, path)
        return path


def loaded_kernel_path() -> str | None:
    return _State.kernel_path


# ---- command line --------------------------------------------------------------------------------------------------
def _info() -> dict:
    cfg = Config()
    kpath = os.path.join(cfg.dir, f"myops_kernels_{kernel_digest(cfg)}.so")
    rpath = os.path.join(cfg.dir, f"myops_reg_{reg_digest(cfg)}.so")
    stem = lambda p: os.path.splitext(os.path.basename(p))[0]  # noqa: E731
    ops = sorted(stem(p) for p in reg_sources() if stem(p) != "common")
    cuda_ops = [o for o in ops if os.path.isfile(os.path.join(CSRC, "cuda", o + ".cu"))]
    torch = _torch()
    return {
        "cache_root": cache_root(),
        "build_dir": cfg.dir,
        "torch": cfg.torch_version,
        "torch_cuda": torch.version.cuda,
        "cuda_home": cuda_home(),
        "nvcc": _tool_version([cfg.nvcc, "--version"]) if cfg.nvcc else "none",
        "cc": _tool_version([cfg.cc, "--version"], line=0),
        "cuda_kernels": cfg.cuda_kernels,
        "archs": cfg.archs,
        "ops_with_cuda_code": cuda_ops if cfg.cuda_kernels else [],
        "ops": ops,
        "registration_library": rpath if _verified(rpath) else None,
        "kernel_library": kpath if _verified(kpath) else None,
    }


def watch(run: str | None, interval: float = 0.3) -> None:
    """Rebuilds on every save under csrc/ and then runs `run` (a shell command: a check or a benchmark) in a
    fresh process, which loads the new build from the cache. A compile error is printed and watching goes on."""
    cfg = Config()
    last = None
    _log(f"watching {CSRC} (Ctrl-C to stop)" + (f"; after each build: {run}" if run else ""))
    while True:
        state = (reg_digest(cfg), kernel_digest(cfg))
        if state != last:
            last = state
            t0 = time.perf_counter()
            try:
                build_registration(cfg)
                build_kernels(cfg)
            except BuildError as e:
                print(str(e).split("---- full output ----")[0], file=sys.stderr, flush=True)
            else:
                _log(f"built in {time.perf_counter() - t0:.2f} s")
                if run:
                    rc = subprocess.run(run, shell=True, cwd=os.getcwd()).returncode
                    _log(f"`{run}` exited with {rc}")
        time.sleep(interval)


# ---- ptxas resource report ---------------------------------------------------------------------------------------
_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def _ptxas_file(cfg: Config, path: str, arch: str, tmp: str) -> list[dict]:
    flags = [f for f in cfg.nvcc_flags if not f.startswith("-gencode")]
    out = os.path.join(tmp, os.path.basename(path) + ".cubin")
    cmd = [cfg.nvcc, "-cubin", f"-arch=sm_{arch}", "-Xptxas", "-v", *flags, f"-I{CSRC}", "-o", out, path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"ptxas report: {os.path.relpath(path, ROOT)} failed to compile\n{r.stderr[-4000:]}")
    rows, cur = [], None
    for line in r.stderr.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            cur = {"file": os.path.relpath(path, ROOT), "kernel": m.group(1), "stack": 0, "spill_stores": 0,
                   "spill_loads": 0}
        elif cur is not None and (m := _PTXAS_FRAME.search(line)):
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
        elif cur is not None and (m := _PTXAS_REGS.search(line)):
            cur["registers"] = int(m.group(1))
            rows.append(cur)
            cur = None
    return rows


def ptxas_report(cfg: Config, files: list[str] | None = None) -> list[dict]:
    """Each kernel's registers, stack frame and spill bytes as ptxas reports them under the build's nvcc flags for its
    first arch: device code only (-cubin), the CUDA sources given (default: every one) compiled in parallel. A stack
    frame without spills is local memory all the same, as an array indexed at run time (session 53's packed
    cross_entropy backward kept 160 bytes a thread there, which a look at spills alone missed). Names demangled where
    c++filt is found."""
    if not cfg.cuda:
        raise BuildError("ptxas report: no CUDA toolkit (or a CPU-only torch)")
    files = [os.path.abspath(f) for f in files] if files else _sources("cuda", "*.cu")
    arch = re.sub(r"\+PTX$", "", cfg.archs[0]).replace(".", "")
    import concurrent.futures
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        rows = [r for part in pool.map(lambda f: _ptxas_file(cfg, f, arch, tmp), files) for r in part]
    if rows and shutil.which("c++filt"):
        names = subprocess.run(["c++filt"], input="\n".join(r["kernel"] for r in rows), capture_output=True,
                               text=True).stdout.splitlines()
        if len(names) == len(rows):
            for r, n in zip(rows, names):
                r["kernel"] = n
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m torch_ops_jit", description="Build, inspect or clear the myops cache.")
    p.add_argument("command", choices=["build", "info", "clean", "watch", "ptxas"])
    p.add_argument("files", nargs="*", help="ptxas: the .cu files (default: every CUDA source)")
    p.add_argument("--force", action="store_true", help="build: rebuild even if the cache is current")
    p.add_argument("--run", help="watch: shell command to run after each successful build")
    p.add_argument("--all", action="store_true", help="ptxas: every kernel, not only those with local memory")
    args = p.parse_intermixed_args(argv)  # (files after an option too)
    if args.files and args.command != "ptxas":
        p.error("only ptxas takes files")
    if args.command == "ptxas":  # registers and local memory (stack frame, spills) of each kernel
        rows = ptxas_report(Config(), args.files)
        local = [r for r in rows if r["stack"] or r["spill_stores"] or r["spill_loads"]]
        for r in rows if args.all else local:
            print(f"{r['registers']:4d} regs  stack {r['stack']:4d}  spill {r['spill_stores']}/{r['spill_loads']}  "
                  f"{r['file']}  {r['kernel'][:160]}")
        print(f"{len(rows)} kernels, {len(local)} with local memory")
        return 0
    if args.command == "watch":
        with contextlib.suppress(KeyboardInterrupt):
            watch(args.run)
        return 0
    if args.command == "build":
        t0 = time.perf_counter()
        cfg = Config()
        reg = build_registration(cfg, force=args.force)
        kern = build_kernels(cfg, force=args.force)
        print(f"registration layer: {reg}\nkernel library:     {kern}\n({time.perf_counter() - t0:.1f} s)")
    elif args.command == "info":
        for k, v in _info().items():
            print(f"{k:22s} {v}")
    else:
        root = cache_root()
        if os.path.isdir(root):
            shutil.rmtree(root)
            print(f"removed {root}")
        else:
            print(f"nothing to remove at {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
