#!/usr/bin/env bash
# Installs the Debian packages crossplane-rs's tests use, each only when it is
# missing: by default the test node's container runtime — containerd, runc,
# the CNI plugins (containernetworking-plugins: bridge, host-local, loopback,
# portmap) and iptables (for kube-proxy and the bridge plugin's
# masquerading). Idempotent: when all are there it says so and touches
# nothing (no root, no apt-get, no network). Installing needs root and
# apt-get.
#
#   hack/install-debian-packages.sh                  # the test node's packages
#   hack/install-debian-packages.sh docker-registry  # hack/build-binaries.sh's registry fallback
#
# Prints nothing on stdout; progress goes to stderr. hack/test.sh, hack/run.sh
# and the benchmark scripts run it after hack/build-binaries.sh. apt-get's
# output goes to ${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/logs/
# (node-packages-apt.log, or <package>-apt.log for named packages).
#
# Environment knobs:
#   CROSSPLANE_RS_CACHE           cache root, for the log and the lock (default $HOME/.cache/crossplane-rs)
#   CROSSPLANE_RS_FETCH_TIMEOUT   seconds per apt-get step (default 1800)
#   CROSSPLANE_RS_LOCK_TIMEOUT    seconds to wait for a concurrent run (default 7200)
set -euo pipefail

PROG=install-debian-packages
# log, die, fmt_secs, signal traps, run_bg, run_logged
# shellcheck source=lib/steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/steps.sh"

# package_present <package>: whether what the tests use of it is there.
package_present() {
  case "$1" in
    containerd) command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 ;;
    runc) command -v runc >/dev/null 2>&1 || [[ -x /usr/sbin/runc ]] ;;
    containernetworking-plugins) [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /usr/lib/cni/portmap ]] ;;
    iptables) command -v iptables >/dev/null 2>&1 || [[ -x /usr/sbin/iptables ]] ;;
    docker-registry) [[ -x /usr/bin/docker-registry ]] ;;
    *) return 2 ;;
  esac
}

if (($# == 0)); then
  # The test node's container runtime.
  PACKAGES=(containerd runc containernetworking-plugins iptables)
  WHAT="node packages" WHO="the test node" LOG_NAME=node-packages-apt.log
else
  PACKAGES=("$@")
  WHAT="packages" WHO="crossplane-rs" LOG_NAME="$(IFS=-; printf '%s' "$*")-apt.log"
  for p in "${PACKAGES[@]}"; do
    rc=0; package_present "$p" || rc=$?
    ((rc != 2)) || die "$p is not one of the packages this script knows how to check for (containerd, runc, containernetworking-plugins, iptables, docker-registry)"
  done
fi

# Sets MISSING to the packages not present.
find_missing() {
  local p
  MISSING=()
  for p in "${PACKAGES[@]}"; do package_present "$p" || MISSING+=("$p"); done
}

find_missing
if ((${#MISSING[@]} == 0)); then log "$WHAT: installed (${PACKAGES[*]})"; exit 0; fi

command -v apt-get >/dev/null 2>&1 ||
  die "$WHO needs ${MISSING[*]} and apt-get is not available — install them with your package manager"
[[ "$(id -u)" == 0 ]] ||
  die "$WHO needs ${MISSING[*]}: run 'apt-get install ${MISSING[*]}' as root (or rerun this as root)"
for tool in flock timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH — install util-linux/coreutils"
done

if [[ -z "${CROSSPLANE_RS_CACHE:-}" && -z "${HOME:-}" ]]; then
  die "neither CROSSPLANE_RS_CACHE nor HOME is set — cannot pick a cache directory"
fi
CACHE="${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}"
mkdir -p "$CACHE/logs" || die "cannot create cache directory $CACHE"
CACHE="$(cd "$CACHE" && pwd -P)"
FETCH_TIMEOUT="${CROSSPLANE_RS_FETCH_TIMEOUT:-1800}"
LOCK_TIMEOUT="${CROSSPLANE_RS_LOCK_TIMEOUT:-7200}"

# apt-get runs as a background job (run_bg) so that INT/TERM/HUP stop it.
install_signal_traps

# ---------------------------------------------------------------------------
# Main: one run at a time installs (apt-get itself refuses a second one).
# ---------------------------------------------------------------------------
exec 9>"$CACHE/.debian-packages.lock"
if ! flock -n 9; then
  log "another run holds $CACHE/.debian-packages.lock — waiting up to ${LOCK_TIMEOUT}s…"
  flock -w "$LOCK_TIMEOUT" 9 || die "timed out after ${LOCK_TIMEOUT}s waiting for $CACHE/.debian-packages.lock (is another install stuck?)"
fi
# Another run may have installed them meanwhile.
find_missing
if ((${#MISSING[@]} == 0)); then log "$WHAT: installed (${PACKAGES[*]})"; exit 0; fi

logf="$CACHE/logs/$LOG_NAME"
log "$WHAT: installing ${MISSING[*]} with apt-get (for $WHO)…"
t0=$SECONDS
apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${MISSING[@]}")
: >"$logf"
if ! run_bg "$FETCH_TIMEOUT" "$logf" "$logf" "${apt[@]}"; then
  log "$WHAT: apt-get install failed; running apt-get update and trying again…"
  run_logged "$WHAT: apt-get update" "$FETCH_TIMEOUT" "$logf" apt-get update
  run_logged "$WHAT: apt-get install ${MISSING[*]}" "$FETCH_TIMEOUT" "$logf" "${apt[@]}"
fi
for p in "${MISSING[@]}"; do
  package_present "$p" || die "$WHAT: $p is still missing after apt-get install (log: $logf)"
done
log "$WHAT: installed ${MISSING[*]} in $(fmt_secs $((SECONDS - t0)))"
