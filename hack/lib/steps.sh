# shellcheck shell=bash
# The process handling hack/build-binaries.sh and
# hack/install-debian-packages.sh share, sourced by both:
#   log, die            a "$PROG: " line on stderr (die then exits 1)
#   fmt_secs <secs>     "<m>m<ss>s"
#   on_signal, install_signal_traps
#                       INT/TERM/HUP stop the running background job (CHILD)
#                       and exit 130
#   run_bg              a command under `timeout` as a background job
#   run_logged          run_bg into a log file; on failure the log's tail and
#                       one line naming the step, and exit 1
# Expects PROG (the name messages start with) set by the sourcing script.
# Sourcing only defines these functions and the variables CHILD and CHILD_SIG;
# traps are the scripts' to install (install_signal_traps).

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

CHILD=""          # pid of the currently running background job
CHILD_SIG=INT     # signal that stops it (see run_bg)

# on_signal <SIG>: stops CHILD (with CHILD_SIG) and exits 130. A script that
# starts a background job of its own sets CHILD and CHILD_SIG (a background
# subshell ignores SIGINT: TERM, which its own trap forwards).
on_signal() {
  log "interrupted by SIG$1 — stopping"
  if [[ -n "$CHILD" ]]; then kill -"$CHILD_SIG" "$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
  exit 130
}

# install_signal_traps: INT, TERM and HUP call on_signal.
install_signal_traps() {
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
  trap 'on_signal HUP' HUP
}

# run_bg <timeout-secs> <stdout-file> <stderr-file> <cmd...>
# Runs cmd under `timeout` as a background job and waits for it, so that the
# INT/TERM/HUP traps (install_signal_traps) can stop it: they send SIGINT to
# timeout, which forwards it to the command's whole process group (timeout
# gives it its own). On expiry timeout also sends SIGINT, then SIGKILL 30s
# later. Returns cmd's status.
run_bg() {
  local secs="$1" out="$2" err="$3" rc=0
  shift 3
  timeout -s INT --kill-after=30 "$secs" "$@" >>"$out" 2>>"$err" </dev/null &
  CHILD=$! CHILD_SIG=INT
  wait "$CHILD" || rc=$?
  CHILD=""
  return "$rc"
}

# run_logged <what> <timeout-secs> <logfile> <cmd...>
# Runs cmd with a timeout, stdout+stderr appended to logfile. On failure prints
# the tail of the log and then one line naming the step and the reason, and exits.
run_logged() {
  local what="$1" secs="$2" logf="$3" rc=0 reason
  shift 3
  { printf '### %s\n### %s\n' "$(date -u +%FT%TZ)" "$*"; } >>"$logf"
  run_bg "$secs" "$logf" "$logf" "$@" || rc=$?
  ((rc == 0)) && return 0
  if ((rc == 124 || rc == 137)); then
    die "$what timed out after ${secs}s (full log: $logf)"
  fi
  tail -n 15 "$logf" | sed 's/^/  | /' >&2
  reason="$(grep -v '^[[:space:]]*$' "$logf" | grep -v '^###' | tail -n 1 | cut -c1-400)"
  die "$what failed (exit $rc): ${reason:-no output} (full log: $logf)"
}
