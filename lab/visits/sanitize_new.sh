#!/usr/bin/env bash
# compute-sanitizer on this session's new paths (issue 42 item 4, issue 44): memcheck on the full targets, racecheck
# and synccheck on their `small` modes, of the Hopper backward (lab/bwd_wgmma_sanitize_target.py: GQA/MQA, strided
# views, d = 64/96/128/256, deterministic) and the decode kernels (lab/decode_sanitize_target.py: split_kv,
# split_kv_fast, contiguous and paged, num_splits > 1).
#
#   PYTHONPATH=. OUT=... bash lab/visits/sanitize_new.sh [memcheck] [racecheck] [synccheck]   (default: all three)
#
# Environment: PRECOMPILE=1 (0: skip lab/precompile_bwd.py --new, e.g. after lab/visits/s31_bwd.sh ran it), JOBS=16,
# LIM_<tool>_<target> seconds per run (defaults below; e.g. LIM_memcheck_bwd=200). Each run is under `timeout`; one
# that hits it keeps its partial log (finished: false). Writes 2 files to $OUT: sanitize_new.log (every run's
# output, in order) and sanitize_new.json (per run: errors from the sanitizer's summary less cuda.bindings'
# failed cuGetProcAddress lookups, counted apart as bench/sanitize.py does; reports per shape; wrong results;
# finished; rc; seconds). Prints one line per run. Exit 1 unless every run finished with 0 errors and 0 wrong.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d /tmp/sanitize_new.XXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/sanitize_new_logs.XXXX)  # per-run logs; only the two summaries go to $OUT (few files return)
python3 -m pip uninstall -y kernels > /dev/null 2>&1  # HF's `kernels` shadows ours (kernels/hf.py)
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | sort -r | head -1)
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck)
declare -A LIM=([memcheck_bwd]=150 [memcheck_decode]=100 [racecheck_bwd]=80 [racecheck_decode]=60
                [synccheck_bwd]=60 [synccheck_decode]=45)

if [ "${PRECOMPILE:-1}" = 1 ]; then  # NVRTC inside the sanitizer would eat the runs' time limits
  t=$(date +%s)
  timeout "${LIM_precompile:-200}" python3 lab/precompile_bwd.py --new --jobs "${JOBS:-16}" > "$WORK/precompile.log" 2>&1
  echo "precompile rc=$? $(( $(date +%s) - t )) s: $(tail -1 "$WORK/precompile.log" | cut -c1-300)"
fi

runs=()
for tool in "${tools[@]}"; do
  case "$tool" in memcheck|racecheck|synccheck) ;; *) echo "unknown tool $tool (memcheck, racecheck, synccheck)"; exit 2 ;; esac
  mode=$([ "$tool" = memcheck ] || echo small)  # racecheck and synccheck: the small modes
  for target in bwd decode; do
    name=${tool}_$target
    script=lab/$([ $target = bwd ] && echo bwd_wgmma || echo decode)_sanitize_target.py
    override="LIM_$name"; lim=${!override:-${LIM[$name]}}
    t=$(date +%s)
    if [ -z "$SANITIZER" ]; then
      echo "compute-sanitizer not found" > "$WORK/$name.log"; rc=127
    else
      # shellcheck disable=SC2086
      timeout -k 10 "$lim" "$SANITIZER" --tool "$tool" --report-api-errors explicit --print-limit 50 \
        --error-exitcode 3 python3 "$script" $mode > "$WORK/$name.log" 2>&1
      rc=$?
    fi
    echo "$rc $(( $(date +%s) - t )) $lim" > "$WORK/$name.rc"
    runs+=("$name")
  done
done

{ for name in "${runs[@]}"; do echo "==================== $name (rc, seconds, limit: $(cat "$WORK/$name.rc"))"
    cat "$WORK/$name.log"; done; } > "$OUT/sanitize_new.log"
python3 - "$WORK" "$OUT/sanitize_new.json" "${runs[@]}" <<'EOF'
import json, sys
from pathlib import Path

from bench.sanitize import count_errors, driver_probes

work, out, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
report, failed = {}, False
for name in names:
    tool = name.split("_")[0]
    log = (work / f"{name}.log").read_text(errors="replace")
    rc, secs, lim = (int(x) for x in (work / f"{name}.rc").read_text().split())
    errors, per_shape = count_errors(log, tool)
    lines = log.splitlines()
    wrong = sum(1 for x in lines if x.endswith(" BAD") or x.startswith("@@FAILED"))
    shapes = sum(1 for x in lines if x.endswith(" ok") or x.endswith(" BAD"))
    rec = dict(errors=errors, driver_entry_point_lookups=driver_probes(log),
               reports_per_shape={k: n for k, n in per_shape.items() if n}, shapes_checked=shapes,
               wrong_results=wrong, finished="@@DONE" in log, returncode=rc, seconds=secs, limit_s=lim)
    report[name] = rec
    failed |= errors != 0 or wrong > 0 or not rec["finished"]
    print(f"{name}: {errors} errors (not counting {rec['driver_entry_point_lookups']} failed cuGetProcAddress "
          f"lookups), {shapes} shapes checked, {wrong} wrong, finished={rec['finished']}, rc={rc}, {secs} s "
          f"(limit {lim})", flush=True)
    for label, n in rec["reports_per_shape"].items():
        print(f"   {n} reports in {label}")
out.write_text(json.dumps(report, indent=1))
sys.exit(1 if failed else 0)
EOF
rc=$?
echo "logs: $OUT/sanitize_new.log, summary: $OUT/sanitize_new.json"
exit $rc
