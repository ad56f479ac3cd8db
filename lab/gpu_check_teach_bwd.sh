#!/usr/bin/env bash
# GPU check of the teaching backwards (issue 13's last target), correctness first, then one A/B; <= ~3 min.
#
#   PYTHONPATH=. bash lab/gpu_check_teach_bwd.sh [precompile] [tests] [quicktests] [memcheck] [racecheck] [ab]
#   PYTHONPATH=. bash lab/gpu_check_teach_bwd.sh final     # the last visit, <= 170 s: precompile, quicktests
#                                                           # (teaching fa2 GPU tests), sanitize (memcheck and
#                                                           # racecheck at once, small shapes, fa2 and naive),
#                                                           # ab: d = 64/128, N = 4k/8k/2k, the shipped fa2 vs
#                                                           # naive, v4's 32 x 32, v2, v1 and cuBLAS fp32
#   (default: all but quicktests, in that order). Environment: TOTAL_S=180 (time budget; each step gets at
#   most its CAP and what is left; TOTAL_S_FINAL=170 for final), AB_ARGS="" (extra lab/teach_bwd_ab.py
#   arguments), MEM_ARGS="fa2,naive", RACE_ARGS="fa2,naive small" (lab/bwd_sanitize_target.py arguments:
#   racecheck runs the small shapes, which the first visit showed it needs to finish in its time).
#
# Steps:
#   precompile  lab/precompile_bwd.py --teaching: NVRTC the teaching fa2 and naive builds the tests launch
#   tests       the GPU backward tests of the teaching fa2 and naive (tests/test_kernels_backward.py:
#               hypothesis against float64 autograd, odd shapes, causal with rows that see no key, many
#               blocks with tails, each dtype; naive through kernels.attention and opcheck (the custom op;
#               fa2's kernels.attention test calls the same launcher the teaching tests do))
#   memcheck,   compute-sanitizer on lab/bwd_sanitize_target.py fa2,naive (small shapes, tails, Nq != Nk,
#   racecheck   rows that see no key; the dQ atomics included)
#   ab          lab/teach_bwd_ab.py: fa2 (new) vs fa2_v1 (old build) vs naive vs sdpa_math_fp32 vs
#               sdpa_math, fp16, d = 64/128, N = 4096, 8192, 2048, causal and not (each cell checked first)
# Writes to $OUT: gpu_check_teach_bwd.log (every step's output), gpu_check_teach_bwd.json (step -> rc, s),
# teach_bwd_ab.{json,md}.
# Read: the tables printed last. Step rc 0 everywhere; in the log pytest's last line, "ERROR SUMMARY: 0
# errors" and "RACECHECK SUMMARY: 0 hazards"; in teach_bwd_ab.md the fa2/naive, fa2/sdpa_math_fp32 and
# fa2/fa2_v1 columns at N >= 4096 (the target: fa2/naive > 1), and the fp32 exactness lines (<= 1e-5).
set -u
. "$(dirname "$0")/gpu_steps.sh"  # steps_json, left, cap
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d /tmp/gpu_check_teach_bwd.XXXX)}
mkdir -p "$OUT"
TOTAL_S=${TOTAL_S:-180}
T0=$(date +%s)
LOG="$OUT/gpu_check_teach_bwd.log"
: > "$LOG"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(precompile tests memcheck racecheck ab)
if [ "${steps[0]}" = final ]; then  # the last visit (~90 s): what changed for d = 128 after the first one
  steps=(precompile quicktests sanitize ab)
  TOTAL_S=${TOTAL_S_FINAL:-170}
  MEM_ARGS=${MEM_ARGS:-"fa2,naive small"}
  AB_ARGS=${AB_ARGS:-"--seqs 4096,8192,2048 --names fa2,naive,fa2_32,fa2_v2,fa2_v1,sdpa_math_fp32"}
  CAP_QUICK=20
fi
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | sort -r | head -1)
declare -A RC SECS CAP=([precompile]=30 [tests]=50 [quicktests]=${CAP_QUICK:-25} [memcheck]=15
                         [racecheck]=35 [sanitize]=35 [ab]=110)  # ab: what is left
TESTS=(
  "tests/test_kernels_backward.py::test_teaching_backward_matches_float64_autograd"
  "tests/test_kernels_backward.py::test_teaching_backward_many_blocks"
  "tests/test_kernels_backward.py::test_teaching_backward_rows_that_see_no_key"
  "tests/test_kernels_backward.py::test_teaching_dk_dv_are_deterministic"
  "tests/test_kernels_backward.py::test_attention_gradients_match_float64_autograd[naive]"
  "tests/test_kernels_backward.py::test_opcheck[naive]"
)


