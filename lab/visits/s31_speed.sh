#!/usr/bin/env bash
# Session 31 visit B: speed, one run on one card. Issue 42's backward layouts against cuDNN, issue 44's decode against
# SDPA and the copy bandwidth, issue 40's A/B of this tree against AB_OLD (forward and backward bits and times).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt"
step() {  # name limit command...
  local name=$1 lim=$2; shift 2; local t=$(date +%s)
  timeout "$lim" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s"; tail -${TAIL:-15} "$OUT/$name.log"
}
for s in ${STEPS:-bwd decode ab}; do case $s in
  bwd)    step bwd_layouts ${LIM_BWD:-260} python3 bench/bwd_layouts_speed.py --out "$OUT" --budget-s ${BUDGET_BWD:-200} ;;
  decode) step decode ${LIM_DECODE:-240} python3 bench/decode_speed.py --out "$OUT" --budget-s ${BUDGET_DECODE:-180} ;;
  ab)     step ab 200 bash -c "for t in old-1 new-1 new-2 old-2; do p=.; [ \${t#old} != \$t ] && p=${AB_OLD:-.abbase}:.; \
PYTHONPATH=\$p python3 bench/ab_speed.py --backward --tag \$t --out $OUT || exit 1; done; python3 bench/ab_speed.py compare $OUT" ;;
esac; done
