#!/usr/bin/env bash
# One device call (about 3 minutes with the build): the norms' forward+backward at long rows with the pipelined
# backward (MYOPS_ROW_PIPE_BWD=1, the default) against the register long kernel (=0), shape by shape, to find where
# each wins on this device (BENCHMARKS.md session 38: on the H100, layer_norm bf16 N = 65536 84.9 pipelined against
# 86.5, N = 262144 84.9 against 79.5).
# Usage (device tool): OPS=layer_norm DTYPES=bf16 SHAPES="2730,24576 2048,32768 1365,49152 1024,65536" \
#   bash benchmarks/pipe_bwd_sweep.sh
set -uo pipefail
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MYOPS_CACHE_DIR=${MYOPS_CACHE_DIR:-/tmp/myops-cache} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
python -m torch_ops_jit build > /tmp/pipe_bwd_build.log 2>&1 || { tail -20 /tmp/pipe_bwd_build.log; exit 1; }
for s in ${SHAPES:-2730,24576 2048,32768 1365,49152 1024,65536}; do
  for p in 1 0; do
    MYOPS_ROW_PIPE_BWD=$p timeout 120 python benchmarks/bench.py --impls myops --ops "${OPS:-layer_norm}" \
      --dtypes "${DTYPES:-bf16}" --no-variants --shape "$s" --warmup-s 0.5 2>&1 | grep -E "fwd\+bwd|copy band" \
      | sed "s/^/pipe_bwd=$p /"
  done
done
