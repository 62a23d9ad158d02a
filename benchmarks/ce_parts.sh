#!/usr/bin/env bash
# One device call for cross_entropy's loss reduction over many rows (MYOPS_CE_PARTS, csrc/cuda/cross_entropy.cu):
# builds, runs the cross_entropy and vmap CUDA tests (test_loss_parts runs the parts in subprocesses), times the
# unchecked forward and forward+backward (reduction "mean") under MYOPS_CE_PARTS=0 (one CTA) and 1 (parts from
# M = 16384) on short-row shapes, then splits the forward of two of them into its kernels (ce_tail.py). Also times
# the label-smoothing forward, whose bf16 fold kernels no longer spill (session 51).
# Usage (device tool, from the checkout): bash benchmarks/ce_parts.sh; SHAPES="131072,512 65536,2048" narrows it.
set -uo pipefail
export PYTHONPATH=. MYOPS_CACHE_DIR=${MYOPS_CACHE_DIR:-/tmp/myops-cache} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
MYOPS_HYPOTHESIS_PROFILE=ci timeout 300 python -m pytest tests/test_cross_entropy.py tests/test_batching.py -m cuda -q \
  -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
run() {  # label shape dtypes cases [env...]
  local label=$1 shape=$2 dtypes=$3 cases=$4; shift 4
  env "$@" python benchmarks/bench.py --ops cross_entropy --cases "$cases" --impls myops --shape "$shape" \
    --dtypes "$dtypes" 2>&1 | grep -E "myops|Error|FAIL" | sed "s/^/$label /"
}
for s in ${SHAPES:-1048576,128 131072,512 262144,1000 65536,2048 16384,4096 4096,32000}; do
  for p in 0 1; do run "parts$p" "$s" bf16 unchecked MYOPS_CE_PARTS=$p; done
done
for s in 131072,512 65536,2048 4096,32000; do run smoothing "$s" bf16,fp16 "smoothing unchecked"; done
for p in 0 1; do
  MYOPS_CE_PARTS=$p python benchmarks/ce_tail.py --shapes 131072,512 1048576,128 --dtypes bf16 2>&1 | sed "s/^/parts$p /"
done
echo "-- $(( $(date +%s) - t0 )) s"
