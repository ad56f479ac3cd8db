#!/usr/bin/env bash
# Session 31, the smallest GPU check that matters (device time nearly spent): the changed fa2_wgmma backward's
# default and new paths, the decode kernels, kernels.attention with GQA. Logs under $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
python -m pip uninstall -y kernels > /dev/null 2>&1
t=$(date +%s); python3 lab/precompile_bwd.py --jobs 16 > "$OUT/precompile.log" 2>&1; echo "precompile rc=$? $(( $(date +%s) - t )) s"
run() { local name=$1 lim=$2; shift 2; local t=$(date +%s)
  timeout "$lim" python3 -m pytest -q -m gpu -x -rs -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s: $(tail -1 "$OUT/$name.log")"; grep -E "^E |FAILED|Error" "$OUT/$name.log" | head -12; }
run bwd ${L1:-100} tests/test_kernels_bwd_gpu.py -k "matches_float64 or every_head_dim or deterministic or views"
run decode ${L2:-50} tests/test_split_kv_gpu.py -k "fast_matches or edges or padding or counters"
run gqa ${L3:-50} tests/test_attention_gqa.py -k "attention_grouped_query_matches or deterministic"
