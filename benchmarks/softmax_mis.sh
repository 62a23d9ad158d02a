#!/usr/bin/env bash
# One device call: softmax's and log_softmax's misaligned rows (odd N: GPT-2's vocabulary of 50257, odd key lengths).
# Builds, runs their test_misaligned_rows and test_misaligned_layouts (in subprocesses, one per MYOPS_SOFTMAX_MIS mode),
# then times the modes (csrc/cuda/softmax.cuh, mis_mode): 0 the rows.cuh engine, 1 one CTA a row (mis_fwd_kernel,
# mis_bwd_kernel) and the engine past them, 2 clusters past them, 3 clusters first, 4 (default) one CTA streaming the
# row twice past them (st_fwd_kernel, st_bwd_kernel), 5 streaming every forward row past 4 vectors a thread; a mode with
# "_online" runs the forward's statistics as the online pair (MYOPS_SOFTMAX_MIS_2P=0), "_512" / "_1024" the streaming
# kernels on CTAs of that many threads for every dtype (MYOPS_SOFTMAX_ST_THREADS; default 512 for fp32, 1024 for
# 16-bit), "_warprow" short rows on a warp each, not the fewest lanes of 4-16 (MYOPS_SOFTMAX_MIS_SUBWARP=0), "_sub16" on
# 16 lanes (16-bit) or 8 (fp32) (=1), "_ns4" / "_ns2" / "_ns1" at 4 / 2 / 1 vectors a lane in both passes
# (MYOPS_SOFTMAX_MIS_SUBNS). Forward and forward+backward, bf16 and fp32, myops alone, then the default and mode 2
# against eager and torch.compile at [4096, 50257] and [65536, 1001].
# Usage (device tool, from the checkout): bash benchmarks/softmax_mis.sh 2>&1 | tee $OUT/mis.log (the reply keeps only
# the output's last 12000 characters); SHAPES replaces the list of shapes, MODES the modes (e.g. MODES="2 4 4_512");
# TESTS=0 skips the tests, COMPARE=0 the comparison with eager and torch.compile. All of it takes over 10 minutes: split
# it over calls (a run of one mode and shape takes about 14 s on the H200).
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
  for m in ${MODES-0 1 2 3 4 5 1_online 4_512 4_1024 4_warprow 4_sub16}; do
    env=("MYOPS_SOFTMAX_MIS=${m%%_*}")
    [[ $m == *_online* ]] && env+=(MYOPS_SOFTMAX_MIS_2P=0)
    [[ $m == *_512* ]] && env+=(MYOPS_SOFTMAX_ST_THREADS=512)
    [[ $m == *_1024* ]] && env+=(MYOPS_SOFTMAX_ST_THREADS=1024)
    [[ $m == *_warprow* ]] && env+=(MYOPS_SOFTMAX_MIS_SUBWARP=0)
    [[ $m == *_sub16* ]] && env+=(MYOPS_SOFTMAX_MIS_SUBWARP=1)
    [[ $m == *_ns4* ]] && env+=(MYOPS_SOFTMAX_MIS_SUBNS=4)
    [[ $m == *_ns2* ]] && env+=(MYOPS_SOFTMAX_MIS_SUBNS=2)
    [[ $m == *_ns1* ]] && env+=(MYOPS_SOFTMAX_MIS_SUBNS=1)
    run "mis$m" "$s" myops "${env[@]}"
  done
done
for s in $([ "${COMPARE:-1}" = 1 ] && echo 4096,50257 65536,1001); do
  run default "$s" myops,eager,compile
  run mis2 "$s" myops,eager,compile MYOPS_SOFTMAX_MIS=2
done
echo "-- $(( $(date +%s) - t0 )) s"
