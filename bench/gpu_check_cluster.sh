#!/usr/bin/env bash
# GPU check of issue 18 items 1 and 5 (kernels/v_once_cluster.py, the cluster "multiply V once"), from the
# repository root on an H200 (about 4 minutes):
#
#   PYTHONPATH=. bash bench/gpu_check_cluster.sh        # OUT=<dir> (default: a temp dir)
#
# Steps (each under its own time limit; one failing does not stop the rest; $OUT/steps.txt has rc and seconds):
#   compile    NVRTC every v_once_cluster build (CS 1/2/4/8 x d 64/128 x fp16/bf16), fa2_wgmma's defaults and
#              v_once_tc's, one process per core, into the disk cache the later steps read
#   tests      pytest tests/test_kernels_cluster.py: hypothesis (odd Nq <= 700, Nk <= 3000, causal rows that see
#              no key, fp16/bf16, d 64/128, scores to ~1e4) + long rows at every cluster size (Nk 1100..10700),
#              GQA and (B,N,H,d) views, the auto fallback, clear errors, every tuning candidate, and the
#              non-portable cluster of 16 (config MAX_CLUSTER=16, Nk 15k-21k) -> $OUT/gpu_tests.log
#   memcheck   compute-sanitizer memcheck of bench/cluster_sanitize_target.py: bench/sanitize.py's
#              KERNEL_SHAPES["v_once_cluster"] (CS 1..8, ring reuse, several Q blocks, idle causal ranks, GQA) on
#              the default build, NWG=2, Bc=128 and (Nk 15k-20k) the cluster of 16, fp16 -> $OUT/memcheck.log
#   racecheck  the same, fp16 (racecheck covers shared memory: the f slice, the ring, the O exchange)
#                                                                           -> $OUT/racecheck.log
#   speed      bench/cluster_speed.py --small: v_once_cluster (default build, NWG=2, Bc=128; CS=16 at N = 16k) vs fa2_wgmma vs v_once_tc (hbm, lazy) vs SDPA
#              flash / cuDNN, fp16, d 64/128, N 1k/4k/8k/16k at B*N = 16k, H = 2048/d, causal and not, plus
#              B*H <= 16 cells                                              -> $OUT/cluster_speed.json
# Read: "passed" with no FAILED lines; "memcheck/racecheck: ERROR SUMMARY: 0 / 0 hazards, BAD=0, done"; the speed table's
# t/fa2 column (v_once_cluster / fa2_wgmma, same run; "-" where no cluster holds the row, N = 16k) and its CS.
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
: > "$OUT/steps.txt"
failed=()
step() {  # step NAME SECONDS FUNCTION: run under a time limit, log rc and seconds, keep going
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name" >&2
  timeout "$limit" bash -c "$(declare -f "$1"); $1"
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/steps.txt"
  [ $rc -eq 0 ] || failed+=("$name")
}

compile_all() {
  python3 - <<'PY'
import os
from concurrent.futures import ProcessPoolExecutor
from kernels import fa2_wgmma, loader, v_once_cluster, v_once_tc

def one(c):
    src, kernel, defs, arch = c
    loader.compile_cubin(src, defines=defs, arch=arch)
    return loader.resource_usage(src, kernel, defines=defs, arch=arch)

builds = [(*c, v_once_cluster.ARCH) for c in v_once_cluster.compile_configs() + v_once_cluster.sweep_configs()]
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
tests() {
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_cluster.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
  return "${PIPESTATUS[0]}"
}
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | tail -1)
export SANITIZER
memcheck() {
  "$SANITIZER" --tool memcheck --report-api-errors no --print-limit 50 python3 bench/cluster_sanitize_target.py \
    --configs default,NWG=2,BLOCK_N=128,MAX_CLUSTER=16 --dtypes float16 > "$OUT/memcheck.log" 2>&1
  local rc=$?; tail -3 "$OUT/memcheck.log"; return $rc
}
racecheck() {
  "$SANITIZER" --tool racecheck --report-api-errors no --print-limit 50 python3 bench/cluster_sanitize_target.py \
    --configs default,NWG=2 --dtypes float16 > "$OUT/racecheck.log" 2>&1
  local rc=$?; tail -3 "$OUT/racecheck.log"; return $rc
}
speed() {
  python3 bench/cluster_speed.py --out "$OUT" --small --max-sets 2 > "$OUT/cluster_speed.txt" 2> "$OUT/cluster_speed.err"
}

nvidia-smi -L | tee "$OUT/gpu.txt"
step compile 40 compile_all
step tests 55 tests
step memcheck 35 memcheck
step racecheck 45 racecheck
step speed 95 speed

echo
echo "== summary ($OUT)"
cat "$OUT/steps.txt"
grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -3
grep -E "^FAILED|Error" "$OUT/gpu_tests.log" | head -10
for t in memcheck racecheck; do
  f="$OUT/$t.log"
  if [ -f "$f" ]; then
    echo "$t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1) BAD=$(grep -c ' BAD ' "$f") $(grep -q '@@DONE' "$f" && echo done || echo NOT-FINISHED)"
    grep -E "^========= (Invalid|Error|Race|Program hit|Barrier)" "$f" | sort | uniq -c | head -5
  else
    echo "$t: no log"
  fi
done
[ -f "$OUT/cluster_speed.json" ] && python3 -c 'import json, sys
from bench.cluster_speed import print_table
print_table(json.load(open(sys.argv[1]))["rows"])' "$OUT/cluster_speed.json"
[ ${#failed[@]} -eq 0 ] || { echo "FAILED steps: ${failed[*]}"; exit 1; }
