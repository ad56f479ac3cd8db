#!/usr/bin/env bash
# GPU check of the runtime change (issue 15 items 1-2: cuda.core compile, cuda.bindings launch and tensor
# maps, bench/harness.py), from the repository root on an H200:
#
#   PYTHONPATH=. bash lab/gpu_check_runtime.sh        # OUT=<dir> (default: a temp dir)
#
# Steps (one failing does not stop the rest; the exit status names the failed ones):
#   versions   torch, cupy, cuda.core, cuda.bindings, triton, NVRTC, driver as found on the machine
#   precompile every build (CI's and the tuning candidates) with cuda.core, one process per core, into the
#              disk cache the later steps (and the old tree: same cache key) read
#   tests      pytest -m gpu -q -x (GPU suites of both tiers)            -> $OUT/gpu_tests.log
#   sanitize   compute-sanitizer memcheck, one small shape per kernel and option set, fp16
#                                                                        -> $OUT/sanitize.json, sanitize_memcheck.log
#   launch     host µs per call, ours vs SDPA (bench/launch_overhead.py) -> $OUT/launch_overhead.json
#   ab         old tree (.gpu/old: main before the change) vs this tree, same shapes, same harness, each
#              in its own process, two rounds alternating               -> $OUT/ab_speed_{old,new}-{1,2}.json
# Read: the final table (new/old time ratio per kernel, d, causal: ~1.00 within noise; host µs per call of
# old and new beside sdpa_flash; "same output bits" all True) and $OUT/steps.txt (rc per step).
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
OLD=${OLD_TREE:-.gpu/old}
failed=()
step() {  # step NAME COMMAND...: run, log rc and seconds, keep going
  local name=$1; shift
  local t0=$(date +%s)
  echo "=== $name" >&2
  "$@"
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/steps.txt"
  [ $rc -eq 0 ] || failed+=("$name")
}

versions() { versions_ 2>&1 | tee "$OUT/versions.txt"; return "${PIPESTATUS[0]}"; }
versions_() {
  nvidia-smi -L
  python3 - <<'PY'
import json, torch
from kernels import loader
v = dict(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(), **loader.runtime_versions())
try:
    import triton; v["triton"] = triton.__version__
except Exception as e:
    v["triton"] = f"missing: {e}"
from cuda.bindings import driver
driver.cuInit(0); v["driver"] = driver.cuDriverGetVersion()[1]
print(json.dumps(v))
PY
}
tests() {  # the files that hold GPU tests (collecting the others could need packages absent here)
  python3 -m pytest -m gpu -q -x -p no:cacheprovider $(grep -l "mark.gpu" tests/test_*.py) 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -15
  return "${PIPESTATUS[0]}"
}
precompile() { python3 -m bench.bench_tc precompile; }
sanitize() { python3 bench/sanitize.py --out "$OUT" --tools memcheck --dtypes float16 --shapes 1; }
launch() { python3 bench/launch_overhead.py --out "$OUT"; }
ab() {
  [ -d "$OLD/kernels" ] || { echo "no old tree at $OLD"; return 2; }
  local rc=0
  for round in 1 2; do
    PYTHONPATH="$OLD" python3 bench/ab_speed.py --tag "old-$round" --out "$OUT" || rc=1
    PYTHONPATH=. python3 bench/ab_speed.py --tag "new-$round" --out "$OUT" || rc=1
  done
  return $rc
}

step versions versions
step precompile precompile
step tests tests
step sanitize sanitize
step launch launch
step ab ab
echo
echo "================ summary ($OUT)"
cat "$OUT/steps.txt"
python3 - "$OUT/launch_overhead.json" <<'PY' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
print("launch_overhead host µs/call:", {r["kernel"]: round(r["host_us"], 1) for r in d["rows"] if "host_us" in r})
print("fa2_tc pieces (µs):", {k: round(v, 2) if isinstance(v, float) else v for k, v in d["fa2_tc_pieces_us"].items()})
PY
python3 bench/ab_speed.py compare "$OUT" || failed+=("ab_compare")
[ ${#failed[@]} -eq 0 ] && { echo "all steps passed"; exit 0; }
echo "FAILED: ${failed[*]}"; exit 1
