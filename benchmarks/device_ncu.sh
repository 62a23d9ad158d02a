#!/usr/bin/env bash
# One device call of Nsight Compute over row-op kernels: build, then for each PROFILES entry
# "op:shape:dtype:kernel-regex" (op as in profile_rows.py) the third launch of the matching kernel in the op's three
# profiled calls (its last call's, for a regex that matches one kernel a call),
# with the sections below; per-profile reports go to $OUT/ncu_<i>.txt, a digest of the key metrics to stdout.
# SOURCE=1 also writes each profile's executed instructions per SASS instruction (SourceCounters) to $OUT/src_<i>.csv,
# for benchmarks/sass_profile.py.
# Usage (device tool): PROFILES="layer_norm:16384,4096:bf16:rr_fwd layer_norm_backward:16384,4096:bf16:rr_bwd" \
#   bash benchmarks/device_ncu.sh
set -uo pipefail
export PYTHONPATH=. MYOPS_CACHE_DIR=/tmp/myops-cache TORCH_CUDA_ARCH_LIST=9.0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
# the warp stall reasons, per issued instruction
STALLS=$(for k in long_scoreboard short_scoreboard barrier membar wait lg_throttle \
    math_pipe_throttle mio_throttle not_selected selected drain dispatch_stall \
    no_instruction branch_resolving sleeping imc_miss tex_throttle; do
  printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $k; done)
STALLS=${STALLS%,}
DIGEST="^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Occupancy"
DIGEST="$DIGEST|Block Size|Grid Size|Cluster Size|No Eligible|Eligible Warps|Warp Cycles Per Issued|Dynamic Shared"
DIGEST="$DIGEST|Block Limit|stalled"
i=0
for p in ${PROFILES}; do
  IFS=: read -r op shape dt kre <<< "$p"
  i=$((i + 1))
  echo "== $i $op $shape $dt ($kre)"
  # profile_rows.py's three timed calls run inside a profiler range, after its setup and warm-up (which for a
  # torch.compile entry launch a varying number of kernels: compiling, autotuning): the third matching launch there
  MYOPS_PROF_SHAPE=$shape MYOPS_PROF_DTYPE=$dt timeout 180 ncu --profile-from-start off -k "regex:$kre" \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics "$STALLS" \
    python benchmarks/profile_rows.py "$op" > "$OUT/ncu_$i.txt" 2>&1
  grep -E "$DIGEST" \
    "$OUT/ncu_$i.txt" | head -40
  if [ -n "${SOURCE:-}" ]; then
    MYOPS_PROF_SHAPE=$shape MYOPS_PROF_DTYPE=$dt timeout 180 ncu --profile-from-start off -k "regex:$kre" \
      --launch-skip 2 --launch-count 1 --section SourceCounters -f -o /tmp/src_$i \
      python benchmarks/profile_rows.py "$op" > "$OUT/src_$i.log" 2>&1
    ncu -i /tmp/src_$i.ncu-rep --page source --csv --print-source sass > "$OUT/src_$i.csv" 2>> "$OUT/src_$i.log"
    echo "source counters: $(wc -l < "$OUT/src_$i.csv") lines"; tail -3 "$OUT/src_$i.log"
  fi
done
