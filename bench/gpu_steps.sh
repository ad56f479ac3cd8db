# Step bookkeeping shared by the bench/gpu_*.sh scripts (they source this file).

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
