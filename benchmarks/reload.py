"""Edit -> live: time from saving one kernel file to the next op call running the new code, in a running process.

Works on a copy of the source tree (your checkout is never edited) with a private cache seeded with this
checkout's registration layer. After a first (untimed) import, it repeatedly appends a comment to one kernel file
-- new content, so a new kernel library -- and times ``ops.reload()`` plus the first ``ops.relu`` call after it.

    PYTHONPATH=. python benchmarks/reload.py [--file csrc/cuda/relu.cu] [--repeats 5]

Default file: csrc/cuda/relu.cu where a GPU is visible, else csrc/cpu/relu.c (built C-only, as on a CPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

INNER = r"""
import json, sys, time
import torch, ops
path, repeats = sys.argv[1], int(sys.argv[2])
device = "cuda" if path.endswith(".cu") else "cpu"
x = torch.randn(1 << 20, device=device)
ops.relu(x)
times = []
for i in range(repeats):
    with open(path, "a") as f:
        f.write(f"\n/* edit {i} {time.time()} */\n")
    t0 = time.perf_counter()
    ops.reload()
    ops.relu(x)
    if device == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print("TIMES", json.dumps(times))
"""


def main() -> int:
    import torch

    import ops  # noqa: F401  (builds this checkout's libraries, whose registration layer the copy reuses)
    import torch_ops_jit as jit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", default="csrc/cuda/relu.cu" if torch.cuda.is_available() else "csrc/cpu/relu.c")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        os.makedirs(tree)
        for name in ("csrc", "ops"):
            shutil.copytree(os.path.join(jit.ROOT, name), os.path.join(tree, name))
        shutil.copy(os.path.join(jit.ROOT, "torch_ops_jit.py"), tree)
        cache = os.path.join(tmp, "cache")
        cfg_dir = os.path.join(cache, os.path.basename(jit.Config().dir))
        os.makedirs(cfg_dir, mode=0o700)
        os.chmod(cache, 0o700)
        for f in (jit._State.reg_path, jit._State.reg_path + ".sha256"):
            shutil.copy(f, cfg_dir)
        env = dict(os.environ, MYOPS_CACHE_DIR=cache, MYOPS_QUIET="1")
        if args.file.endswith(".c"):
            env["MYOPS_NO_CUDA_KERNELS"] = "1"
        r = subprocess.run([sys.executable, "-c", INNER, args.file, str(args.repeats)], cwd=tree, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout, r.stderr, file=sys.stderr)
            return 1
        times = json.loads(r.stdout.split("TIMES ", 1)[1])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"edit -> live for {args.file} on {device} ({os.cpu_count()} cores), torch {torch.__version__}: "
          f"median {statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s "
          f"over {len(times)} edits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
