#!/usr/bin/env bash
# One H200 visit, in the order the standards ask for: correctness first (GPU tests of both tiers,
# compute-sanitizer over every registered kernel), then the benchmarks. Each step logs under $OUT;
# a step that fails is recorded and the visit goes on, so one broken step does not waste the visit.
#
#   PYTHONPATH=. bash bench/gpu_visit.sh [tests] [sanitize] [launch] [bench_kernels] [bench_tc] [ncu]
#   (default: all but ncu). Environment: SANITIZE_KERNELS=fa2_wgmma,... (default every kernel),
#   BENCH_TC_ARGS="--kernels fa2 --dtypes float16" (extra bench_tc.py bench arguments), NCU_D=128,
#   NCU_SEQS=4096, NCU_WGMMA_CONFIGS='[{"BLOCK_N": 128, "NWG": 2}]' (extra fa2_wgmma builds to profile).
#
# Writes $OUT/gpu_tests.log, $OUT/sanitize.json, $OUT/sanitize_{memcheck,racecheck}.log,
# $OUT/launch_overhead.json, $OUT/bench_kernels.{json,md,png}, $OUT/tc_bench.{json,md,png},
# $OUT/tc_ncu_d$NCU_D.csv (ncu counters of one launch per kernel at N = 4096 and 1024) and
# $OUT/visit.json (step -> rc, s). The device tool returns at most 8 files: split the steps over calls.
set -u
. "$(dirname "$0")/gpu_steps.sh"  # steps_json, step_limit
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-results}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize launch bench_kernels bench_tc)
declare -A RC SECS
for step in "${steps[@]}"; do
  t0=$(date +%s)
  case "$step" in
    tests)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernels_tc.py \
        2>&1 | tee "$OUT/gpu_tests.log" | tail -25
      rc=${PIPESTATUS[0]} ;;
    sanitize)
      python3 bench/sanitize.py --out "$OUT" --dtypes float16,bfloat16,float32 \
        ${SANITIZE_KERNELS:+--kernels "$SANITIZE_KERNELS"}; rc=$? ;;
    launch)
      python3 bench/launch_overhead.py --out "$OUT"; rc=$? ;;
    bench_kernels)
      python3 bench/bench_kernels.py --out "$OUT" --budget-s 150; rc=$? ;;
    bench_tc)
      # shellcheck disable=SC2086
      python3 bench/bench_tc.py bench --out "$OUT" ${BENCH_TC_ARGS:-}; rc=$? ;;
    ncu)
      d=${NCU_D:-128}
      ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,\
launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_registers,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum --section WarpStateStats \
        python3 bench/bench_tc.py target --what ncu --d "$d" --ncu-seqs "${NCU_SEQS:-4096}" \
        --wgmma-configs "${NCU_WGMMA_CONFIGS:-[]}" > "$OUT/tc_ncu_d$d.csv" 2>&1; rc=$? ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
  RC[$step]=$rc; SECS[$step]=$(( $(date +%s) - t0 ))
  echo "== $step: rc=$rc, ${SECS[$step]} s"
done
steps_json "$OUT/visit.json" "${steps[@]}"
cat "$OUT/visit.json"
for step in "${steps[@]}"; do [ "${RC[$step]}" -eq 0 ] || exit 1; done
