#!/usr/bin/env bash
# One H200 visit that closes the backward measurements (issue 13 items 4 and 6) and checks the L2 capacity
# assumption of the GPU model (issue 11), in the standards' order: correctness first, then timing, then ncu.
#
#   PYTHONPATH=. bash lab/gpu_visit_bwd.sh          # on the H200; ~8-9 minutes
#
# Steps (each under a time limit; one failing does not stop the rest):
#   check     lab/gpu_check_bwd.sh precompile tests memcheck racecheck (GPU tests of every backward against
#             float64 autograd, compute-sanitizer memcheck + racecheck incl. the dQ atomics)
#   bench     bench/bench_bwd.py, the full grid (fp16/bf16, d = 64/128, N = 512...16k, causal and not;
#             gradients checked in each cell before it is timed)
#   ncu       counters of the backward at N = 4096, d = 64 and 128 (lab/ncu_bwd_target.py): tensor pipe,
#             L2 and DRAM bytes, duration, beside SDPA flash and cuDNN
#   l2cap     lab/ncu_l2_capacity.sh (heads spanning several waves: where K/V re-reads reach DRAM)
# Everything lands in $OUT/visit_bwd.tgz (the device tool returns few files).
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
W=$OUT/w; mkdir -p "$W/check" "$W/l2cap"
T0=$(date +%s)
stamp() { echo "== $1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a "$W/steps.txt"; }

TOTAL_S=170 OUT=$W/check bash lab/gpu_check_bwd.sh precompile tests memcheck racecheck > "$W/check.txt" 2>&1
stamp check $?
tail -12 "$W/check.txt"

timeout 250 python3 bench/bench_bwd.py --out "$W" --budget-s 225 > "$W/bench.txt" 2>&1
stamp bench $?
tail -60 "$W/bench.txt"

NCU_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,\
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__shared_mem_per_block_dynamic
timeout 80 ncu --clock-control none --profile-from-start off --csv --metrics "$NCU_METRICS" \
  python3 lab/ncu_bwd_target.py > "$W/ncu_bwd.csv" 2> "$W/ncu_bwd.stderr"
stamp ncu $?
grep -c '"gpu__time_duration.sum"' "$W/ncu_bwd.csv"

OUT=$W/l2cap timeout 100 bash lab/ncu_l2_capacity.sh > "$W/l2cap.txt" 2>&1
stamp l2cap $?
tail -15 "$W/l2cap.txt"
rm -f "$W/l2cap/ncu_query.csv"
tar czf "$OUT/visit_bwd.tgz" -C "$W" .
cat "$W/steps.txt"
