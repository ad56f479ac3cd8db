#!/usr/bin/env bash
# The session's last H200 visit (~9.5 minutes): every GPU check that had not yet run on the final code, each
# under its own time limit, so one slow or hung step costs only itself. In order:
#   probe    lab/cluster_probe.py: clusters resident per size, SMs per GPC, DSMEM bytes/clock, barrier cycles
#            (the cluster GPU model's constants)                                   -> probe/cluster_probe.json
#   cluster  lab/gpu_check_cluster.sh (issue 18): tests, memcheck, racecheck, the speed grid (fp16 then bf16,
#            N = 512..16k, d = 64/128, causal and not, B*H <= 16 cells), ncu             -> cluster/
#   speed    lab/gpu_check_speed.sh (issue 14): the shipped fa2_wgmma builds' tests, smoke, memcheck, A/B -> speed/
#   teach    lab/gpu_check_teach_bwd.sh (issue 13): teaching fa2 and naive backward tests, sanitizers, A/B -> teach/
# Everything is tarred into $OUT/final.tgz (the device tool returns few files).
#
#   PYTHONPATH=. bash lab/gpu_visit_final.sh
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
ROOT_OUT=${OUT:-$(mktemp -d)}
W=$ROOT_OUT/w; mkdir -p "$W/probe" "$W/cluster" "$W/speed" "$W/teach"
T0=$(date +%s)
stamp() { echo "== $1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a "$W/steps.txt"; }

OUT=$W/probe timeout 35 python3 lab/cluster_probe.py > "$W/probe/run.txt" 2>&1; stamp probe $?
tail -12 "$W/probe/run.txt"

OUT=$W/cluster LIMIT_compile=35 LIMIT_tests_smoke=20 LIMIT_tests_main=45 LIMIT_tests_candidates=12 \
  LIMIT_memcheck=25 LIMIT_racecheck=25 LIMIT_speed_main=85 LIMIT_speed_candidates=1 LIMIT_memcheck_candidates=1 \
  LIMIT_ncu=15 SPEED_ARGS="--n 512,1024,2048,4096,8192,16384 --dtypes float16,bfloat16" \
  timeout 270 bash lab/gpu_check_cluster.sh > "$W/cluster/run.txt" 2>&1; stamp cluster $?
sed -n '/== summary/,$p' "$W/cluster/run.txt" | head -120

OUT=$W/speed LIMIT_compile=20 LIMIT_smoke=45 LIMIT_tests=40 LIMIT_memcheck=25 LIMIT_ab=38 \
  timeout 170 bash lab/gpu_check_speed.sh > "$W/speed/run.txt" 2>&1; stamp speed $?
tail -45 "$W/speed/run.txt"

OUT=$W/teach TOTAL_S=92 timeout 98 bash lab/gpu_check_teach_bwd.sh > "$W/teach/run.txt" 2>&1; stamp teach $?
tail -40 "$W/teach/run.txt"

tar czf "$ROOT_OUT/final.tgz" -C "$W" . && rm -rf "$W"
