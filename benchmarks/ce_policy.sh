#!/usr/bin/env bash
# One device call that times cross_entropy's forward kernels against each other on many row shapes, so that the
# policy choosing between them (ce_fwd_tpr and ce_cluster in csrc/cuda/cross_entropy.cu) can be checked on the
# device at hand: for every shape and dtype, the default, then each kernel forced by its knob:
#   stream  MYOPS_CE_WARP=0 MYOPS_CE_BULK=0   a CTA per row through registers (stream_fwd_kernel)
#   bulk    MYOPS_CE_BULK=2                   a CTA per row copied whole into shared memory (rows up to 64 KB;
#                                             longer rows stay on the stream kernel, or its clusters)
#   warp    MYOPS_CE_WARP=2                   a warp per row (stream_fwd_kernel's SUB = 32)
#   tpr64   MYOPS_CE_TPR=64                   64 threads a row, 4 rows a CTA (SUB = 64)
#   tpr128  MYOPS_CE_TPR=128                  128 threads a row, 2 rows a CTA (SUB = 128)
# Unchecked forward (the target check and its host wait aside), % of the copy bandwidth timed in the same process.
# Usage (device tool, from the checkout): bash benchmarks/ce_policy.sh; SHAPES="4096,32000 16384,8192" and
# DTYPES="bf16 fp32" narrow it, ROUNDS=2 repeats it; the table goes to stdout and $OUT/ce_policy.log. About 7 s a
# bench process: the defaults (98 of them) take about 13 minutes with the build, over the device's 10-minute limit
# for one call: narrow SHAPES or DTYPES.
set -uo pipefail
source "$(dirname "$0")/device_build.sh"
SHAPES=${SHAPES:-"4096,32000 16384,32000 4096,50304 16384,8192 65536,2048 4096,65536 1024,262144"}
DTYPES=${DTYPES:-"bf16 fp32"}
run() {  # label shape dtype [env...]: one bench process, its myops row
  local label=$1 shape=$2 dtype=$3; shift 3
  env "$@" python benchmarks/bench.py --ops cross_entropy --cases unchecked --no-backward --impls myops \
    --shape "$shape" --dtypes "$dtype" 2>&1 | grep -E "myops|Error" | awk -v l="$label" '{print l, $0}'
}
for r in $(seq ${ROUNDS:-1}); do
  for s in $SHAPES; do
    for d in $DTYPES; do
      run default "$s" "$d"
      run stream "$s" "$d" MYOPS_CE_WARP=0 MYOPS_CE_BULK=0
      run bulk "$s" "$d" MYOPS_CE_BULK=2
      run warp "$s" "$d" MYOPS_CE_WARP=2
      run tpr64 "$s" "$d" MYOPS_CE_TPR=64
      run tpr128 "$s" "$d" MYOPS_CE_TPR=128
    done
  done
done | tee "$OUT/ce_policy.log"
python benchmarks/bench.py --ops cross_entropy --cases unchecked --no-backward --impls myops --dtypes bf16 2>&1 \
  | grep "copy bandwidth"
