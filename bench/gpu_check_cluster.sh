#!/usr/bin/env bash
# GPU check of issue 18 items 1 and 5 (kernels/v_once_cluster.py, the cluster "multiply V once"), from the
# repository root on an H200 (about 4 minutes):
#
#   PYTHONPATH=. bash bench/gpu_check_cluster.sh        # OUT=<dir> (default: a temp dir)
#
# Steps (each under its own time limit; one failing does not stop the rest; $OUT/steps.txt has rc and seconds):
#   compile    NVRTC every v_once_cluster build (CS 1/2/4/8 x d 64/128 x fp16/bf16, the tuning candidates, CS 16,
#              runtime-shaped clusters: 112 builds with the others), fa2_wgmma's and v_once_tc's defaults, one
#              process per core, into the disk cache the later steps read
#   tests      pytest tests/test_kernels_cluster.py: hypothesis (odd Nq <= 700, Nk <= 3000, causal rows that see
#              no key, fp16/bf16, d 64/128, scores to ~1e4) + long rows at every cluster size (Nk 1100..10700),
#              GQA and (B,N,H,d) views, the auto fallback, clear errors, every tuning candidate, and the
#              non-portable cluster of 16 (config MAX_CLUSTER=16, Nk 15k-21k) -> $OUT/gpu_tests.log
#   memcheck   compute-sanitizer memcheck of bench/cluster_sanitize_target.py: bench/sanitize.py's
#              KERNEL_SHAPES["v_once_cluster"] (CS 1..8, ring reuse, several Q blocks, idle causal ranks, GQA) on
#              the default build, NWG=2, Bc=128 and (Nk 15k-20k) the cluster of 16, fp16 -> $OUT/memcheck.log
#   racecheck  the same, fp16 (racecheck covers shared memory: the f slice, the ring, the O exchange)
#                                                                           -> $OUT/racecheck.log
#   speed      bench/cluster_speed.py --small: v_once_cluster (default build, NWG=2; CS=16 at N = 16k) vs
#              fa2_wgmma vs v_once_tc (hbm, lazy) vs SDPA flash / cuDNN, fp16, d 64/128, N 1k/4k/8k/16k at
#              B*N = 16k, H = 2048/d, causal and not, plus B=1, H=4/16, N=8k   -> $OUT/cluster_speed.json
#              (written after every cell: a run cut by its time limit keeps what it measured)
#   ncu        bench/cluster_ncu_target.py under ncu: v_once_cluster and fa2_wgmma at N = 4k (d 64, 128) and 8k
#              (d 128): duration, DRAM read + write bytes against the compulsory Q, K, V, O bytes (issue 18:
#              no f byte to DRAM), L2 bytes, tensor-pipe (gmma) activity  -> $OUT/ncu.csv
# Read: "passed" with no FAILED lines; "memcheck/racecheck: ERROR SUMMARY: 0 / 0 hazards, BAD=0, done"; the
# speed table's
# t/fa2 column (v_once_cluster / fa2_wgmma, same run; "-" where no cluster holds the row) and its CS; the ncu
# table's DRAM/compulsory of v_once_cluster (about 1: f stayed on chip) beside fa2_wgmma's.
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
tests() {
  # -v: each test's name is printed as it starts, so a hang cut by the time limit names its test
  python3 -m pytest -v --tb=short -p no:cacheprovider tests/test_kernels_cluster.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
  return "${PIPESTATUS[0]}"
}
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | tail -1)
export SANITIZER
memcheck() {
  "$SANITIZER" --tool memcheck --report-api-errors no --print-limit 50 --error-exitcode 3 python3 bench/cluster_sanitize_target.py \
    --configs default,NWG=2,BLOCK_N=128,MAX_CLUSTER=16 --dtypes float16 > "$OUT/memcheck.log" 2>&1
  local rc=$?; tail -3 "$OUT/memcheck.log"; return $rc
}
racecheck() {
  "$SANITIZER" --tool racecheck --report-api-errors no --print-limit 50 --error-exitcode 3 python3 bench/cluster_sanitize_target.py \
    --configs default,NWG=2 --dtypes float16 > "$OUT/racecheck.log" 2>&1
  local rc=$?; tail -3 "$OUT/racecheck.log"; return $rc
}
ncu_step() {
  ncu --clock-control none --csv --print-units base --kernel-name "regex:v_once_cluster_fwd|fa2_wgmma_tma_fwd" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
    python3 bench/cluster_ncu_target.py > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr"
}
speed() {
  python3 bench/cluster_speed.py --out "$OUT" --small --max-sets 2 > "$OUT/cluster_speed.txt" 2> "$OUT/cluster_speed.err"
}

nvidia-smi -L | tee "$OUT/gpu.txt"
step compile 60 compile_all
step tests 45 tests
step memcheck 25 memcheck
step racecheck 30 racecheck
step speed 65 speed
step ncu 20 ncu_step

echo
echo "== summary ($OUT)"
cat "$OUT/steps.txt"
grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -3
tail -1 "$OUT/gpu_tests.log"  # a test cut by the time limit: its name is the last line
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
[ -f "$OUT/ncu.csv" ] && python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
launches, rows, table = [], {}, []
for line in open(sys.argv[1]):
    if line.startswith("target launched"):
        launches.append(dict(kv.split("=", 1) for kv in line.split()[3:]) | {"name": line.split()[2]})
    elif line.startswith('"'):
        table.append(line)
for r in csv.DictReader(table):  # the header row ("ID", ..., "Metric Name", "Metric Unit", "Metric Value")
    try:
        rows.setdefault(int(r["ID"]), {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    except (KeyError, TypeError, ValueError):
        pass
ids = sorted(rows)
# two launches per (kernel, shape): the warm one, then the one "target launched" names
print(f"{'kernel':16s} {'N':>6s} {'d':>4s} {'CS':>3s} {'ms':>8s} {'DRAM/compulsory':>16s} {'L2 GB':>7s} {'gmma %':>7s}")
for i, meta in enumerate(launches):
    if 2 * i + 1 >= len(ids):
        break
    m = rows[ids[2 * i + 1]]
    dram = m.get("dram__bytes_read.sum", float("nan")) + m.get("dram__bytes_write.sum", float("nan"))
    print(f"{meta['name']:16s} {meta['n']:>6s} {meta['d']:>4s} {meta['cluster_size']:>3s} "
          f"{m.get('gpu__time_duration.sum', float('nan')) / 1e6:8.3f} {dram / float(meta['compulsory_bytes']):16.3f} "
          f"{m.get('lts__t_bytes.sum', float('nan')) / 1e9:7.2f} "
          f"{m.get('sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active', float('nan')):7.1f}")
PY
[ ${#failed[@]} -eq 0 ] || { echo "FAILED steps: ${failed[*]}"; exit 1; }
