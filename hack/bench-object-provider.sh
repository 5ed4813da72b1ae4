#!/usr/bin/env bash
# The object-provider benchmark (a command, not a timed test): release build,
# a local control plane whose API servers write audit logs, N Objects
# (default 1000) each managing a ConfigMap in the remote cluster, phase by
# phase (null writer, create, idle, update, remote change, drift, referenced
# change, delete). Writes bench/object-provider.json; with --api v1alpha2
# (upstream's cluster Objects) or --namespaced (kubernetes.m.crossplane.io
# Objects) bench/object-provider-v1alpha2.json or -namespaced.json.
#   hack/bench-object-provider.sh [--objects N] [--concurrency C] [--changes K]
#       [--resync SECS] [--idle SECS] [--latency-timeout SECS]
#       [--api v1alpha1|v1alpha2] [--namespaced]
#       [--provider-arg ARG]... [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
hack/install-debian-packages.sh
cargo build --release --locked -p object-provider -p benchmarks --bins
exec target/release/object-bench "$@"
