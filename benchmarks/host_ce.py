"""Host time and GPU time of cross_entropy's forward+backward by autograd path, on the GPU:

    PYTHONPATH=. python benchmarks/host_ce.py [--shape 4096,32000] [--trace DIR]

Paths: `ops` (ops.cross_entropy: the op's C++ autograd), `function` (a Python torch.autograd.Function over the same
two ops, called below the Autograd key, as torch.library.register_autograd would run them), `bare` (the two ops
called directly, no autograd). For each path and dtype it prints
- the CUDA-event time of one checked and one unchecked forward+backward (bench.py's timer: behind an L2 flush and a
  GPU sleep) and its % of the device-to-device copy;
- the host time of one unchecked forward+backward while the GPU is kept busy (perf_counter, median of 50): the
  host's share that a target check waited for in the forward exposes as GPU idle time (`function` and `bare` wait
  there; `ops` defers its wait to backward since session 29, so its checked row should match its unchecked one).
--trace DIR writes a torch.profiler trace (CPU and CUDA) of six checked iterations of `ops` and `bare` per dtype.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ops  # noqa: E402
from bench import copy_gbps, time_cuda_events  # noqa: E402

OP = torch.ops.myops.cross_entropy.default
BACKWARD = torch.ops.myops.cross_entropy_backward.default


class PyFunction(torch.autograd.Function):
    """What the op's autograd was before session 16, as a plain autograd.Function."""

    @staticmethod
    def forward(ctx, logits, target, check):
        with torch._C._AutoDispatchBelowAutograd():
            loss, stats = OP(logits, target, -100, 0.0, "mean", check)
        ctx.mark_non_differentiable(stats)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(logits, target, stats)
        return loss

    @staticmethod
    def backward(ctx, grad):
        logits, target, stats = ctx.saved_tensors
        return BACKWARD(grad, logits, target, stats, -100, 0.0, "mean"), None, None


def paths(x, t, g):
    xd = x.detach()

    def bare(check):
        loss, stats = OP(xd, t, -100, 0.0, "mean", check)
        return BACKWARD(g, xd, t, stats, -100, 0.0, "mean")
    return {
        "ops": lambda check: torch.autograd.grad(ops.cross_entropy(x, t, check_target=check), [x], g),
        "function": lambda check: torch.autograd.grad(PyFunction.apply(x, t, check), [x], g),
        "bare": bare,
    }


def host_us(fn, reps=50) -> float:
    """Median host time of fn() while the GPU is busy behind a long sleep (nothing fn queues can make it wait)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="4096,32000")
    p.add_argument("--trace", metavar="DIR")
    args = p.parse_args()
    M, V = (int(s) for s in args.shape.split(","))
    copy = copy_gbps(torch.device("cuda"), time_cuda_events)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, [{M}, {V}], copy {copy:.0f} GB/s")
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(M, V, device="cuda", dtype=dtype, requires_grad=True)
        t = torch.randint(0, V, (M,), device="cuda")
        g = torch.ones((), device="cuda", dtype=dtype)
        nbytes = 3 * x.numel() * x.element_size()
        for name, fn in paths(x, t, g).items():
            row = [f"{str(dtype)[6:]:8s} {name:8s}"]
            for check in (True, False):
                us = time_cuda_events(lambda: fn(check))
                row.append(f"{'checked' if check else 'unchecked'} {us:7.1f} us {nbytes / us / 1e3 / copy * 100:5.1f}%")
            row.append(f"host {host_us(lambda: fn(False)):6.1f} us")
            print(" | ".join(row))
        if args.trace:
            from torch.profiler import ProfilerActivity, profile
            for name, fn in paths(x, t, g).items():
                if name == "function":
                    continue
                for _ in range(5):
                    fn(True)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for _ in range(6):
                        fn(True)
                    torch.cuda.synchronize()
                Path(args.trace).mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(f"{args.trace}/trace_{name}_{str(dtype)[6:]}.json")


if __name__ == "__main__":
    main()
