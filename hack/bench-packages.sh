#!/usr/bin/env bash
# The package benchmark (a command, not a timed test): crossplane-rs's
# package-manager and rbac-manager side by side with upstream Crossplane's
# core and rbac-manager (built from the pinned module, CROSSPLANE_RS_CORE=1),
# on one local control plane with a node and a registry whose API server
# writes an audit log. Writes bench/packages.json.
#   hack/bench-packages.sh [--providers N] [--crds M] [--properties P]
#       [--idle SECS] [--delete-wait SECS] [--only crossplane-rs|upstream]
#       [--install-only] [--out FILE]
#   PACKAGE_BENCH_PPROF=FILE [PACKAGE_BENCH_PPROF_SECONDS=15]: also the API
#   server's CPU profile of each install, as FILE.null, FILE.<side>.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_line=$(CROSSPLANE_RS_CORE=1 hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
hack/install-debian-packages.sh
# The controllers run as pods of the project's image, made from the release
# binaries beside package-bench (what users get).
cargo build --release --locked --workspace --bins
# With 50 Providers of 100 CRDs the API server holds 5000 CRDs, 10000 once
# upgraded: its RSS then grew to 19 GiB of this 24 GiB machine and the run
# thrashed. A soft limit makes the control plane's Go processes collect
# harder near it (each far below it is untouched); under it the API server
# stayed near 12 GiB through the upgrade. Both sides run under it, and the
# JSON says so.
export GOMEMLIMIT="${GOMEMLIMIT:-12GiB}"
exec target/release/package-bench "$@"
