#!/usr/bin/env bash
# ncu evidence for issue 14's moonshot (what stands between fa2_wgmma and FA3 / cuDNN): fa2_wgmma's default build
# against SDPA's cuDNN backend on lab/ncu_moonshot_target.py's cells, with the Speed Of Light, compute
# workload and warp state (stall reasons) sections. ~1 minute on the H200.
#
#   PYTHONPATH=. bash lab/ncu_moonshot.sh      # OUT=<dir>
#
# Writes $OUT/ncu_moonshot.csv (ncu --csv --page details, with the target's "target launched" lines) and prints
# per launch: duration, tensor pipe, issue slots busy, warp cycles per issued instruction and the top stalls.
set -u
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
timeout 200 ncu --clock-control none --csv --page details --kernel-name "regex:fa2_wgmma|fprop" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats python3 lab/ncu_moonshot_target.py > "$OUT/ncu_moonshot.csv" 2> "$OUT/ncu_moonshot.stderr"
rc=$?
echo "ncu rc=$rc"
python3 lab/ncu_moonshot_summary.py "$OUT/ncu_moonshot.csv"
exit $rc
