# Sourced by the one-call device scripts (ce_short.sh, short_rows.sh, ce_policy.sh): the environment they run in
# (the checkout on PYTHONPATH, a build cache, sm_90, unbuffered output, $OUT), the GPU's name, then the build (its log
# in $OUT/build.log, its tail and exit 1 on failure) and its seconds. Sets t0, the start, for the caller's total.
export PYTHONPATH=. MYOPS_CACHE_DIR=${MYOPS_CACHE_DIR:-/tmp/myops-cache} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
