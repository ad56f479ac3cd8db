#!/usr/bin/env bash
# GPU check of issue 18 items 1 and 5 (kernels/v_once_cluster.py, the cluster "multiply V once"), from the
# repository root on an H200 (about 4 minutes):
#
#   PYTHONPATH=. bash lab/gpu_check_cluster.sh   # LIMIT_<step>=seconds overrides a step's limit; SPEED_ARGS
#                                                 # adds bench/cluster_speed.py arguments to speed_main;
#                                                 # OUT=<dir> (default: a temp dir)
#
# Steps (each under its own time limit, in its own process, so a build that hangs costs only its step; one failing
# does not stop the rest; $OUT/steps.txt has rc (124: cut by the limit) and seconds; at most ~5 minutes in all):
#   compile            NVRTC every v_once_cluster build (CS 1/2/4/8 x d 64/128 x fp16/bf16, the tuning candidates,
#                      CS 16, runtime-shaped clusters) and fa2_wgmma's and v_once_tc's defaults, one process per core
#   tests_smoke        one launch per cluster size (1, 1, 2, 4, 8), default build        -> gpu_tests_smoke.log
#   tests_main         hypothesis (odd Nq <= 700, Nk <= 3000, causal rows that see no key, fp16/bf16, d 64/128,
#                      scores to ~1e4; default and NWG=2), long rows at every cluster size (Nk 1100..10700),
#                      GQA and (B,N,H,d) views, the auto fallback, clear errors, cluster shapes set at launch
#                                                                                         -> gpu_tests_main.log
#   tests_candidates   every tuning candidate (NWG=2, NWG=2 with a 4-slot ring, the fixed 2-slot ring, Bc=128) on
#                      tails; the non-portable cluster
#                      of 16 (config MAX_CLUSTER=16, Nk 15k-21k)                          -> gpu_tests_candidates.log
#   memcheck           compute-sanitizer memcheck of lab/cluster_sanitize_target.py on bench/sanitize.py's
#                      KERNEL_SHAPES["v_once_cluster"] (CS 1..8, ring reuse, several Q blocks, idle causal ranks,
#                      GQA), default and NWG=2, fp16                                       -> memcheck.log
#   racecheck          racecheck, one Q block and head per cluster size (--small), default and NWG=2 -> racecheck.log
#   speed_main         bench/cluster_speed.py --set main: v_once_cluster (default) vs fa2_wgmma vs v_once_tc (hbm,
#                      lazy) vs SDPA flash / cuDNN, fp16, d 64/128, N 1k/4k/8k/16k at B*N = 16k, H = 2048/d,
#                      causal and not, plus B=1, H=4/16, N=8k          -> cluster_speed_main.json (after every cell)
#   speed_candidates   the same cells for NWG=2, Bc=128, the fixed 2-slot ring (STAGES=2: the first visit's default), and
#                      CS=16 at N=16k                                  -> cluster_speed_candidates.json
#   memcheck_candidates  memcheck of the fixed 2-slot ring, Bc=128 and the cluster of 16   -> memcheck_candidates.log
#   ncu                lab/cluster_ncu_target.py: v_once_cluster and fa2_wgmma at N = 4k (d 64, 128) and 8k
#                      (d 128): duration, DRAM bytes / compulsory Q, K, V, O bytes (issue 18: no f byte to DRAM),
#                      L2 bytes, tensor-pipe activity                                     -> ncu.csv
# Read (summary, printed last): per test log "N passed" and no FAILED (or the test a time limit cut); per sanitizer
# "ERROR SUMMARY: 0 errors" / "0 hazards", BAD=0, done; the speed table's t/fa2 (same run) and, per cell, the
# fastest v_once_cluster build against fa2_wgmma and cuDNN; the ncu table's DRAM/compulsory of v_once_cluster (~1).
set -u
. "$(dirname "$0")/gpu_steps.sh"  # steps_json, step_limit, step
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
: > "$OUT/steps.txt"
failed=()

