#!/usr/bin/env bash
# The README's test command: everything CI checks, from a fresh clone.
#   1. builds the pinned upstream Kubernetes binaries (once per version, cached
#      outside the repo) with hack/build-binaries.sh, and installs the test
#      node's Debian packages when missing with hack/install-debian-packages.sh;
#   2. checks formatting, clippy and that crds/ matches the types;
#   3. builds the six binaries and runs every test against real API servers.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n==> %s (%ds)\n' "$*" $(( $(date +%s) - start )) >&2; }

command -v cargo >/dev/null || { echo "test: cargo not found: install Rust (rustup) first" >&2; exit 1; }
command -v openssl >/dev/null || { echo "test: openssl not found: apt-get install openssl" >&2; exit 1; }

step "building upstream binaries (etcd, kube-apiserver, kube-controller-manager, kubectl, registry)"
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
[[ -n "${CROSSPLANE_RS_BIN:-}" ]] || { echo "test: hack/build-binaries.sh did not print CROSSPLANE_RS_BIN" >&2; exit 1; }
step "installing the test node's Debian packages when missing (containerd, runc, CNI plugins, iptables)"
hack/install-debian-packages.sh

# Two cores: keep rustc from oversubscribing them while test servers run.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"

step "rustfmt"
cargo fmt --all --check
step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "building binaries and tests"
cargo build --workspace --bins --tests --locked
step "tests (unit, crds/ up to date, e2e against real API servers)"
# Each test binary starts one control plane; its tests share it and run in
# parallel, each in its own namespace. They mostly wait on API servers, so
# more threads than cores is right, and two binaries run at once
# (hack/lib/lanes.sh). Every binary runs even when one fails.
# shellcheck source=lib/lanes.sh
source hack/lib/lanes.sh
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
set +e
cargo test --workspace --locked --doc 2>&1 | tee -a "$summary"
status=${PIPESTATUS[0]}
run_in_lanes "${TEST_LANES:-2}" "${TEST_THREADS:-6}" "$summary" || status=1
set -e
# One closing line for the whole run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$summary"
step "done"
exit "$status"
