#!/usr/bin/env bash
# The object-provider benchmark (a command, not a timed test): release build,
# a local control plane, N Objects (default 1000) each managing a ConfigMap in
# the remote cluster. Writes bench/object-provider.json and prints a table.
#   hack/bench-object-provider.sh [--objects N] [--concurrency C] [--resync SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
cargo build --release --locked -p object-provider -p e2e --bins
exec target/release/object-bench "$@"
