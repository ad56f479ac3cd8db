# Step bookkeeping shared by the bench/gpu_*.sh scripts (they source this file): steps_json, step_limit, step,
# left, cap.

# steps_json FILE STEP...: write {"step": {"rc": .., "seconds": ..}, ...} from the caller's RC and SECS
# associative arrays, in the order given.
steps_json() {
  local file=$1 first=1 step
  shift
  {
    echo "{"
    for step in "$@"; do
      [ $first -eq 1 ] || echo ","
      first=0
      printf '  "%s": {"rc": %s, "seconds": %s}' "$step" "${RC[$step]}" "${SECS[$step]}"
    done
    echo; echo "}"
  } > "$file"
}

# step_limit NAME DEFAULT: the step's time limit, LIMIT_<NAME> from the environment if set (e.g. LIMIT_ab=40).
step_limit() {
  local override="LIMIT_$1"
  echo "${!override:-$2}"
}

# step NAME SECONDS FUNCTION: run the shell function FUNCTION (with every function defined, so it may call
# helpers) under a time limit (LIMIT_<NAME> overrides SECONDS), append "NAME rc=.. ..s" to $OUT/steps.txt, add
# NAME to the caller's `failed` array when rc != 0, and keep going (so a slow or hung step costs only itself).
step() {
  local name=$1 limit=$2; shift 2
  limit=$(step_limit "$name" "$limit")
  local t0=$(date +%s)
  echo "=== $name" >&2
  timeout "$limit" bash -c "$(declare -f); $1"
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/steps.txt"
  [ $rc -eq 0 ] || failed+=("$name")
}

# left: seconds of the caller's TOTAL_S budget left since T0 (at least 10); cap STEP: the smaller of
# CAP[STEP] (default 60) and what is left.
left() { local l=$(( TOTAL_S - ($(date +%s) - T0) )); [ "$l" -gt 10 ] && echo "$l" || echo 10; }
cap() { local c=${CAP[$1]:-60} l; l=$(left); [ "$c" -lt "$l" ] && echo "$c" || echo "$l"; }
