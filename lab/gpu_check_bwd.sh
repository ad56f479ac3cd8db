#!/usr/bin/env bash
# GPU check of the backward work (issue 13 items 1, 3, 4, 5), in the standards' order: correctness first
# (GPU tests, compute-sanitizer), then the training proof and the benchmark. Each step logs under $OUT;
# a step that fails is recorded and the rest still run. Total held under ~5 minutes (TOTAL_S).
#
#   PYTHONPATH=. bash lab/gpu_check_bwd.sh [precompile] [tests] [memcheck] [racecheck] [train] [bench]
#   (default: all, in that order; each step is capped, see CAP). Environment: TOTAL_S=295 (time budget;
#   each step gets at most what is left), TRAIN_ARGS="--steps 500" (extra bench/train_gpt.py arguments;
#   --fallback fa2 is always passed), BENCH_ARGS="" (extra bench/bench_bwd.py arguments), PYTEST_K=""
#   (a -k filter for the tests).
#
# Writes 7 files to $OUT: gpu_check_bwd.log (every step's output, in order), gpu_check_bwd.json (step -> rc,
# seconds), train_gpt.{json,png}, bwd_bench.{json,md,png}.
# Read: the summary table printed last (rc 0 everywhere); in the log, pytest's last line, "ERROR SUMMARY: 0
# errors" (memcheck) and "RACECHECK SUMMARY: 0 hazards" (racecheck), train_gpt's AGREE line and tokens/s;
# bwd_bench.md (fa2_wgmma / sdpa_flash ratios; fa2 / sdpa_math_fp32 at N = 4096: the teaching target).
set -u
. "$(dirname "$0")/gpu_steps.sh"  # steps_json, left, cap
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d /tmp/gpu_check_bwd.XXXX)}
mkdir -p "$OUT"
TOTAL_S=${TOTAL_S:-295}
T0=$(date +%s)
LOG="$OUT/gpu_check_bwd.log"  # every step's full output, in order (few files: the device tool returns few)
: > "$LOG"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(precompile tests memcheck racecheck train bench)
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | sort -r | head -1)
declare -A RC SECS CAP=([precompile]=40 [tests]=130 [memcheck]=35 [racecheck]=45 [train]=150 [bench]=60)


for step in "${steps[@]}"; do
  t0=$(date +%s)
  limit=$(cap "$step")
  echo "==================== $step (limit ${limit} s)" >> "$LOG"
  case "$step" in
    precompile)  # NVRTC every build the tests launch, in parallel (serially they take ~1 min)
      timeout "$limit" python3 lab/precompile_bwd.py 2>&1 | tee -a "$LOG" | tail -3
      rc=${PIPESTATUS[0]} ;;
    tests)
      timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_backward.py \
        $(ls tests/test_kernels_bwd_gpu.py 2>/dev/null) ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee -a "$LOG" | tail -25
      rc=${PIPESTATUS[0]} ;;
    memcheck|racecheck)
      if [ -z "$SANITIZER" ]; then
        echo "compute-sanitizer not found" | tee -a "$LOG"; rc=127
      else
        timeout "$limit" "$SANITIZER" --tool "$step" --report-api-errors no --print-limit 50 --error-exitcode 3 \
          python3 lab/bwd_sanitize_target.py > "$OUT/sanitize_$step.tmp" 2>&1
        rc=$?
        cat "$OUT/sanitize_$step.tmp" >> "$LOG"
        grep -E "(fa2|naive) backward|SUMMARY" "$OUT/sanitize_$step.tmp" | tail -6
        rm -f "$OUT/sanitize_$step.tmp"
      fi ;;
    bench)
      # shellcheck disable=SC2086
      timeout "$limit" python3 bench/bench_bwd.py --quick --out "$OUT" --budget-s $(( limit - 25 )) \
        ${BENCH_ARGS:-} 2>&1 | tee -a "$LOG" | tail -45
      rc=${PIPESTATUS[0]} ;;
    train)
      # shellcheck disable=SC2086
      timeout "$limit" python3 bench/train_gpt.py --fallback fa2 --out "$OUT" ${TRAIN_ARGS:-} 2>&1 \
        | tee -a "$LOG" | tail -12
      rc=${PIPESTATUS[0]} ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
  RC[$step]=$rc; SECS[$step]=$(( $(date +%s) - t0 ))
  echo "== $step: rc=$rc, ${SECS[$step]} s (limit ${limit} s)"
done

steps_json "$OUT/gpu_check_bwd.json" "${steps[@]}"
echo
echo "step         rc  seconds   (rc 124: hit its time limit)"
for step in "${steps[@]}"; do printf '%-12s %3s %8s\n' "$step" "${RC[$step]}" "${SECS[$step]}"; done
echo "total $(( $(date +%s) - T0 )) s; logs in $OUT"
for step in "${steps[@]}"; do [ "${RC[$step]}" -eq 0 ] || exit 1; done
