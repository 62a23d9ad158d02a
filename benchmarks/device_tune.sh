#!/usr/bin/env bash
# One device call to check and tune the row ops' register path: build, the CUDA tests selected by TESTS_K (pytest -k),
# then myops-only timings of the row ops under each configuration in CONFIGS: space-separated, each a comma-separated
# list of MYOPS_ settings without the prefix ("-" = the defaults), e.g. CONFIGS="- ROW_STAGE=2 ROW_STAGE=0,ROW_CLUSTER=4";
# NVCC_FLAGS=-DMYOPS_LN_FUSED=0 builds a kernel variant (its own kernel library; the registration layer is shared).
# Usage (device tool, from the checkout): TESTS_K="cluster or vocab" CONFIGS="- ROW_STAGE=0" bash benchmarks/device_tune.sh
set -uo pipefail
export PYTHONPATH=. MYOPS_CACHE_DIR=/tmp/myops-cache TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ROWOPS="rms_norm,add_rms_norm,layer_norm,softmax,log_softmax,cross_entropy"
if [ -n "${TESTS_K:-}" ]; then
  tests=$(for o in ${ROWOPS//,/ }; do echo tests/test_$o.py; done)
  MYOPS_HYPOTHESIS_PROFILE=${PROFILE:-ci} timeout ${TEST_TIMEOUT:-300} python -m pytest $tests -q -m cuda -k "$TESTS_K" \
    -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed|Error|error" "$OUT/tests.log" | tail -15
fi
for c in ${CONFIGS:--}; do
  echo "== $c"
  envs=(); [ "$c" = "-" ] || for kv in ${c//,/ }; do envs+=("MYOPS_$kv"); done
  env "${envs[@]}" python benchmarks/bench.py --ops ${OPS:-rms_norm,layer_norm,softmax,cross_entropy} --impls myops ${BENCH_ARGS:---variants-only} \
    2>&1 | grep -E "myops|FAIL|Error|copy bandwidth" | tee -a "$OUT/tune.log"
done
