#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1 MYOPS_CACHE_DIR=/tmp/myops-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
python -m torch_ops_jit build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
timeout 60 python -m pytest tests/test_sum.py -q -p no:cacheprovider -k "full_pass_rows and cuda" 2>&1 | tail -1
if [[ "$gpu" == *H200* ]]; then
  python benchmarks/bench.py --ops rope --dtypes bf16 --cases '[S,H,D],heads_first' --no-backward --impls myops,compile 2>&1 | grep -E "myops|compile |copy band" | sed 's/^/on /'
  MYOPS_ROPE_PAIR=0 python benchmarks/bench.py --ops rope --dtypes bf16 --cases '[S,H,D],heads_first' --no-backward --impls myops 2>&1 | grep -E "myops|copy band" | sed 's/^/off /'
  python benchmarks/bench.py --ops layer_norm,rms_norm --dtypes bf16 --no-variants --no-backward --impls myops 2>&1 | grep -E "myops|copy band" | sed 's/^/on /'
fi
timeout 150 python -m pytest tests/test_layer_norm.py tests/test_rms_norm.py -m cuda -q -p no:cacheprovider 2>&1 | tail -2
