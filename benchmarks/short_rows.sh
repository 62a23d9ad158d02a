#!/usr/bin/env bash
# One device call: the row ops over many short rows (attention-softmax and small-head shapes), where a kernel sized
# for [16384, 4096] can leave most lanes idle: softmax, log_softmax, layer_norm, rms_norm and sum(dim=-1), bf16,
# forward and forward+backward, myops against torch.compile, at [1048576, 128], [262144, 512] and [65536, 2048];
# then sum's short rows on a warp a row (MYOPS_SUM_MIN_TPR=32) against 4 (the default) and 16 threads a row,
# with its short-row tests first.
# Usage (device tool, from the checkout): bash benchmarks/short_rows.sh; SHAPES / OPS / DTYPES replace the lists.
set -uo pipefail
source "$(dirname "$0")/device_build.sh"
timeout 200 python -m pytest tests/test_sum.py -m cuda -q -p no:cacheprovider -k "short or full_pass" 2>&1 | tail -3
for s in ${SHAPES:-1048576,128 262144,512 65536,2048}; do
  python benchmarks/bench.py --ops "${OPS:-softmax,log_softmax,layer_norm,rms_norm,sum}" --cases default,dim=-1 \
    --dtypes "${DTYPES:-bf16}" --impls myops,compile --shape "$s" 2>&1 | grep -E "myops |compile |Error|FAIL" |
    grep -v "^myops:"
done
for s in 1048576,128 262144,512 1048576,64; do
  for t in 32 4 16; do
    MYOPS_SUM_MIN_TPR=$t python benchmarks/bench.py --ops sum --cases dim=-1 --dtypes bf16,fp32 --impls myops \
      --shape "$s" 2>&1 | grep -E "myops |Error|FAIL" | grep -v "^myops:" | sed "s/^/min_tpr$t /"
  done
done
echo "-- $(( $(date +%s) - t0 )) s"
