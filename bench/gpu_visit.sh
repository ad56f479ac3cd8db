#!/usr/bin/env bash
# One GPU visit: the steps you name, in the standards' order (correctness before speed), each under its own time
# limit, so a slow or failing step costs only itself. Run from the repository root:
#
#   PYTHONPATH=. bash bench/gpu_visit.sh tests sanitize forward backward        # any subset, in any order given
#   PYTHONPATH=. bash bench/gpu_visit.sh                                        # the default: tests sanitize forward backward
#
# Steps (each writes under $OUT, default visits/<date>/, git-ignored; file what backs a claim into results/):
#   tests      every GPU test (pytest -m gpu)                          -> gpu_tests.log
#   sanitize   compute-sanitizer memcheck + racecheck, every kernel    -> sanitize.json, sanitize_*.log
#   launch     host work per call against SDPA's                       -> launch_overhead.json
#   kernels    every registered kernel, checked then timed (teaching)  -> bench_kernels.{json,md,png}
#   forward    tensor-core forwards vs SDPA flash and cuDNN            -> tc_bench.{json,md,png}
#   backward   backwards vs SDPA flash and cuDNN                       -> bwd_bench.{json,md}
#   layouts    fa2_wgmma on strided views and grouped-query K/V        -> layouts_speed.{json,txt}
#   train      a small GPT trained with kernels.attention vs SDPA      -> train_gpt.{json,png}
#   decode     split-KV decoding vs SDPA and fa2_wgmma (K/V bandwidth) -> decode_speed.{json,md}
#   precompile NVRTC every forward() build in parallel (no GPU needed)  -> precompile.log (speeds up tests)
#   ab         this tree against AB_OLD=<another tree> (e.g. a `git worktree` of the previous main), forward and
#              backward, old/new/new/old in one run: same output bits, time ratio -> ab_speed_*.json, ab.txt
# Extra arguments per step come from the environment: ARGS_<step>="..." (e.g. ARGS_forward="--seqs 4096";
# ARGS_tests names test files or -k expressions instead of the whole tests/ folder).
# Time limits: LIMIT_<step>=seconds (defaults below). $OUT/visit.json records each step's rc and seconds; the
# script exits 1 when any step failed.
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-visits/$(date +%Y%m%d-%H%M)}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize forward backward)
declare -A LIMIT=([tests]=600 [sanitize]=600 [launch]=120 [kernels]=300 [forward]=600 [backward]=600 [layouts]=300
                  [train]=600 [precompile]=300 [ab]=400 [decode]=300)
declare -A RC SECS

run_step() {  # the command line of one step; extra arguments from ARGS_<step>
  local step=$1 extra_var="ARGS_$1"
  local extra=${!extra_var:-}
  case "$step" in
    tests)    echo "python3 -m pytest -q -m gpu -p no:cacheprovider ${extra:-tests}" ;;
    sanitize) echo "python3 bench/sanitize.py --out $OUT --dtypes float16,bfloat16 $extra" ;;
    launch)   echo "python3 bench/launch_overhead.py --out $OUT $extra" ;;
    kernels)  echo "python3 bench/bench_kernels.py --out $OUT --budget-s 150 $extra" ;;
    forward)  echo "python3 bench/bench_tc.py bench --out $OUT $extra" ;;
    backward) echo "python3 bench/bench_bwd.py --out $OUT $extra" ;;
    layouts)  echo "python3 bench/layouts_speed.py --out $OUT $extra" ;;
    train)    echo "python3 bench/train_gpt.py --out $OUT $extra" ;;
    decode)   echo "python3 bench/decode_speed.py --out $OUT --budget-s 200 $extra" ;;
    precompile) echo "python3 -m bench.bench_tc precompile $extra" ;;
    ab)       [ -n "${AB_OLD:-}" ] || return 1
              echo "bash -c 'for t in old-1 new-1 new-2 old-2; do p=.; [ \${t#old} != \$t ] && p=$AB_OLD:.; \
PYTHONPATH=\$p python3 bench/ab_speed.py --backward --tag \$t --out $OUT $extra || exit 1; done; \
python3 bench/ab_speed.py compare $OUT | tee $OUT/ab.txt'" ;;
    *)        return 1 ;;
  esac
}

for step in "${steps[@]}"; do
  if ! cmd=$(run_step "$step"); then
    echo "gpu_visit: unknown step '$step' (or ab without AB_OLD); choose from: tests sanitize launch kernels forward" \
      "backward layouts train decode precompile ab" >&2
    exit 2
  fi
done
for step in "${steps[@]}"; do
  cmd=$(run_step "$step")
  limit_var="LIMIT_$step"
  limit=${!limit_var:-${LIMIT[$step]}}
  echo "=== $step (limit ${limit}s): $cmd"
  t0=$(date +%s)
  timeout "$limit" bash -c "$cmd" 2>&1 | tee "$OUT/$step.log" | tail -25
  RC[$step]=${PIPESTATUS[0]}
  SECS[$step]=$(( $(date +%s) - t0 ))
  echo "=== $step: rc=${RC[$step]}, ${SECS[$step]} s"
done
{
  echo "{"
  for i in "${!steps[@]}"; do
    s=${steps[$i]}; sep=","; [ "$i" -eq $(( ${#steps[@]} - 1 )) ] && sep=""
    printf '  "%s": {"rc": %s, "seconds": %s}%s\n' "$s" "${RC[$s]}" "${SECS[$s]}" "$sep"
  done
  echo "}"
} > "$OUT/visit.json"
cat "$OUT/visit.json"
for s in "${steps[@]}"; do [ "${RC[$s]}" -eq 0 ] || exit 1; done
