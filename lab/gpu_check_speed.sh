#!/usr/bin/env bash
# (Issue 14's speed knobs and candidates this runs, DEFAULT_CANDIDATES and speed_configs, live at commit 0bb604a.)
# Last GPU check of issue 14 items 1, 4, 5 (fa2_wgmma): what decides the defaults, lean (about 4 minutes on an
# H200; every step under its own time limit, one failing does not stop the rest; $OUT/steps.txt: rc, seconds).
# The second visit (results/sessions/visit2/) timed RESCALE_THRESHOLD (now in CONFIGS at d = 64, 256) and
# EXP2_POLY (negative); its persistent d = 256 build hung in setmaxnreg (consumer budget over what the
# producer freed; fixed, with a static_assert). Here: the candidate defaults, kernels.fa2_wgmma.DEFAULT_CANDIDATES
# (PERSISTENT=2 at every d, QK_AHEAD at d = 64).
#
#   PYTHONPATH=. bash lab/gpu_check_speed.sh        # OUT=<dir> (default: a temp dir)
#
#   compile    NVRTC the shipped builds and the candidates, fp16 + bf16, in parallel
#   smoke      each candidate once per d in its own process and time limit (a hang costs that d only):
#              persistent ones on 1, 3 and all CTAs, causal and not; vs float64 -> $OUT/smoke_ok.txt ("d:name"
#              of each candidate that passed; the A/B times a candidate only where it passed)
#   tests      pytest: tests/test_kernels_wgmma_speed_gpu.py for the candidates and the rescale threshold
#              (hypothesis shapes: odd Nq/Nk, causal rows that see no key, scores to ~1e4, d = 64/96/128/256;
#              Nk = 4100; strided + GQA; 1-3 CTAs over many tiles; T = 0 tiles; a fresh tile counter per call;
#              row max creeping and jumping), the shipped builds' fa2_wgmma tests (test_kernels_tc.py,
#              test_kernels_layouts.py)                                     -> $OUT/gpu_tests.log
#   memcheck   compute-sanitizer memcheck of fa2_wgmma.full_speed_config(d) (the candidate with the most knobs)
#              on 2 CTAs (more tiles than CTAs), fp16, at scale: Nq = 300 (3 Q blocks), Nk = 2900 (every K/V
#              ring slot refilled 8-18 times), d = 64/128/256/96; a partial log is kept at the time limit
#                                                                           -> $OUT/memcheck/sanitize.json, log
#   ab         lab/ab_wgmma_speed.py: CONFIGS ("base") vs each candidate, cuDNN beside, fp16 and bf16,
#              d = 64/128/256, N = 512/1k/2k/8k (batch*N = 16k, hidden 2048), causal and not; each entry
#              checked vs float64 on its timed inputs first                 -> $OUT/ab_wgmma_speed.json
# Read: "smoke passed:" (64:dynamic 64:ahead 64:dynamic+ahead 128:dynamic 256:dynamic 96:dynamic expected),
# the failed-test lines (none expected), "memcheck: errors=0
# wrong=0 finished=True", then the table: per cell cuDNN and base TFLOP/s, each candidate's time / base time
# (< 1: faster), best/cuDNN; last, per (d, candidate) the geomeans and the decision rule's call (CONFIGS[d],
# SIZE_RULES[d] for Nk <= 2k, or off: lab/ab_wgmma_speed.py decisions()).
set -u
. "$(dirname "$0")/gpu_steps.sh"  # steps_json, step_limit, step
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
failed=()

