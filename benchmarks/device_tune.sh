#!/usr/bin/env bash
# Tuning of the row ops' register path in one device call: device_ab.sh without a baseline tree. Builds, runs the CUDA
# tests selected by TESTS_K (pytest -k), then times myops alone under the defaults and each configuration in CONFIGS
# (space-separated, each a comma-separated list of MYOPS_ settings without the prefix; "-" = the defaults), e.g.
# CONFIGS="- ROW_STAGE=2 ROW_STAGE=0,ROW_CLUSTER=4"; NVCC_FLAGS=-DMYOPS_LN_FUSED=0 builds a kernel variant (its own
# kernel library; the registration layer is shared). OPS (default rms_norm,layer_norm,softmax,cross_entropy) and
# BENCH_ARGS (default --variants-only) select the timed cases.
# Usage (device tool, from the checkout): TESTS_K="cluster or vocab" CONFIGS="- ROW_STAGE=0" bash benchmarks/device_tune.sh
set -uo pipefail
BASE= BENCH_ARGS="--ops ${OPS:-rms_norm,layer_norm,softmax,cross_entropy} ${BENCH_ARGS:---variants-only}" \
  exec bash "$(dirname "$0")/device_ab.sh"