compile_all() {
  python3 - <<'PY'
import os
from concurrent.futures import ProcessPoolExecutor
from kernels import fa2_wgmma, loader, v_once_cluster, v_once_tc

def one(c):
    src, kernel, defs, arch = c
    loader.compile_cubin(src, defines=defs, arch=arch)
    return loader.resource_usage(src, kernel, defines=defs, arch=arch)

extra = [(str(v_once_cluster.SOURCE), v_once_cluster.KERNEL, v_once_cluster.defines_for(128, 0, cs, {"RUNTIME_CLUSTER": 1}))
         for cs in v_once_cluster.PORTABLE_SIZES]  # tests/test_kernels_cluster.py::test_cluster_shape_set_at_launch
builds = [(*c, v_once_cluster.ARCH) for c in v_once_cluster.compile_configs() + v_once_cluster.sweep_configs() + extra]
builds = list(dict.fromkeys((s, k, tuple(sorted(d.items())), a) for s, k, d, a in builds))
builds = [(s, k, dict(d), a) for s, k, d, a in builds]
builds += [(*c, fa2_wgmma.ARCH) for c in fa2_wgmma.compile_configs()]
builds += [(*c, "sm_90") for c in v_once_tc.compile_configs()]
with ProcessPoolExecutor(min(16, os.cpu_count() or 1)) as ex:
    res = list(ex.map(one, builds))
for (src, kernel, defs, _), r in zip(builds, res):
    if kernel == v_once_cluster.KERNEL:
        print(kernel, defs, r)
print(len(res), "builds compiled")
PY
}
# pytest -v: each test's name is printed as it starts, so a hang cut by the time limit names its test
pyt() { python3 -m pytest -v --tb=short -p no:cacheprovider tests/test_kernels_cluster.py "$@"; }
tests_smoke() { pyt -k smoke 2>&1 | tee "$OUT/gpu_tests_smoke.log" | tail -8; return "${PIPESTATUS[0]}"; }
tests_main() {
  pyt -k "matches_reference or long_rows or no_key or grouped or auto_falls or errors or set_at_launch" 2>&1 \
    | tee "$OUT/gpu_tests_main.log" | tail -12
  return "${PIPESTATUS[0]}"
}
tests_candidates() {
  pyt -k "every_tuning_candidate or non_portable" 2>&1 | tee "$OUT/gpu_tests_candidates.log" | tail -12
  return "${PIPESTATUS[0]}"
}
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | tail -1)
export SANITIZER
sanitize() {  # sanitize TOOL LOG ARGS...: one compute-sanitizer run of lab/cluster_sanitize_target.py
  local tool=$1 log=$2; shift 2
  "$SANITIZER" --tool "$tool" --report-api-errors no --print-limit 50 --error-exitcode 3 \
    python3 lab/cluster_sanitize_target.py "$@" > "$OUT/$log" 2>&1
  local rc=$?; tail -2 "$OUT/$log"; return $rc
}
memcheck() { sanitize memcheck memcheck.log --configs default,NWG=2 --dtypes float16; }
memcheck_candidates() { sanitize memcheck memcheck_candidates.log --configs STAGES=2,BLOCK_N=128,MAX_CLUSTER=16 --dtypes float16; }
racecheck() { sanitize racecheck racecheck.log --configs default,NWG=2 --dtypes float16 --small; }
ncu_step() {
  ncu --clock-control none --csv --print-units base --kernel-name "regex:v_once_cluster_fwd|fa2_wgmma_tma_fwd" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    python3 lab/cluster_ncu_target.py > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr"
}
speed_main() {
  python3 bench/cluster_speed.py --out "$OUT" --small --max-sets 2 --set main ${SPEED_ARGS:-} > /dev/null \
    2> "$OUT/cluster_speed_main.err"
}
speed_candidates() {
  python3 bench/cluster_speed.py --out "$OUT" --small --max-sets 2 --set candidates > /dev/null \
    2> "$OUT/cluster_speed_candidates.err"
}

nvidia-smi -L | tee "$OUT/gpu.txt"
step compile 40 compile_all
step tests_smoke 25 tests_smoke
step tests_main 50 tests_main
step tests_candidates 35 tests_candidates
step memcheck 25 memcheck
step racecheck 35 racecheck
step speed_main 45 speed_main
step speed_candidates 30 speed_candidates
step memcheck_candidates 20 memcheck_candidates
step ncu 15 ncu_step

echo
echo "== summary ($OUT)"
cat "$OUT/steps.txt"
for f in gpu_tests_smoke gpu_tests_main gpu_tests_candidates; do
  [ -f "$OUT/$f.log" ] || { echo "$f: no log"; continue; }
  done_line=$(grep -E " in [0-9.]+s( \(|$| =)" "$OUT/$f.log" | tail -1)
  echo "$f: ${done_line:-cut by its time limit at: $(tail -1 "$OUT/$f.log")}"
  grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8
done
for t in memcheck racecheck memcheck_candidates; do
  f="$OUT/$t.log"
  if [ -f "$f" ]; then
    echo "$t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1) ok=$(grep -c ': ok$' "$f") BAD=$(grep -c ' BAD ' "$f") $(grep -q '@@DONE' "$f" && echo done || echo "NOT-FINISHED at: $(grep '@@SANITIZE' "$f" | tail -1)")"
    grep -E "^========= (Invalid|Error|Race|Program hit|Barrier)" "$f" | sort | uniq -c | head -5
  else
    echo "$t: no log"
  fi
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from bench.cluster_speed import print_table
rows = []
for name in ("cluster_speed_main.json", "cluster_speed_candidates.json"):
    p = Path(sys.argv[1]) / name
    if p.exists():
        rows += json.loads(p.read_text())["rows"]
print_table(rows) if rows else print("no speed records")
PY
[ -f "$OUT/ncu.csv" ] && python3 lab/cluster_ncu_summary.py "$OUT/ncu.csv"
[ ${#failed[@]} -eq 0 ] || { echo "FAILED steps: ${failed[*]}"; exit 1; }
