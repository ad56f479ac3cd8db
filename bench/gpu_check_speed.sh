#!/usr/bin/env bash
# GPU check of issue 14 items 1 and 4 (fa2_wgmma's speed knobs, kernels.fa2_wgmma.SPEED_KNOBS), from the
# repository root on an H200 (at most ~5 minutes; each step under its own time limit, one failing does not
# stop the rest; $OUT/steps.txt has rc and seconds per step):
#
#   PYTHONPATH=. bash bench/gpu_check_speed.sh        # OUT=<dir> (default: a temp dir)
#
#   compile    NVRTC every fa2_wgmma build (defaults, sweep candidates incl. every speed build), one process
#              per core, into the disk cache the later steps read
#   tests      pytest: tests/test_kernels_wgmma_speed_gpu.py (each knob and combination vs float64: hypothesis
#              shapes with odd Nq/Nk, causal rows that see no key, scores to ~1e4, d = 64/96/128/256; Nk = 4100
#              key loops; strided + GQA; row max creeping / jumping for the rescale threshold), the fa2_wgmma
#              tests of tests/test_kernels_tc.py (every sweep candidate on tails) and
#              tests/test_kernels_layouts.py, all but the PERSISTENT / QK_AHEAD builds -> $OUT/gpu_tests.log
#   smoke      each build with a new barrier protocol (PERSISTENT=1/2, QK_AHEAD=1) once per d on 1, 3 and all
#              CTAs, causal and not: a hang or a wrong result here drops those variants from the A/B
#   tests_protocol  the GPU tests of those builds                        -> $OUT/gpu_tests_protocol.log
#   memcheck   compute-sanitizer memcheck of the all-knobs speed builds ({d: build}; persistent ones on 2
#              CTAs, so each loops over several tiles), fp16, on bench/sanitize.py's fa2_wgmma
#              KERNEL_SHAPES (Nk = 2900: each ring slot refilled 8-18 times; Nq = 300: 3 Q blocks per head;
#              strided + GQA)                                            -> $OUT/memcheck/sanitize.json, log
#   racecheck  racecheck of the same builds on the first 2 of those shapes (d = 64 causal, d = 128; one head;
#              racecheck tracks every mbarrier poll, and 16 launches at Nk = 1100 did not finish in 70 s)
#                                                                        -> $OUT/racecheck/sanitize.json, log
#   ab         bench/ab_wgmma_speed.py: base vs each knob alone vs the combinations, SDPA flash and cuDNN
#              beside, fp16 and bf16, d = 64/128/256, N = 512..16k, batch*N = 16k, hidden 2048, causal and
#              not; each entry checked vs float64 on its timed inputs, then timed (do_bench, L2 flushed)
#                                                                        -> $OUT/ab_wgmma_speed.json
# Read: the failed-test lines (none expected), "memcheck/racecheck: errors=0 wrong=0 finished=True", and the
# A/B table last: per cell cuDNN / flash / base TFLOP/s, each variant's time over base (< 1 is faster), the
# best build over cuDNN (issue 14 target: >= 1.0 in every cell). These fill the "v3 ... measured: not yet"
# entries of kernels/cuda/fa2_wgmma_tma.cu's version log and decide which knobs go into CONFIGS.
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
failed=()
step() {  # step NAME SECONDS FUNCTION: run under a time limit, log rc and seconds, keep going
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name" >&2
  timeout "$limit" bash -c "$(declare -f); $1"  # a shell function (and its helpers), under the time limit
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/steps.txt"
  [ $rc -eq 0 ] || failed+=("$name")
}

