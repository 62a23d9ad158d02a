#!/usr/bin/env bash
# One device call for the row-wise ops: build, CUDA tests, then the benchmark (forward, forward+backward).
# Usage (device tool, from the checkout): bash benchmarks/device_rows.sh [bench args...]; logs go to $OUT.
# MYOPS_DEVICE_TESTS=0 skips the tests; KTIMES="bf16 fp32" prints per-kernel times; MYOPS_TUNE="128 256 512" also times the forward at those row thread counts
# (MYOPS_TUNE_BWD: forward+backward of the norms at backward row thread counts).
set -uo pipefail
export PYTHONPATH=. MYOPS_CACHE_DIR=/tmp/myops-cache TORCH_CUDA_ARCH_LIST=9.0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ROWOPS="rms_norm,add_rms_norm,layer_norm,softmax,log_softmax,cross_entropy"
if [ "${MYOPS_DEVICE_TESTS:-1}" != 0 ]; then
  tests=$(for o in ${ROWOPS//,/ }; do echo tests/test_$o.py; done)
  MYOPS_HYPOTHESIS_PROFILE=${PROFILE:-ci} timeout ${TEST_TIMEOUT:-300} python -m pytest $tests tests/test_nn.py -q -m cuda \
    -p no:cacheprovider -x > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -12 "$OUT/tests.log"
fi
for d in ${KTIMES:-}; do python benchmarks/kernel_times.py --dtype $d 2>&1 | tee -a "$OUT/ktimes.log"; done
for t in ${MYOPS_TUNE:-}; do
  echo "== MYOPS_ROW_THREADS=$t"
  MYOPS_ROW_THREADS=$t python benchmarks/bench.py --ops $ROWOPS --no-variants --no-backward --no-compile 2>&1 \
    | grep -E "myops" | tee -a "$OUT/tune.log"
done
for t in ${MYOPS_TUNE_BWD:-}; do
  echo "== MYOPS_ROW_THREADS_BWD=$t"
  MYOPS_ROW_THREADS_BWD=$t python benchmarks/bench.py --ops rms_norm,add_rms_norm,layer_norm --no-variants --no-compile \
    2>&1 | grep -E "fwd\+bwd +myops" | tee -a "$OUT/tune.log"
done
python benchmarks/bench.py --ops ${OPS:-$ROWOPS} --markdown "$OUT/bench.md" "$@" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; cat "$OUT/bench.log" | tail -${BENCH_TAIL:-80}
