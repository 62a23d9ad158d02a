#!/usr/bin/env bash
# One device call for cross_entropy's row shapes off its [4096, 32000] case: many short rows and misaligned rows
# (csrc/cuda/cross_entropy.cu). Builds, runs the cross_entropy and vmap CUDA tests, then times (unchecked target,
# reduction "mean", myops alone, bf16 unless said)
# - the backward's flat kernel (MYOPS_CE_BWD_FLAT=1, the default: rows under 1024 vectors) against its row-chunk
#   kernel (=0), forward+backward, over row lengths 128 to 32000 (and fp32 on three);
# - the loss's reduction in parts (MYOPS_CE_PARTS=1, the default) against one CTA (=0) near the parts' threshold;
# - fp32 short rows on a warp per row (MYOPS_CE_FOLD32=0) against the fold kernel (=1, the default; =2 at 4, 8 and
#   16 threads a row);
# - misaligned rows (odd C) on the rows.cuh engine (MYOPS_CE_MISALIGNED=0) against the fold forward and the packed
#   or row-chunk backward (=1, the default), bf16 and fp32; the packed backward's two forms (MYOPS_CE_PACKED_BWD=3,
#   per element, and 2, SEG) beside the default's choice (1);
# - bf16 short rows' forward on the fold kernel at 4 threads a row and 2 (MYOPS_CE_FOLD_TPR; the default: 2 up to
#   128 bytes);
# - the defaults against eager PyTorch and torch.compile on four shapes.
# Usage (device tool, from the checkout): bash benchmarks/ce_short.sh; SHAPES="131072,512 65536,2048" replaces the
# bf16 list, F32_SHAPES the fp32 one, PARTS_SHAPES, FOLD32_SHAPES, MIS_SHAPES, TPR2_SHAPES and PACKED_SHAPES the
# others (empty: none); TESTS=0 skips the tests, COMPARE=0 the comparison.
set -uo pipefail
source "$(dirname "$0")/device_build.sh"
if [ "${TESTS:-1}" = 1 ]; then
  MYOPS_HYPOTHESIS_PROFILE=ci timeout 420 python -m pytest tests/test_cross_entropy.py tests/test_batching.py -m cuda \
    -q -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
run() {  # label shape dtypes impls [env...]
  local label=$1 shape=$2 dtypes=$3 impls=$4; shift 4
  env "$@" python benchmarks/bench.py --ops cross_entropy --cases unchecked --impls "$impls" --shape "$shape" \
    --dtypes "$dtypes" 2>&1 | grep -E "myops|eager|compile|Error|FAIL" | grep -v "^myops:" | sed "s/^/$label /"
}
BF16_DEFAULT="1048576,128 524288,256 131072,512 262144,1000 65536,1024 65536,2048 16384,4096 8192,8192 4096,32000"
for s in ${SHAPES-$BF16_DEFAULT}; do
  for f in 0 1; do run "flat$f" "$s" bf16 myops MYOPS_CE_BWD_FLAT=$f; done
done
for s in ${F32_SHAPES-262144,1000 65536,2048 16384,4096}; do
  for f in 0 1; do run "flat$f" "$s" fp32 myops MYOPS_CE_BWD_FLAT=$f; done
done
for s in ${PARTS_SHAPES-16384,512 32768,512 16384,4096}; do
  for p in 0 1; do run "parts$p" "$s" bf16 myops MYOPS_CE_PARTS=$p; done
done
for s in ${FOLD32_SHAPES-1048576,128 524288,256 131072,512}; do  # fp32 short rows: a warp per row against the fold
  for f in 0 1; do run "fold32_$f" "$s" fp32 myops MYOPS_CE_FOLD32=$f; done
  for t in 4 8 16; do run "fold32_tpr$t" "$s" fp32 myops MYOPS_CE_FOLD32=2 MYOPS_CE_FOLD_TPR=$t; done
done
for s in ${MIS_SHAPES-4096,50257 65536,1001 8192,8195}; do  # misaligned rows: the rows.cuh engine against the fold
  for m in 0 1; do run "mis$m" "$s" bf16,fp32 myops MYOPS_CE_MISALIGNED=$m; done
done
for s in ${TPR2_SHAPES-1048576,128 1048576,64 524288,256}; do  # 16-bit short rows: the fold at 4 threads a row or 2
  for t in 4 2; do run "fold_tpr$t" "$s" bf16 myops MYOPS_CE_FOLD_TPR=$t; done
done
for s in ${PACKED_SHAPES-65536,1001 131072,2001 262144,127}; do  # short misaligned rows' backward: its two forms
  for p in 3 2 1; do run "packed$p" "$s" bf16,fp32 myops MYOPS_CE_PACKED_BWD=$p; done
done
if [ "${COMPARE:-1}" = 1 ]; then
  for s in 1048576,128 131072,512 262144,1000 65536,2048; do run default "$s" bf16 myops,eager,compile; done
fi
echo "-- $(( $(date +%s) - t0 )) s"
