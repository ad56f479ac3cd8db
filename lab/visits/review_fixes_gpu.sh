#!/usr/bin/env bash
# GPU checks of the review-fixes branch: split_kv_fast's per-launch merge counters on two overlapping streams, the
# no-sync decode step with cache_seqlens_host=, the decode-model tile copies. Logs under $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
python -m pip uninstall -y kernels > /dev/null 2>&1  # HF's `kernels` shadows ours (kernels/hf.py)
timeout 500 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/test_split_kv_gpu.py \
  -k "two_streams or cache_seqlens_host or repeated" > "$OUT/split_kv_gpu.log" 2>&1
echo "split_kv_gpu rc=$?: $(tail -1 "$OUT/split_kv_gpu.log")"
