#!/usr/bin/env bash
# GPU counters for the GPU model's levels (issue 11, item 5): where L2 traffic comes from, DRAM bytes,
# tensor-pipe activity, instructions issued (fa2_tc vs SDPA flash: the ranking's known gap) and duration
# of fa2_wgmma, fa2_tc, v_once_tc (lazy; eager at N = 4096), SDPA flash and cuDNN
# (lab/ncu_levels_target.py: d = 64, 128 at N = 4096 non-causal and causal; d = 128 at N = 16384).
#
#   PYTHONPATH=. bash lab/ncu_levels.sh        # on the H200; ~1-3 minutes
#
# Writes $OUT/ncu_levels.csv (ncu --csv, with the "target launched" lines gpumodel/measured.py reads),
# $OUT/ncu_metrics_available.txt (which of the wanted metrics this ncu knows; unknown ones are dropped
# rather than failing the run) and prints the model-vs-counter table last. Commit ncu_levels.csv to
# results/: `fa-traffic validate` then checks L2 request bytes against the SM-side crossbar bytes
# (l1tex__m_xbar2l1tex_read_bytes + l1tex__m_l1tex2xbar_write_bytes; docs/gpu-model.md says why not srcunit_tex).
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
WANTED=(
  gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum lts__t_sectors.sum
  lts__t_sectors_srcunit_tex.sum lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_tex_op_write.sum
  lts__t_sectors_srcunit_ltcfabric.sum lts__t_sectors_srcunit_tex_lookup_hit.sum
  lts__t_sectors_srcunit_tex_lookup_miss.sum lts__t_requests_srcunit_tex.sum
  lrc__t_sectors.sum lrc__t_requests.sum lrc__l2_to_lrc_sectors.sum
  l1tex__m_xbar2l1tex_read_bytes.sum l1tex__m_l1tex2xbar_write_bytes.sum
  l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__throughput.avg.pct_of_peak_sustained_elapsed sm__warps_active.avg.pct_of_peak_sustained_active
  launch__registers_per_thread launch__shared_mem_per_block_dynamic launch__occupancy_limit_registers
  sm__cycles_elapsed.avg.per_second
  smsp__inst_executed.sum smsp__inst_executed_pipe_xu.sum smsp__inst_executed_pipe_fma.sum
  smsp__inst_executed_pipe_alu.sum
)
ncu --query-metrics --csv > "$OUT/ncu_query.csv" 2>&1 || true
metrics=()
for m in "${WANTED[@]}"; do
  base=${m%%.*}
  if grep -q "\"$base\"\|^$base\b\|^\"$base\"" "$OUT/ncu_query.csv"; then metrics+=("$m"); else echo "not available: $m"; fi
done | tee "$OUT/ncu_metrics_available.txt"
# re-run the filter outside the pipe (a pipe runs the loop in a subshell)
metrics=()
for m in "${WANTED[@]}"; do
  base=${m%%.*}
  grep -q "$base" "$OUT/ncu_query.csv" && metrics+=("$m")
done
[ ${#metrics[@]} -gt 0 ] || metrics=(gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum)
list=$(IFS=,; echo "${metrics[*]}")
echo "profiling ${#metrics[@]} metrics"
t0=$(date +%s)
timeout 220 ncu --clock-control none --csv --kernel-name "regex:fa2_|v_once|flash_fwd|fprop" --metrics "$list" \
  python3 lab/ncu_levels_target.py > "$OUT/ncu_levels.csv" 2> "$OUT/ncu_levels.stderr"
rc=$?
echo "ncu rc=$rc, $(( $(date +%s) - t0 )) s"
python3 - "$OUT/ncu_levels.csv" <<'PY'
import sys
from gpumodel import gpu_model as gm
from gpumodel.fit_gpu_model import work_of
from gpumodel.measured import read_ncu_csv
cells = read_ncu_csv(sys.argv[1])
print(f"{'kernel':22s} {'n':>6s} {'d':>4s} {'causal':>6s} {'t ncu ms':>9s} {'t/model':>8s} {'DRAM/model':>10s} "
      f"{'lts/model':>9s} {'tex/model':>9s} {'sm/model':>8s} {'Ginstr':>7s}")
for c in cells:
    p = gm.predict_work(work_of(c))
    tex = c.get("l2_tex_bytes")
    print(f"{c['label']:22s} {c['n_q']:6d} {c['d']:4d} {int(c['causal']):6d} {c['duration_s'] * 1e3:9.3f} "
          f"{c['duration_s'] / (p.time_s - p.terms['overhead']):8.3f} {c['dram_bytes'] / p.dram_bytes:10.3f} "
          f"{(c['lts_bytes'] or 0) / p.l2_bytes:9.3f} {(tex or 0) / p.l2_bytes:9.3f} "
          f"{(c.get('l2_sm_bytes') or 0) / p.l2_bytes:8.3f} "
          f"{(c.get('instructions') or 0) / 1e9:7.3f}")
PY
exit $rc
