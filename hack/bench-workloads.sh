#!/usr/bin/env bash
# The workload benchmark (a command, not a timed test): release build, a
# local control plane with three remote clusters whose API servers write
# audit logs, the scheduler, application-controller and resource-controller
# as their shipped ServiceAccounts, one GitLab-sized KubernetesApplication
# (43 templates) alone and then N (default 100) at once. Writes
# bench/workloads.json.
#   hack/bench-workloads.sh [--applications N] [--clusters C] [--concurrency C]
#       [--poll-interval DURATION] [--timeout SECS] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
hack/install-debian-packages.sh
cargo build --release --locked -p scheduler -p application-controller -p resource-controller -p benchmarks --bins
exec target/release/workload-bench "$@"
