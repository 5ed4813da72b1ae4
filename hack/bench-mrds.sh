#!/usr/bin/env bash
# The ManagedResourceDefinition benchmark (a command, not a timed test):
# release build, a local control plane with a node (for the registry), the
# package-manager as its shipped ServiceAccount with no default activation
# policy, and one SafeStart Provider package of N managed-resource CRDs
# (default 100) of a generated provider's size: the control API server's
# memory with the project's CRDs only, with N Inactive MRDs, with one kind
# activated and with all N, in the same run. Writes bench/mrds-100.json.
#   hack/bench-mrds.sh [--kinds N] [--properties P] [--settle SECS] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
hack/install-debian-packages.sh
cargo build --release --locked -p package-manager -p benchmarks --bins
exec target/release/mrd-bench "$@"
