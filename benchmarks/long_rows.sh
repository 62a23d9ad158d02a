#!/usr/bin/env bash
# One device call: the existing runtime knobs on the long rows the H200 leaves under the issue's targets (session 58:
# layer_norm N = 65536 / 262144, rms_norm 262144, add_rms_norm 65536, softmax and log_softmax 262144). Builds once, then
# per (op, setting) one process of `bench.py --ops OP --dtypes bf16,fp32 --impls myops --cases N=65536,N=262144`
# (shapes [1024, 65536] and [256, 262144]), each row printed as "label op N dtype pass us %copy". Changes no default:
# every setting is an environment variable of that one process.
# Why these settings (H200: 132 SMs, clusters of a GPC; BENCHMARKS.md session 23, cudaOccupancyMaxActiveClusters):
# clusters of 4 or 8 CTAs run on 120-124 SMs, of 16 on 112 (7 clusters at one 512-thread CTA an SM, 14 at two),
# so 256 rows of 262144 are 17-37 rounds of a persistent grid whose last round is partly idle, and the H200's 32 GB/s
# of copy bandwidth an SM (the H100's 23: 4.27 and 3.0 TB/s over 132 SMs) wants more bytes in flight an SM than the
# H100, where the kernels were last chosen. Most promising first; pairs run adjacent (default, then the setting) to
# cancel drift.
# - ROW_PIPE_BWD=0 (layer_norm, rms_norm): the 16-bit backward on rr_bwd_long_kernel (the next row in registers,
#   dw/db sums in shared memory) instead of the bulk-copy pipeline; same cluster (4 x 512 at N = 65536, 16 x 512 at
#   262144, one CTA an SM). The H100 took it (session 39: layer_norm 65536 +1.9, rms_norm 262144 +0.7); the H200
#   was last compared in session 14, against an older long kernel. Targets layer_norm bf16 65536 fwd+bwd (80.4) and
#   rms_norm bf16 262144 fwd+bwd (84.1). Run twice.
# - ROW_LONG_FWD_NS=4 (layer_norm): bf16 262144's forward at 4 vectors, 16 x 512 at two CTAs an SM (14 clusters,
#   19 rounds) instead of 8 x 512 at one (15 clusters, 18 rounds: 256 = 15 x 17 + 1); session 11's 62.7 against
#   77.8 predates session 20's one cluster exchange a row at 4 vectors (the exchanges are what a 16-CTA row pays
#   for). Every other cell is the default's (a second default sample). Last: both layer_norm 65536 settings at once.
# - ROW_LONG_FWD_NS=8 (layer_norm): bf16 65536's forward (89.7) on 2 x 512 at one CTA an SM, 66 clusters on all 132
#   SMs, against 4 x 512 at two, 62 clusters on 124 (fp32 65536: 4 x 512 at one against 8 x 512 at two); session
#   11's 76.5 against 79.0 predates sessions 19-20.
# - L2_LAST_MB=100000 (softmax, log_softmax, layer_norm): streamed loads without the evict_last policy. Never timed
#   on the fp32 pipelined forward of 262144 (softmax 75.9, log_softmax 85.4: 7 clusters of 16, 37 rounds), on the
#   fp32 backward there (16 x 512, a row a cluster) or on layer_norm's 262144 forward: 128-256 MB an operand, 2.5-5x
#   the 50 MB L2, whose evict_last lines are then never read again.
# - ROW_CLUSTER=4 (add_rms_norm): bf16 65536's forward (89.8) on 4 x 256 threads of 8 vectors instead of 2 x 512 (two
#   or three CTAs an SM instead of one); no other cell of the op changes geometry (the others take 4 or more CTAs).
# Not repeated (measured and rejected on the H200): ROW_CLUSTER_CTA=512 and ROW_STAGE=2 for softmax's bf16 forward at
# 262144 (session 21: 79.2 -> 75.6, 79.1 -> 76.4), ROW_PIPE_FWD=0/2 and ROW_PIPE_LAG=2/3 (session 18),
# add_rms_norm's long forward at 4 vectors (spills: 80.8 against 87.0, regrow.cuh). ROW_PIPE_LAG reaches softmax's
# pipelined forward only (the norms' pipelined backward runs one row ahead, fixed: session 38's even H100 numbers).
# No geometry knob reaches the fp32 norms' 262144 rows (16 x 512 in either kernel), and none is left untried for
# softmax's bf16 forward there (16 x 256, 28 clusters, 256 rows in 10 waves of a grid that is not persistent).
# Usage (device tool, from the checkout): bash benchmarks/long_rows.sh 2>&1 | tee $OUT/long_rows.log (every
# process's full table, one after another, in $OUT/long_rows.txt: one file, as the device tool returns few). RUNS
# replaces the list: space-separated OP:SETTINGS, SETTINGS a
# comma-separated list of MYOPS_ variables without the prefix, "-" the defaults, e.g.
# RUNS="layer_norm:- layer_norm:ROW_PIPE_BWD=0,ROW_LONG_FWD_NS=8". BUDGET (default 430 s from the build's start)
# stops starting processes, LIMIT (450 s) kills the whole script. 18 processes of about 10-15 s each after an ~80 s
# build: about 5-6 minutes.
set -uo pipefail
if [ -z "${LONG_ROWS_GUARD:-}" ]; then  # the whole call under one limit, its children included
  LONG_ROWS_GUARD=1 exec timeout -k 10 "${LIMIT:-450}" bash "$0" "$@"