compile_all() {
  python3 - <<'PY'
import os
from concurrent.futures import ProcessPoolExecutor
from kernels import fa2_wgmma, loader

def one(item):
    d, bf16, cfg = item
    defs = fa2_wgmma.defines_for(d, bf16, cfg)
    loader.compile_cubin(fa2_wgmma.source_of(defs)[0], defines=defs, arch=fa2_wgmma.ARCH)
    return 1

items = [(d, bf16, cfg) for d in fa2_wgmma.HEAD_DIMS for bf16 in (0, 1)
         for cfg in [fa2_wgmma.CONFIGS[d], fa2_wgmma.speed_configs(d)["rescale"]]
         + [fa2_wgmma.speed_configs(d)[n] for n in fa2_wgmma.DEFAULT_CANDIDATES[d]]]
with ProcessPoolExecutor(min(16, os.cpu_count() or 1)) as ex:
    print(sum(ex.map(one, items)), "fa2_wgmma builds compiled")
PY
}
smoke_d() {  # smoke_d D: every candidate at head dim D vs float64; "D:name" into smoke_ok.txt per candidate
  python3 - "$1" <<'PY'
import os, sys
import torch
from bench import harness
from kernels import KERNELS, fa2_wgmma
d, spec, bad = int(sys.argv[1]), KERNELS["fa2_wgmma"], 0
for name in fa2_wgmma.DEFAULT_CANDIDATES[d]:
    cfg, ok = fa2_wgmma.speed_configs(d)[name], True
    for grid in ((1, 3, None) if cfg.get("PERSISTENT") else (None,)):
        c = dict(cfg, **({"GRID": grid} if grid else {}))
        e = harness.Entry(f"{name} d={d} grid={grid}", spec.tier, spec, {}, c)
        for causal, dtype in ((False, torch.bfloat16), (True, torch.float16)):
            r = harness.check_one(e, 2, 3, 333, 1100, d, dtype, causal)
            ok = ok and bool(r.get("ok"))
            print(e.label, "causal" if causal else "", "ok" if r.get("ok") else f"WRONG {r}", flush=True)
    bad += not ok
    if ok:
        with open(os.path.join(os.environ["OUT"], "smoke_ok.txt"), "a") as f:
            f.write(f"{d}:{name} ")
raise SystemExit(1 if bad else 0)
PY
}
smoke() {
  : > "$OUT/smoke_ok.txt"
  local rc=0
  for d in 64 128 256 96; do  # d = 64 has three candidates, the others one
    timeout $([ $d = 64 ] && echo 20 || echo 11) bash -c "$(declare -f smoke_d); smoke_d $d" \
      || { echo "smoke d=$d: rc=$? (a hang or a wrong result)"; rc=1; }
  done
  echo "smoke passed: $(cat "$OUT/smoke_ok.txt")"
  return $rc
}
tests() {  # the shipped builds' tests first: a hang in a candidate must not cost them
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_tc.py tests/test_kernels_layouts.py \
    tests/test_kernels_wgmma_speed_gpu.py -k "(dynamic or ahead or rescale or empty_tiles or fa2_wgmma_matches_reference \
    or strided_gqa or new_head_dims) and not persist- and not poly" 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
  return "${PIPESTATUS[0]}"
}
memcheck() {
  local cfg
  cfg=$(python3 -c "
import json
from kernels import fa2_wgmma
grid = lambda c: dict(c, GRID=2) if c.get('PERSISTENT') else c  # 2 CTAs: more tiles than CTAs at Nq = 300
print(json.dumps({'fa2_wgmma': [{str(d): grid(fa2_wgmma.full_speed_config(d)) for d in fa2_wgmma.HEAD_DIMS}]}))")
  python3 bench/sanitize.py --out "$OUT/memcheck" --kernels fa2_wgmma --shapes 0 --dtypes float16 \
    --tools memcheck --only-configs --kernel-shapes 4 --timeout 37 --configs "$cfg"
}
ab() {  # each candidate only at the head dims where its smoke passed
  local v
  v=$(python3 -c "
from kernels import fa2_wgmma
ok = set(open('$OUT/smoke_ok.txt').read().split())
out = ['base']
for name in dict.fromkeys(n for c in fa2_wgmma.DEFAULT_CANDIDATES.values() for n in c):
    dims = [d for d in (64, 128, 256) if f'{d}:{name}' in ok]
    if dims:
        out.append(name + '@' + '+'.join(map(str, dims)))
print(','.join(out))")
  echo "A/B variants: $v"
  python3 lab/ab_wgmma_speed.py --out "$OUT" --budget-s 50 --seqs 512,1024,2048,8192 --sdpa cudnn \
    --variants "$v" > "$OUT/ab_wgmma_speed.txt" 2>&1
}

nvidia-smi -L | tee "$OUT/gpu.txt"
step compile 20 compile_all
step smoke 56 smoke
step tests 45 tests
step memcheck 42 memcheck
step ab 65 ab

echo
echo "== summary ($OUT)"
cat "$OUT/steps.txt"
echo "smoke passed: $(cat "$OUT/smoke_ok.txt" 2>/dev/null)"
echo "gpu_tests.log: $(grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -1)"
grep -E "^FAILED" "$OUT/gpu_tests.log" | head -10
python3 - "$OUT/memcheck/sanitize.json" <<'PY'
import json, sys
from pathlib import Path
p = Path(sys.argv[1])
if p.exists():
    for tool, r in json.loads(p.read_text()).get("tools", {}).items():
        done = [k for k in r["per_kernel_reports"]]
        print(f"sanitize {tool}: errors={r['errors']} wrong={r['wrong_results']} finished={r['finished']} "
              f"{r['seconds']} s, {len(done)} launches reached" +
              "".join(f"\n   {n} reports in {k}" for k, n in r["per_kernel_reports"].items() if n))
else:
    print(f"{p}: missing")
PY
echo
if [ -f "$OUT/ab_wgmma_speed.json" ]; then
  python3 lab/ab_wgmma_speed.py --summary "$OUT/ab_wgmma_speed.json"
else
  echo "no A/B result"; tail -5 "$OUT/ab_wgmma_speed.txt"
fi
[ ${#failed[@]} -eq 0 ] || { echo "FAILED steps: ${failed[*]}"; exit 1; }
