#!/usr/bin/env bash
# Builds the crossplane-rs image without a Docker daemon and pushes it:
#
#   hack/image.sh <registry>/crossplane-rs:<tag> [options]
#
# 1. builds the six release binaries and the oci-image tool
#    (cargo build --release);
# 2. oci-image makes the image: a base layer from Debian bookworm's libc6,
#    libgcc-s1 and ca-certificates packages (apt-get download + dpkg-deb -x,
#    as distroless/cc-debian12 does; the .debs are cached in
#    ${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/debs), then the six
#    binaries in /usr/local/bin, user 65532, the Dockerfile's OCI labels;
# 3. pushes it, and prints <reference>@<digest> as its last stdout line.
#
# Options (passed to oci-image; `target/release/oci-image --help` lists all):
#   --ca-file FILE     trust this PEM CA for the registry (besides the system's)
#   --insecure         do not verify the registry's certificate
#   --plain-http       plain HTTP (a registry on localhost without TLS)
#   --username USER    basic auth; the password comes from OCI_IMAGE_PASSWORD
#   --archive FILE     also write an OCI archive (ctr images import FILE)
#   --no-push          with --archive: build without pushing
#
# The Dockerfile builds the same image with Docker (`docker build .`).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 || "$1" == -* ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
command -v cargo >/dev/null || { echo "image: cargo not found: install Rust (rustup) first" >&2; exit 1; }
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "image: $tool not found: the base layer is made from Debian packages, so this needs a Debian-based machine" >&2; exit 1; }
done

start=$(date +%s)
bins=(scheduler application-controller resource-controller object-provider package-manager rbac-manager oci-image)
args=()
for b in "${bins[@]}"; do args+=(--bin "$b"); done
echo "image: cargo build --release ${bins[*]}" >&2
cargo build --release --locked "${args[@]}"
built=$(date +%s)
echo "image: binaries built in $((built - start))s" >&2

target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
target_dir=${target_dir:-target}
"$target_dir/release/oci-image" --bin-dir "$target_dir/release" "$@"
echo "image: done in $(($(date +%s) - start))s" >&2
