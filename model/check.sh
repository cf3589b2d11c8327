#!/usr/bin/env bash
# Model-check model/record.pml with spin (docs/MODEL.md): every variant must report 0 errors
# and every mutant at least one. Prints one summary line; exits non-zero on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SPIN=${SPIN:-spin}
command -v "$SPIN" >/dev/null || { echo "model check: spin not found (apt-get install spin)" >&2; exit 1; }
CC=${CC:-gcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME [spin -D flags...]: verify one variant; sets errors and states.
run() {
  local name=$1; shift
  local dir="$work/$name"
  mkdir -p "$dir"
  cp "$here/record.pml" "$dir/"
  (cd "$dir" && "$SPIN" "$@" -a record.pml >spin.out 2>&1) || { cat "$dir/spin.out" >&2; return 1; }
  (cd "$dir" && "$CC" -O2 -w -DSAFETY -o pan pan.c) || return 1
  # -m: search depth; -E is not given, so invalid end states count as errors.
  (cd "$dir" && ./pan -m100000 >pan.out 2>&1) || true
  errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$dir/pan.out" | tail -n 1)
  states=$(sed -n 's/^ *\([0-9][0-9.e+]*\) states, stored.*/\1/p' "$dir/pan.out" | tail -n 1)
  if [ -z "$errors" ]; then
    echo "model check: $name: no verdict from pan" >&2
    cat "$dir/pan.out" >&2
    return 1
  fi
  if grep -q 'max search depth too small' "$dir/pan.out"; then
    echo "model check: $name: search depth too small (the search was truncated)" >&2
    return 1
  fi
  pan_out="$dir/pan.out"
}

failed=0
summary=()
# The protocol: pure transition() + a reaper, Redis's load(), and transition() without reaping.
for variant in "base:" "redis:-DREDIS" "no_purge:-DNO_PURGE"; do
  name=${variant%%:*}; flags=${variant#*:}
  # shellcheck disable=SC2086
  run "$name" $flags || { failed=1; continue; }
  if [ "$errors" != 0 ]; then
    echo "model check: $name: $errors error(s), expected 0:" >&2
    grep -E 'pan:|assertion|invalid end' "$pan_out" >&2 || true
    failed=1
  fi
  # Non-vacuity: in the base model every statement of the worker is reached, each branch of
  # every transition() row included (a property over unreachable code would prove nothing).
  if [ "$name" = base ] && ! sed -n '/unreached in proctype worker/{n;p}' "$pan_out" | grep -q '^\s*(0 of'; then
    echo "model check: $name: parts of the worker are never reached:" >&2
    sed -n '/unreached in proctype worker/,/unreached in proctype ticker/p' "$pan_out" >&2
    failed=1
  fi
  summary+=("$name $errors errors ($states states)")
done

# must_fail NOUN WHY NAME:FLAGS...: each variant is built with -DNAME (plus FLAGS) and must
# report an error; sets `found` to how many did. Mutants break a rule of transition() (or
# invariant 2) and must be caught; witnesses assert that a scenario never happens, so their
# failing proves the scenario is searched.
must_fail() {
  local noun=$1 why=$2 entry name extra
  shift 2
  found=0
  for entry in "$@"; do
    name=${entry%%:*}; extra=${entry#*:}
    # shellcheck disable=SC2086
    run "$name" "-D$name" $extra || { failed=1; continue; }
    if [ "$errors" -ge 1 ]; then
      found=$((found + 1))
    else
      echo "model check: $noun $name $why" >&2
      failed=1
    fi
  done
}

mutants=(
  "MUTANT_NO_FENCE_CHECK:"
  "MUTANT_EARLY_RECLAIM:"
  "MUTANT_TTL_FROM_CLAIM:"
  "MUTANT_HOLDER_OUTLIVES_RECORD:-DREDIS"
)
must_fail mutant "was NOT caught (errors: 0)" "${mutants[@]}"
caught=$found

witnesses=("COVER_RESTART:-DREDIS" "COVER_ZOMBIE:")
must_fail witness "never happened: the model no longer searches it" "${witnesses[@]}"
reached=$found

echo "model check: record.pml $(IFS=';'; echo "${summary[*]}" | sed 's/;/, /g'); mutants caught $caught/${#mutants[@]}; scenarios reached $reached/${#witnesses[@]}"
exit "$failed"
