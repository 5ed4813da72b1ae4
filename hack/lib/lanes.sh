# shellcheck shell=bash
# Runs the workspace's test binaries side by side, sourced by hack/test.sh:
#   run_in_lanes <lanes> <test-threads> <summary-file>
# Each test binary starts a control plane of its own (etcd, API servers, a
# node on its own address block) and spends most of its time waiting on it,
# so <lanes> binaries run at once, each with --test-threads=<test-threads>,
# in the directory of its package (as `cargo test` runs it). A binary's
# output is printed whole when it ends, never interleaved with another's,
# under one "==> <name>: passed|FAILED (<secs>s)" line. Every binary runs
# even when one fails. Appends every binary's "test result:" lines to
# <summary-file>; returns 1 when any binary failed.
#
# The binaries known to take minutes start first, so that none of them is
# left running alone at the end; the rest follow in cargo's order.

SLOW_FIRST=(upstream_examples package_scale package_boundary restarts outage
  packages_modes packages demo shipped_packages resilience trust stacks)

# "<package dir> <executable>" per test binary, from cargo's build plan of
# `cargo test` (built already: this only lists them).
test_binaries() {
  cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
    grep '"profile":{[^}]*"test":true' |
    sed -n 's/.*"manifest_path":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p' |
    while read -r manifest exe; do printf '%s %s\n' "$(dirname "$manifest")" "$exe"; done
}

# The binary's name without cargo's hash: target/debug/deps/objects-0a1b -> objects.
binary_name() { local b; b=$(basename "$1"); printf '%s' "${b%-*}"; }

run_in_lanes() {
  local lanes=$1 threads=$2 summary=$3 logs failed=0
  logs=$(mktemp -d)
  local -a plan=() ordered=()
  mapfile -t plan < <(test_binaries)
  [[ ${#plan[@]} -gt 0 ]] || { echo "test: cargo listed no test binaries" >&2; return 1; }
  local slow line
  for slow in "${SLOW_FIRST[@]}"; do
    for line in "${plan[@]}"; do
      [[ $(binary_name "${line#* }") == "$slow" ]] && ordered+=("$line")
    done
  done
  for line in "${plan[@]}"; do
    [[ " ${SLOW_FIRST[*]} " == *" $(binary_name "${line#* }") "* ]] || ordered+=("$line")
  done

  one() {
    local dir=$1 exe=$2 name log start status
    name=$(binary_name "$exe")
    log="$logs/$(basename "$exe").log"
    start=$(date +%s)
    (cd "$dir" && "$exe" --test-threads="$threads") >"$log" 2>&1
    status=$?
    {
      if [[ $status -eq 0 ]]; then
        printf '\n==> %s: passed (%ds)\n' "$name" $(($(date +%s) - start))
      else
        printf '\n==> %s: FAILED, exit %d (%ds)\n' "$name" "$status" $(($(date +%s) - start))
      fi
      cat "$log"
    } | flock "$logs" cat
    grep '^test result:' "$log" | flock "$logs" tee -a "$summary" >/dev/null
    return "$status"
  }

  local -A running=()
  local pid
  for line in "${ordered[@]}"; do
    while [[ ${#running[@]} -ge $lanes ]]; do
      wait -n -p pid || failed=1
      unset "running[$pid]"
    done
    printf '==> %s: started\n' "$(binary_name "${line#* }")" | flock "$logs" cat
    one "${line%% *}" "${line#* }" &
    running[$!]=1
  done
  for pid in "${!running[@]}"; do
    wait "$pid" || failed=1
  done
  rm -rf "$logs"
  return "$failed"
}
