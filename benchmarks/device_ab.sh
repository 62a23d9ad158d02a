#!/usr/bin/env bash
# One device call to A/B the working tree against a baseline checkout in BASE (a directory inside the tree, e.g.
# `git archive HEAD | tar -x -C _base`, removed afterwards; unset: the working tree alone):
# 1. builds both trees;
# 2. runs the row ops' CUDA tests on the working tree (TESTS_K: a pytest -k expression, TESTS_EXTRA: more test files;
#    unset: no tests);
# 3. times myops alone, baseline and working tree alternately, ROUNDS times (bench.py arguments in BENCH_ARGS);
# 4. times the working tree under each entry of CONFIGS (space-separated, each a comma-separated list of MYOPS_
#    settings without the prefix, e.g. "ROW_STAGE=0,ROW_CLUSTER=4 NVCC_FLAGS=-DMYOPS_LN_FUSED=0"; a "+" in a value
#    is a space, for several flags: "NVCC_FLAGS=-DMYOPS_EW_FLAT_THREADS32=128+-DMYOPS_EW_FLAT_UNROLL32=2"; "-", the
#    defaults, is step 3's run; a new NVCC_FLAGS builds its own kernel library when the bench imports ops);
# 5. prints Nsight Compute's instruction count and time of each NCU entry ("op:shape:dtype:kernel-regex",
#    profile_rows.py) in both trees.
# Each tree times with its own bench.py: a BASE older than dc0d851 flushes L2 by zeroing and has no --flush (5-14
# points lower on small ops, BENCHMARKS.md session 32), so take a BASE of dc0d851 or later.
# Usage (device tool): BASE=_base BENCH_ARGS="--ops layer_norm --no-variants" bash benchmarks/device_ab.sh
set -uo pipefail
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
BASE=${BASE:-}  # unset: the working tree alone (its CONFIGS)
[ -n "$BASE" ] && (cd "$BASE" && MYOPS_CACHE_DIR=/tmp/base-cache python -m torch_ops_jit build \
  > "$OUT/build_base.log" 2>&1) &
MYOPS_CACHE_DIR=/tmp/myops-cache python -m torch_ops_jit build > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
[ -z "$BASE" ] || wait $! || { tail -30 "$OUT/build_base.log"; exit 1; }
if [ -n "${TESTS_K:-}" ]; then
  tests=$(for o in rms_norm add_rms_norm layer_norm softmax log_softmax cross_entropy; do echo tests/test_$o.py; done)
  MYOPS_CACHE_DIR=/tmp/myops-cache MYOPS_HYPOTHESIS_PROFILE=${PROFILE:-ci} timeout ${TEST_TIMEOUT:-300} \
    python -m pytest $tests ${TESTS_EXTRA:-} -q -m cuda -k "$TESTS_K" -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -15
fi
bench() {  # tree label [env...]
  local dir=$1 label=$2; shift 2
  (cd "$dir" && env MYOPS_CACHE_DIR=$([ "$dir" = . ] && echo /tmp/myops-cache || echo /tmp/base-cache) "$@" \
    python benchmarks/bench.py --impls myops ${BENCH_ARGS:-} 2>&1) | grep -E "myops|FAIL|Error|copy bandwidth" \
    | sed "s/^/$label /" | tee -a "$OUT/ab.log"
}
for i in $(seq ${ROUNDS:-1}); do
  [ -z "$BASE" ] || bench "$BASE" "base$i"
  bench . "new$i"
done
for c in ${CONFIGS:-}; do
  [ "$c" = "-" ] && continue
  envs=(); for kv in ${c//,/ }; do envs+=("MYOPS_${kv//+/ }"); done
  bench . "$c" "${envs[@]}"
done
for p in ${NCU:-}; do
  IFS=: read -r op shape dt kre <<< "$p"
  for d in $BASE .; do
    (cd "$d" && MYOPS_CACHE_DIR=$([ "$d" = . ] && echo /tmp/myops-cache || echo /tmp/base-cache) \
      MYOPS_PROF_SHAPE=$shape MYOPS_PROF_DTYPE=$dt timeout 120 ncu --print-summary none -k "regex:$kre" \
      --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      python benchmarks/profile_rows.py "$op" 2>&1) | grep -E "inst_executed|duration|dram__" | tail -3 \
      | sed "s/^/ncu $p $d /"
  done
done