for step in "${steps[@]}"; do
  t0=$(date +%s)
  limit=$(cap "$step")
  echo "==================== $step (limit ${limit} s)" >> "$LOG"
  case "$step" in
    precompile)
      timeout "$limit" python3 lab/precompile_bwd.py --teaching 2>&1 | tee -a "$LOG" | tail -3
      rc=${PIPESTATUS[0]} ;;
    tests)
      timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider "${TESTS[@]}" 2>&1 | tee -a "$LOG" | tail -15
      rc=${PIPESTATUS[0]} ;;
    quicktests)  # the teaching fa2's GPU tests at its default blocks (changed at d = 128), each dtype: ~10 s
      timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_backward.py \
        -k "teaching and not naive and not matches_float64" 2>&1 | tee -a "$LOG" | tail -8
      rc=${PIPESTATUS[0]} ;;
    sanitize)  # memcheck and racecheck side by side (two processes; the shapes are small)
      if [ -z "$SANITIZER" ]; then
        echo "compute-sanitizer not found" | tee -a "$LOG"; rc=127
      else
        for tool in memcheck racecheck; do
          # shellcheck disable=SC2046
          timeout "$limit" "$SANITIZER" --tool "$tool" --report-api-errors no --print-limit 50 --error-exitcode 3 \
            python3 lab/bwd_sanitize_target.py $([ "$tool" = memcheck ] && echo "${MEM_ARGS:-fa2,naive}" \
            || echo "${RACE_ARGS:-fa2,naive small}") > "$OUT/sanitize_$tool.tmp" 2>&1 &
        done
        wait %1; rc1=$?; wait %2; rc2=$?
        rc=$(( rc1 != 0 ? rc1 : rc2 ))
        for tool in memcheck racecheck; do
          echo "---- $tool" >> "$LOG"; cat "$OUT/sanitize_$tool.tmp" >> "$LOG"
          echo "$tool:"; grep -E "(fa2|naive) backward|SUMMARY" "$OUT/sanitize_$tool.tmp" | tail -8
          rm -f "$OUT/sanitize_$tool.tmp"
        done
      fi ;;
    memcheck|racecheck)
      if [ -z "$SANITIZER" ]; then
        echo "compute-sanitizer not found" | tee -a "$LOG"; rc=127
      else
        timeout "$limit" "$SANITIZER" --tool "$step" --report-api-errors no --print-limit 50 --error-exitcode 3 \
          python3 lab/bwd_sanitize_target.py $([ "$step" = memcheck ] && echo "${MEM_ARGS:-fa2,naive}" \
          || echo "${RACE_ARGS:-fa2,naive small}") > "$OUT/sanitize_$step.tmp" 2>&1
        rc=$?
        cat "$OUT/sanitize_$step.tmp" >> "$LOG"
        grep -E "(fa2|naive) backward|SUMMARY" "$OUT/sanitize_$step.tmp" | tail -8
        rm -f "$OUT/sanitize_$step.tmp"
      fi ;;
    ab)
      # shellcheck disable=SC2086
      timeout "$limit" python3 lab/teach_bwd_ab.py --out "$OUT" --budget-s $(( limit - 15 )) ${AB_ARGS:-} \
        > "$OUT/ab.tmp" 2>&1
      rc=$?
      cat "$OUT/ab.tmp" >> "$LOG"
      grep -E "fp32 exactness|NOT OK" "$OUT/ab.tmp" | head -12
      rm -f "$OUT/ab.tmp" ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
  RC[$step]=$rc; SECS[$step]=$(( $(date +%s) - t0 ))
  echo "== $step: rc=$rc, ${SECS[$step]} s (limit ${limit} s)"
done

steps_json "$OUT/gpu_check_teach_bwd.json" "${steps[@]}"
echo
[ -f "$OUT/teach_bwd_ab.md" ] && grep -E "^(###|\|)" "$OUT/teach_bwd_ab.md"
echo
echo "step         rc  seconds   (rc 124: hit its time limit)"
for step in "${steps[@]}"; do printf '%-12s %3s %8s\n' "$step" "${RC[$step]}" "${SECS[$step]}"; done
echo "total $(( $(date +%s) - T0 )) s; logs in $OUT"
for step in "${steps[@]}"; do [ "${RC[$step]}" -eq 0 ] || exit 1; done
