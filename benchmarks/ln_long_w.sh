#!/usr/bin/env bash
# One device call (about 2 minutes): benchmarks/ln_long_probe.cu built once for each MYOPS_LN_LONG_W (how
# layer_norm's fp32 long backward reads the weight, layer_norm.cu) and L2_NEXT given, run one after another.
# Usage (device tool): WS="0 1" L2S="1 2" bash benchmarks/ln_long_w.sh
set -uo pipefail
pids=()
for wb in ${WS:-0 1}; do
  for l2 in ${L2S:-1 2}; do
    nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc/cuda -Icsrc -DMYOPS_LN_LONG_W=$wb \
      -DMYOPS_LN_L2_NEXT=$l2 -o /tmp/lnp_${wb}_$l2 benchmarks/ln_long_probe.cu &
    pids+=($!)
  done
done
wait "${pids[@]}" || exit 1  # (the pids alone: a bare wait also waits for a caller's tee process substitution)
for wb in ${WS:-0 1}; do
  for l2 in ${L2S:-1 2}; do
    echo "== MYOPS_LN_LONG_W=$wb MYOPS_LN_L2_NEXT=$l2"
    timeout 60 /tmp/lnp_${wb}_$l2 ${PROBE_ARGS:-}
  done
done
