#!/usr/bin/env bash
# The measurements that would settle the GPU model's remaining gaps (docs/gpu-model.md "Not done",
# results/gpu_model_known_gaps.json), with lab/ncu_levels.sh's counters; ~2-3 minutes on the H200:
#   capacity  d = 128, N = 24576 and 49152 (B = 1, H = 16), fa2_wgmma, fa2_tc, SDPA flash, non-causal:
#             between the committed 16k / 32k / 64k rows. fa2_wgmma's reuse distance crosses the effective L2
#             capacity at 24k-32k, so its DRAM bytes pin the capacity (gpumodel/residency.py: 30 MiB vs ~36);
#             fa2_tc beside SDPA flash says whether fa2_tc's 16k-64k misses follow a trend.
#   v_once    d = 64 and 128, N = 2048, v_once_tc f in HBM (lazy and eager), non-causal: the eager cell whose
#             model/measured time drifts from 1.02-1.09x at N = 2048 to 0.90-0.93x at 4096 with the same
#             occupancy; its DRAM bytes test the residency ramp's miss share at N = 2048.
#
#   PYTHONPATH=. bash lab/gpu_gaps_check.sh
#
# Writes $OUT/capacity/ncu_levels.csv and $OUT/v_once/ncu_levels.csv (+ each run's stderr and metric list).
# Commit them as results/ncu_gaps_capacity.csv and results/ncu_gaps_v_once.csv (gpumodel/measured.py
# reads every *ncu*.csv) and run `fa-traffic validate`. The last table: DRAM/model and t/model per launch.
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/capacity" "$OUT/v_once"
here=$(dirname "$0")
OUT="$OUT/capacity" NCU_LEVELS_SHAPES=24576x128,49152x128 NCU_LEVELS_KERNELS=fa2_tc,fa2_wgmma,sdpa_flash \
  timeout 150 bash "$here/ncu_levels.sh" > "$OUT/capacity/run.log" 2>&1
echo "capacity rc=$?"
OUT="$OUT/v_once" NCU_LEVELS_SHAPES=2048x64,2048x128 NCU_LEVELS_KERNELS="v_once_tc[hbm,lazy],v_once_tc[hbm,eager]" \
  timeout 90 bash "$here/ncu_levels.sh" > "$OUT/v_once/run.log" 2>&1
echo "v_once rc=$?"
python3 - "$OUT/capacity/ncu_levels.csv" "$OUT/v_once/ncu_levels.csv" <<'PY'
import sys
from gpumodel import gpu_model as gm
from gpumodel.fit_gpu_model import work_of
from gpumodel.measured import read_ncu_csv
print(f"{'kernel':22s} {'n':>6s} {'d':>4s} {'t ncu ms':>9s} {'t/model':>8s} {'DRAM GB':>8s} {'DRAM/model':>10s} {'L2/model':>9s}")
for path in sys.argv[1:]:
    try:
        cells = read_ncu_csv(path)
    except OSError:
        print(f"{path}: missing")
        continue
    for c in cells:
        p = gm.predict_work(work_of(c))
        print(f"{c['label']:22s} {c['n_q']:6d} {c['d']:4d} {c['duration_s'] * 1e3:9.3f} "
              f"{c['duration_s'] / (p.time_s - p.terms['overhead']):8.3f} {c['dram_bytes'] / 1e9:8.3f} "
              f"{c['dram_bytes'] / p.dram_bytes:10.3f} {(c.get('l2_sm_bytes') or 0) / p.l2_bytes:9.3f}")
PY