compile_all() {
  python3 - <<'PY'
import os
from concurrent.futures import ProcessPoolExecutor
from kernels import fa2_wgmma, loader

def one(c):
    src, _, defs = c
    loader.compile_cubin(src, defines=defs, arch=fa2_wgmma.ARCH)
    return 1

builds = fa2_wgmma.compile_configs() + [c for c in fa2_wgmma.sweep_configs() if c not in fa2_wgmma.compile_configs()]
with ProcessPoolExecutor(min(16, os.cpu_count() or 1)) as ex:
    print(sum(ex.map(one, builds)), "fa2_wgmma builds compiled")
PY
}
export RISKY="persist or dynamic or ahead"  # -k: test ids of the PERSISTENT / QK_AHEAD builds (any case)
tests() {  # the new-protocol builds apart (a hang there must not cost the other tests): smoke, then their tests
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py tests/test_kernels_layouts.py \
    tests/test_kernels_tc.py -k "(wgmma or speed or layouts or strided or gqa or head_dims or rescale) and not \
    ($RISKY)" 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
  return "${PIPESTATUS[0]}"
}
smoke() {  # each PERSISTENT / QK_AHEAD build once per d (persistent: 1, 3, all CTAs); rc 0: no hang, all right
  python3 - <<'PY'
import torch
from bench import harness
from kernels import KERNELS, fa2_wgmma
spec, bad = KERNELS["fa2_wgmma"], 0
for name, _ in fa2_wgmma.speed_configs(64).items():
    for d in fa2_wgmma.HEAD_DIMS:
        cfg = fa2_wgmma.speed_configs(d).get(name)
        if not cfg or not (cfg.get("PERSISTENT") or cfg.get("QK_AHEAD")):
            continue
        for grid in ((1, 3, None) if cfg.get("PERSISTENT") else (None,)):
            c = dict(cfg, **({"GRID": grid} if grid else {}))
            e = harness.Entry(f"{name} d={d} grid={grid}", spec.tier, spec, {}, c)
            for causal in (False, True):
                r = harness.check_one(e, 2, 3, 333, 1100, d, torch.bfloat16, causal)
                bad += not r.get("ok")
                print(e.label, "causal" if causal else "", "ok" if r.get("ok") else f"WRONG {r}", flush=True)
raise SystemExit(1 if bad else 0)
PY
}
tests_protocol() {
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_wgmma_speed_gpu.py tests/test_kernels_tc.py \
    -k "$RISKY" 2>&1 | tee "$OUT/gpu_tests_protocol.log" | tail -15
  return "${PIPESTATUS[0]}"
}
speed_builds() {  # JSON for sanitize.py --configs: {d: fa2_wgmma.full_speed_config(d)}, every knob that fits
  # d at once (independent #if blocks; PERSISTENT and QK_AHEAD change the barrier protocol)
  python3 -c "
import json
from kernels import fa2_wgmma
grid = lambda c: dict(c, GRID=2) if c.get('PERSISTENT') else c  # 2 CTAs: more tiles than CTAs at Nq = 300
print(json.dumps({'fa2_wgmma': [{str(d): grid(fa2_wgmma.full_speed_config(d)) for d in fa2_wgmma.HEAD_DIMS}]}))"
}
memcheck() {
  python3 bench/sanitize.py --out "$OUT/memcheck" --kernels fa2_wgmma --shapes 0 --dtypes float16 \
    --tools memcheck --only-configs --configs "$(speed_builds)"
}
racecheck() {
  python3 bench/sanitize.py --out "$OUT/racecheck" --kernels fa2_wgmma --shapes 0 --dtypes float16 \
    --tools racecheck --only-configs --kernel-shapes 2 --configs "$(speed_builds)"
}
ab() {  # without the persistent variants if their smoke check failed or hung
  local v=""  # default: bench/ab_wgmma_speed.py's own list
  grep -q "^smoke rc=0 " "$OUT/steps.txt" || v=$(python3 -c "
from kernels import fa2_wgmma
print(','.join(n for n, c in fa2_wgmma.speed_configs(64).items()
               if not (c.get('PERSISTENT') or c.get('QK_AHEAD') or n == 'persist')))")
  python3 bench/ab_wgmma_speed.py --out "$OUT" --budget-s 85 ${v:+--variants "$v"} > "$OUT/ab_wgmma_speed.txt" 2>&1
}

nvidia-smi -L | tee "$OUT/gpu.txt"
step compile 30 compile_all
step tests 40 tests
step smoke 20 smoke
step tests_protocol 30 tests_protocol
step memcheck 45 memcheck
step racecheck 30 racecheck
step ab 100 ab

echo
echo "== summary ($OUT)"
cat "$OUT/steps.txt"
for log in "$OUT/gpu_tests.log" "$OUT/gpu_tests_protocol.log"; do
  echo "$(basename "$log"): $(grep -E "passed|failed" "$log" | tail -1)"
  grep -E "^FAILED" "$log" | head -10
done
for tool in memcheck racecheck; do
  python3 - "$OUT/$tool/sanitize.json" <<'PY'
import json, sys
from pathlib import Path
p = Path(sys.argv[1])
if p.exists():
    for tool, r in json.loads(p.read_text()).get("tools", {}).items():
        print(f"sanitize {tool}: errors={r['errors']} wrong={r['wrong_results']} finished={r['finished']} "
              f"{r['seconds']} s" + "".join(f"\n   {n} reports in {k}" for k, n in r["per_kernel_reports"].items() if n))
else:
    print(f"{p}: missing")
PY
done
echo
if [ -f "$OUT/ab_wgmma_speed.json" ]; then
  python3 bench/ab_wgmma_speed.py --summary "$OUT/ab_wgmma_speed.json"
else
  echo "no A/B result"; tail -5 "$OUT/ab_wgmma_speed.txt"
fi
[ ${#failed[@]} -eq 0 ] || { echo "FAILED steps: ${failed[*]}"; exit 1; }
