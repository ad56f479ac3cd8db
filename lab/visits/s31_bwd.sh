#!/usr/bin/env bash
# Session 31 visit A: issue 42's backward coverage (fa2_wgmma GQA/strided/d=96/256/deterministic) and its client
# (kernels.attention GQA, teaching fa2 GQA, the transformers adapter). Logs under $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt"
python -m pip uninstall -y kernels > /dev/null 2>&1  # HF's `kernels` shadows ours (see kernels/hf.py)
t0=$(date +%s)
(python3 -m bench.bench_tc precompile --jobs 8 & python3 lab/precompile_bwd.py --jobs 8; wait) > "$OUT/precompile.log" 2>&1
echo "precompile $(( $(date +%s) - t0 )) s"
run() {  # name limit pytest-args...
  local name=$1 lim=$2; shift 2; local t=$(date +%s)
  timeout "$lim" python3 -m pytest -q -m gpu -rs -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s: $(tail -1 "$OUT/$name.log")"
}
run bwd_gpu ${LIM_BWD:-260} tests/test_kernels_bwd_gpu.py --maxfail=3 ${BWD_K:+-k "$BWD_K"}
run client_gpu ${LIM_CLIENT:-200} tests/test_attention_gqa.py tests/test_hf_adapter.py tests/test_kernels_backward.py --maxfail=5 -s
grep -E "FAILED|Error|error" "$OUT/bwd_gpu.log" | head -20
grep -E "FAILED|Error|loss|step" "$OUT/client_gpu.log" | head -30
run decode_gpu ${LIM_DECODE:-150} tests/test_split_kv_gpu.py --maxfail=3
grep -E "FAILED|Error" "$OUT/decode_gpu.log" | head -20
run decode_ref 120 tests/test_split_kv_kernels_vs_reference_gpu.py --maxfail=3
# SANITIZE=1: compute-sanitizer memcheck/racecheck/synccheck on the new backward and decode paths (issue 42 item 4,
# issue 44; ~8 minutes at most, so off by default); the builds were precompiled above
if [ "${SANITIZE:-0}" = 1 ]; then PRECOMPILE=0 bash lab/visits/sanitize_new.sh; fi
