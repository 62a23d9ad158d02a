#!/usr/bin/env bash
# One device call: softmax's and log_softmax's misaligned rows (odd N: GPT-2's vocabulary of 50257, odd key lengths).
# Builds, runs their test_misaligned_rows and test_misaligned_layouts (mis_fwd_kernel and mis_bwd_kernel, and the
# engine, in subprocesses), then times the rows.cuh engine (MYOPS_SOFTMAX_MIS=0) against those kernels (=1, the
# default), against =2 (longer rows over clusters: fp32 50257 and 32769, 16-bit backward of 50257 and 32769) and =3
# (clusters for every row of over 512 threads at 4 vectors: 16-bit 50257's forward on 4 CTAs, not 1 of 8 vectors),
# and =1 / =3 with MYOPS_SOFTMAX_MIS_2P=1 (the forward's statistics in two exact passes, not the online pair),
# forward and forward+backward, bf16 and fp32, myops alone, then all three against eager and torch.compile at
# [4096, 50257] and [65536, 1001].
# Usage (device tool, from the checkout): bash benchmarks/softmax_mis.sh 2>&1 | tee $OUT/mis.log (the reply keeps only
# the output's last 12000 characters); SHAPES replaces the list; TESTS=0 skips the tests, COMPARE=0 the comparison
# with eager and torch.compile. All of it takes over 10 minutes: split it over two calls, e.g.
# SHAPES="4096,50257 65536,1001 262144,127" COMPARE=0, then TESTS=0 SHAPES="16384,4095 2048,32769".
set -uo pipefail
source "$(dirname "$0")/device_build.sh"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python -m pytest tests/test_softmax.py tests/test_log_softmax.py -m cuda -q -p no:cacheprovider \
    -k misaligned > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
run() {  # label shape impls [env...]
  local label=$1 shape=$2 impls=$3; shift 3
  env "$@" python benchmarks/bench.py --ops softmax,log_softmax --no-variants --impls "$impls" \
    --shape "$shape" --dtypes bf16,fp32 2>&1 | grep -E "myops |eager |compile |Error|FAIL" | grep -v "^myops:" |
    sed "s/^/$label /"
}
for s in ${SHAPES-4096,50257 65536,1001 262144,127 16384,4095 2048,32769}; do
  for m in 0 1 2 3; do run "mis$m" "$s" myops "MYOPS_SOFTMAX_MIS=$m"; done
  run mis3_2p "$s" myops MYOPS_SOFTMAX_MIS=3 MYOPS_SOFTMAX_MIS_2P=1
  run mis1_2p "$s" myops MYOPS_SOFTMAX_MIS=1 MYOPS_SOFTMAX_MIS_2P=1
done
for s in $([ "${COMPARE:-1}" = 1 ] && echo 4096,50257 65536,1001); do
  run mis0 "$s" myops,eager,compile MYOPS_SOFTMAX_MIS=0
  run default "$s" myops,eager,compile
  run mis2 "$s" myops,eager,compile MYOPS_SOFTMAX_MIS=2
done
echo "-- $(( $(date +%s) - t0 )) s"
