#!/usr/bin/env bash
# One device call: the norms at model widths (hidden sizes 2560-16384, about 64M elements a tensor as [16384, 4096]).
# Builds, runs layer_norm's and rms_norm's wide-row CUDA tests (test_wide_rows at every width, and under
# MYOPS_LN_WIDE=2 / MYOPS_RMS_WIDE=2 and MYOPS_ROW_BWD_SPLIT=0 in subprocesses), then times (bf16 unless said, myops
# alone, forward and forward+backward):
# - layer_norm: the default (the one-row-per-CTA kernel at a run-time width up to 8192, the register kernel beyond)
#   against the one-row-per-CTA kernel at every width (MYOPS_LN_WIDE=2) and the register kernel (MYOPS_LN_WIDE=0
#   leaves N = 4096's own kernels too) aimed at 256 threads a row (MYOPS_ROW_THREADS=256);
# - rms_norm: the register kernel (the default off N = 4096) against MYOPS_RMS_WIDE=2;
# - the norms' 16-bit backward at these widths: rows of over 256 threads split over a cluster of CTAs of at most 256
#   (the default) against one CTA of up to 512 (MYOPS_ROW_BWD_SPLIT=0), layer_norm's register backward at one vector
#   a thread (MYOPS_LN_BWD_NS=1); (the long-row
#   backward, MYOPS_ROW_LONG_BWD, takes only rows that need a cluster: over 16384 elements; MYOPS_ROW_THREADS_BWD
#   moves none of these rows' geometries);
# - the defaults of layer_norm, rms_norm and add_rms_norm against torch.compile (COMPARE=0 skips it).
# Usage (device tool, from the checkout): bash benchmarks/widths.sh; WIDTHS / RMS_WIDTHS / BWD_WIDTHS /
# COMPARE_WIDTHS replace the lists (empty: none), DTYPES the dtypes; TESTS=0 skips the tests. All of it takes about
# 10 minutes: split it over two calls, e.g. BWD_WIDTHS= COMPARE=0, then TESTS=0 WIDTHS= RMS_WIDTHS=.
set -uo pipefail
source "$(dirname "$0")/device_build.sh"
if [ "${TESTS:-1}" = 1 ]; then
  MYOPS_HYPOTHESIS_PROFILE=ci timeout 400 python -m pytest tests/test_layer_norm.py tests/test_rms_norm.py -m cuda -q \
    -p no:cacheprovider -k "wide_rows or backward_unsplit" > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
shape() { echo "$(( 67108864 / $1 )),$1"; }  # rows of N elements, about 64M elements in all
run() {  # label op N impls [env...]
  local label=$1 op=$2 n=$3 impls=$4; shift 4
  env "$@" python benchmarks/bench.py --ops "$op" --no-variants --impls "$impls" --shape "$(shape "$n")" \
    --dtypes "${DTYPES:-bf16}" 2>&1 | grep -E "myops |eager |compile |Error|FAIL" | grep -v "^myops:" |
    sed "s/^/$label /"
}
for n in ${WIDTHS-2560 3072 5120 7168 8192 12288 16384}; do
  run default layer_norm "$n" myops
  run ln_wide2 layer_norm "$n" myops MYOPS_LN_WIDE=2
  run threads256 layer_norm "$n" myops MYOPS_LN_WIDE=0 MYOPS_ROW_THREADS=256
done
for n in ${RMS_WIDTHS-5120 7168 12288}; do
  run default rms_norm "$n" myops
  run rms_wide2 rms_norm "$n" myops MYOPS_RMS_WIDE=2
done
for n in ${BWD_WIDTHS-5120 8192 12288}; do
  run default layer_norm,rms_norm "$n" myops
  run ROW_BWD_SPLIT=0 layer_norm,rms_norm "$n" myops MYOPS_ROW_BWD_SPLIT=0
  run LN_BWD_NS=1 layer_norm "$n" myops MYOPS_LN_BWD_NS=1
done
if [ "${COMPARE:-1}" = 1 ]; then
  for n in ${COMPARE_WIDTHS-3072 8192}; do run default layer_norm,rms_norm,add_rms_norm "$n" myops,compile; done
fi
echo "-- $(( $(date +%s) - t0 )) s"
