#!/usr/bin/env bash
# One H200 visit for what the open issues still need measured, each part under its own time limit, so a slow or
# hung part costs only itself; results tarred into $OUT/<part>.tgz (the device tool returns few files).
#
#   PYTHONPATH=. bash bench/gpu_visit_open.sh cluster16 teach      # ~5.5 min
#   PYTHONPATH=. bash bench/gpu_visit_open.sh gaps                 # ~4 min
#
# Parts:
#   cluster16  issue 18: bench/cluster_speed.py at N = 16384 (B = 1, H = 2048/d), fp16 and bf16, d = 64/128,
#              causal and not: fa2_wgmma, v_once_tc (f spilled), SDPA flash and cuDNN, and the cluster kernel
#              where only the non-portable cluster of 16 holds the row (config MAX_CLUSTER=16); every entry
#              checked against float64 on its timed inputs first                 -> cluster16/cluster_speed.json
#   teach      issue 13: bench/gpu_check_teach_bwd.sh final (teaching fa2 backward GPU tests, memcheck and
#              racecheck, A/B of the d = 128 builds against the teaching naive backward at N = 4k, 8k) -> teach/
#   gaps       issue 11: bench/gpu_gaps_check.sh (ncu levels at N = 24k / 48k and v_once_tc at N = 2048)  -> gaps/
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
ROOT_OUT=${OUT:-$(mktemp -d)}
T0=$(date +%s)
nvidia-smi -L
for part in "$@"; do
  W=$ROOT_OUT/$part; mkdir -p "$W"
  t0=$(date +%s)
  case $part in
    cluster16)
      timeout 230 python3 bench/cluster_speed.py --out "$W" --n 16384 --dtypes float16,bfloat16 --set all \
        --max-sets 2 > "$W/table.txt" 2> "$W/run.err"; rc=$?
      cat "$W/table.txt"; tail -5 "$W/run.err" ;;
    teach)
      OUT=$W TOTAL_S_FINAL=110 timeout 120 bash bench/gpu_check_teach_bwd.sh final > "$W/run.txt" 2>&1; rc=$?
      tail -45 "$W/run.txt" ;;
    gaps)
      OUT=$W timeout 250 bash bench/gpu_gaps_check.sh > "$W/run.txt" 2>&1; rc=$?
      tail -30 "$W/run.txt" ;;
    *) echo "unknown part $part"; rc=2 ;;
  esac
  echo "== $part rc=$rc $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - T0 )) s)" | tee -a "$ROOT_OUT/steps.txt"
  tar czf "$ROOT_OUT/$part.tgz" -C "$ROOT_OUT" "$part" && rm -rf "$W"
done
