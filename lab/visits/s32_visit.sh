#!/usr/bin/env bash
# Session 32: one script per GPU visit, steps chosen by STEPS (space-separated, in order):
#   check     (= bwd client decode) issue 42/44 correctness: the Hopper backward's new paths (v4 at d = 64/128 by default since its
#             promotion), the decode kernels, GQA client, HF adapter
#   heldout   issue 43: the forward and backward benchmarks the H100 held-out record reads (results/h100_heldout/)
#   speed     issue 42/44 speed: backward layouts vs cuDNN, decode vs SDPA
#   ab        issue 40: this tree against AB_OLD (forward and backward bits and times)
#   ws        issue 42: the warp-specialised backward v4 (lab/bwd_ws_ab.py) against v3 (contender 'v3'; 'shipped' in
#             results/bwd_ws_v4's files) and cuDNN
#   ws_san    issue 42: compute-sanitizer memcheck, racecheck, synccheck of the v4 backward (its 'tiny' target):
#             racecheck clean is the gate of v4 staying the default (WS_HEAD_DIMS = () restores v3)
#   order     issue 42: causal GQA's gap, ORDER=1 (steps i descending, heads inner: L2 reuse) and LPT=1 (grid
#             (B*H_kv, Tc): longest CTAs first) of both backwards: their GPU tests, then lab/bwd_order_ab.py
#             (every build vs the default and cuDNN; GQA 8:1 and equal heads, causal and not)
#   v4bench   issue 42: bench/bench_bwd.py on the shipped backward (v4 at d = 64/128) with SDPA flash and cuDNN
#   split     issue 44: the decode split count, today's rule against whole-residency splits (lab/decode_split_ab.py);
#             with .abbase2 carried (git archive <base> kernels), that tree's split_kv_fast timed beside (--base)
#   ncu       issue 42's moonshot: the shipped backward against SDPA's flash and cuDNN at d = 128, N = 16k, bf16
#             (lab/ncu_bwd_target.py): speed of light, warp states (stall reasons), compute and memory workload
# The next visit starts with ws_san: v4's shipped build (every consumer thread arrives on empty_q) has not yet run
# on a GPU, and its racecheck decides WS_HEAD_DIMS before anything is timed. Session 33 had no GPU; its plan, two calls
# back to back (the second within the 30 s idle window keeps the kernel cache), with .abbase2 carried
# (mkdir .abbase2 && git archive 7314796 kernels | tar -x -C .abbase2: split_kv_fast before the paged change):
#   1. WS_SAN_TOOLS=racecheck STEPS="ws_san bwd client decode" LIM_WS_SAN=90 LIM_BWD=150 LIM_CLIENT=110 LIM_DECODE=70
#   2. STEPS="v4bench split order" LIM_V4=170 BUDGET_V4=140 LIM_SPLIT=150 BUDGET_SPLIT=120 LIM_ORDER_TEST=120 LIM_ORDER=200
#      (then memcheck/synccheck of v4, ncu, and an H200 run of v4bench + bench/decode_speed.py for the models' H200 checks)
# Every log and JSON goes to $OUT/w/<step>/, packed at the end into $OUT/visit.tgz (the device returns 8 files at most).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
W="$OUT/w"; mkdir -p "$W"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee "$W/gpu.txt"
python -m pip uninstall -y kernels > /dev/null 2>&1  # HF's `kernels` shadows ours (kernels/hf.py)
pack() { tar -czf "$OUT/visit.tgz" -C "$OUT" w; }
trap pack EXIT
step() {  # name limit command... ; logs to $W/name.log, prints rc, seconds and the last lines
  local name=$1 lim=$2; shift 2; local t=$(date +%s)
  timeout "$lim" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - t )) s"; tail -${TAIL:-6} "$W/$name.log"; pack
}
PYT="python3 -m pytest -q -m gpu -rs -p no:cacheprovider"
t=$(date +%s)
(python3 -m bench.bench_tc precompile --jobs 8 & python3 lab/precompile_bwd.py --jobs 8; wait) > "$W/precompile.log" 2>&1
echo "== precompile $(( $(date +%s) - t )) s"
for s in ${STEPS:-check}; do case $s in
  check|bwd)
    step bwd_gpu ${LIM_BWD:-170} $PYT tests/test_kernels_bwd_gpu.py --maxfail=3
    grep -E "^E |FAILED" "$W/bwd_gpu.log" | head -12 ;;&
  check|client)
    step client_gpu ${LIM_CLIENT:-120} $PYT tests/test_attention_gqa.py tests/test_hf_adapter.py tests/test_kernels_backward.py --maxfail=5 -s
    grep -E "^E |FAILED" "$W/client_gpu.log" | head -12 ;;&
  check|decode)
    step decode_gpu ${LIM_DECODE:-90} $PYT tests/test_split_kv_gpu.py tests/test_split_kv_kernels_vs_reference_gpu.py --maxfail=3
    grep -E "^E |FAILED" "$W/decode_gpu.log" | head -12 ;;
  heldout)
    mkdir -p "$W/heldout"
    step heldout_fwd ${LIM_HFWD:-150} python3 -m bench.bench_tc bench --out "$W/heldout" --kernels fa2_wgmma,fa2_tc \
      --seqs 1024,2048,4096,8192,16384 --rep-ms ${REP_MS:-50} --budget-s ${BUDGET_HFWD:-130}
    step heldout_bwd ${LIM_HBWD:-170} python3 bench/bench_bwd.py --out "$W/heldout" --kernels fa2_wgmma,fa2 \
      --seqs 1024,2048,4096,8192,16384 --no-sdpa-math --budget-s ${BUDGET_HBWD:-150} ;;
  speed)
    step bwd_layouts ${LIM_LAYOUTS:-230} python3 bench/bwd_layouts_speed.py --out "$W" --budget-s ${BUDGET_LAYOUTS:-190}
    step decode ${LIM_DEC:-200} python3 bench/decode_speed.py --out "$W" --budget-s ${BUDGET_DEC:-160} ;;
  ab)
    step ab 200 bash -c "for t in old-1 new-1 new-2 old-2; do p=.; [ \${t#old} != \$t ] && p=${AB_OLD:-.abbase}:.; \
PYTHONPATH=\$p python3 bench/ab_speed.py --backward --tag \$t --out $W || exit 1; done; python3 bench/ab_speed.py compare $W" ;;
  ws)
    mkdir -p "$W/ws"
    step ws_tests ${LIM_WS_TEST:-120} $PYT tests/test_kernels_bwd_ws_gpu.py --maxfail=3 -x
    step ws_ab ${LIM_WS:-260} python3 lab/bwd_ws_ab.py --out "$W/ws" ;;
  v4bench)  # the promoted backward's grid (fa2_wgmma = v4 at d = 64/128) beside SDPA flash and cuDNN: issue 42's speed
    mkdir -p "$W/bwd_v4"  # and the backward model's held-out cells at N = 1k and 8k (gpumodel/backward_model.py HELDOUT_RUNS)
    step bwd_v4 ${LIM_V4:-200} python3 bench/bench_bwd.py --out "$W/bwd_v4" --kernels fa2_wgmma \
      --seqs 1024,2048,4096,8192,16384 --no-sdpa-math --budget-s ${BUDGET_V4:-170} ;;
  split)
    base=(); [ -d .abbase2 ] && base=(--base .abbase2)
    step split ${LIM_SPLIT:-170} python3 lab/decode_split_ab.py --out "$W" --budget-s ${BUDGET_SPLIT:-140} "${base[@]}" ;;
  ncu)
    step ncu_bwd ${LIM_NCU:-150} ncu --clock-control none --profile-from-start off --csv --page details \
      --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      python3 lab/ncu_bwd_target.py --n 16384 --dims 128 --dtype bf16 ;;
  ws_san)
    for t in ${WS_SAN_TOOLS:-racecheck memcheck synccheck}; do
      step ws_$t ${LIM_WS_SAN:-150} compute-sanitizer --tool $t --print-limit 20 python3 lab/bwd_ws_sanitize_target.py tiny
    done ;;
  order)
    mkdir -p "$W/order"
    step order/tests ${LIM_ORDER_TEST:-300} $PYT tests/test_kernels_bwd_gpu.py tests/test_kernels_bwd_ws_gpu.py -k order1 \
      --maxfail=3
    grep -E "^E |FAILED" "$W/order/tests.log" | head -12
    step order/ab ${LIM_ORDER:-260} python3 lab/bwd_order_ab.py --out "$W/order" --budget-s ${BUDGET_ORDER:-200} ;;
esac; done