fi
source "$(dirname "$0")/device_build.sh"
deadline=$(( t0 + ${BUDGET:-430} ))
raw=$(mktemp)
DEFAULT_RUNS="layer_norm:- layer_norm:ROW_PIPE_BWD=0 rms_norm:- rms_norm:ROW_PIPE_BWD=0
  layer_norm:ROW_LONG_FWD_NS=4 layer_norm:ROW_LONG_FWD_NS=8
  softmax:- softmax:L2_LAST_MB=100000 log_softmax:- log_softmax:L2_LAST_MB=100000
  add_rms_norm:- add_rms_norm:ROW_CLUSTER=4 layer_norm:L2_LAST_MB=100000
  layer_norm:ROW_PIPE_BWD=0 layer_norm:- rms_norm:ROW_PIPE_BWD=0 rms_norm:-
  layer_norm:ROW_PIPE_BWD=0,ROW_LONG_FWD_NS=8"
n=0
for r in ${RUNS-$DEFAULT_RUNS}; do
  op=${r%%:*} cfg=${r#*:}
  n=$((n + 1))
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 25 ]; then echo "-- budget spent: skipped run $n on ($r)"; continue; fi
  env=()
  [ "$cfg" != - ] && for kv in ${cfg//,/ }; do env+=("MYOPS_$kv"); done
  label=$([ "$cfg" = - ] && echo default || echo "$cfg")
  env ${env[@]+"${env[@]}"} timeout "$(( left < 90 ? left : 90 ))" python benchmarks/bench.py --ops "$op" \
    --dtypes bf16,fp32 --impls myops --cases N=65536,N=262144 > "$raw" 2>&1
  rc=$?
  { echo "== run $n: $op $label (rc $rc)"; cat "$raw"; } >> "$OUT/long_rows.txt"
  # bench.py's rows: op shape dtype pass impl us GB/s %copy peak-MB; printed: label op N dtype pass us %copy
  awk -v l="$label" '$5 == "myops" { split($1, a, /[(=)]/)
    printf "%-18s %-12s %6s %-4s %-7s %8s %6s\n", l, a[1], a[3], $3, $4, $6, $8 }' "$raw"
  grep -E "FAIL|Error|Traceback" "$raw" | head -5 | sed "s/^/$label /"
  [ "$rc" != 0 ] && echo "$label ($op): rc=$rc"
done
echo "-- $(( $(date +%s) - t0 )) s"
