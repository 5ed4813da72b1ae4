# syntax=docker/dockerfile:1
#
# crossplane-rs: one image holding all six controller binaries in
# /usr/local/bin; each Deployment picks its binary with `command:`.
#
#   docker build -t crossplane-rs:dev .
#
# Layer order keeps the dependency build cached across source-only edits:
#   1. skeleton: the workspace's Cargo.toml/Cargo.lock plus stub target roots
#      (src/lib.rs empty, every other root `fn main() {}`); this changes only
#      when a manifest, the lockfile or the set of target files changes;
#   2. builder: compile all dependencies against the skeleton (cached layer),
#      then copy the real sources and build the six binaries.

ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# ---------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS skeleton
WORKDIR /src
COPY . .
RUN <<'EOF'
set -eu
mkdir -p /skeleton
for f in Cargo.lock rust-toolchain rust-toolchain.toml .cargo/config.toml .cargo/config; do
  if [ -f "$f" ]; then
    mkdir -p "/skeleton/$(dirname "$f")"
    cp "$f" "/skeleton/$f"
  fi
done
find . -path ./target -prune -o -type f -name Cargo.toml -print | sort | while read -r manifest; do
  dir=$(dirname "$manifest")
  mkdir -p "/skeleton/$dir"
  cp "$manifest" "/skeleton/$manifest"
  (
    cd "$dir"
    {
      # Conventional target roots, plus any *.rs named in the manifest
      # ([lib]/[[bin]] path = "...", build = "...").
      ls -d src/lib.rs src/main.rs build.rs src/bin/*.rs src/bin/*/main.rs \
            examples/*.rs examples/*/main.rs tests/*.rs tests/*/main.rs \
            benches/*.rs benches/*/main.rs 2>/dev/null || true
      grep -o '"[^"]*\.rs"' Cargo.toml | tr -d '"' || true
    } | sort -u | while read -r target; do
      [ -f "$target" ] || continue
      mkdir -p "/skeleton/$dir/$(dirname "$target")"
      if [ "$target" = src/lib.rs ]; then
        : > "/skeleton/$dir/$target"
      else
        echo 'fn main() {}' > "/skeleton/$dir/$target"
      fi
    done
  )
done
EOF

# ---------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
ARG BINS="scheduler application-controller resource-controller object-provider package-manager rbac-manager"
WORKDIR /src

# Dependencies only. A failure here (e.g. a layout the skeleton does not
# reproduce) is not fatal: the full build below compiles everything anyway.
COPY --from=skeleton /skeleton/ ./
RUN <<'EOF'
set -eu
args=""
for b in $BINS; do args="$args --bin $b"; done
if ! cargo build --release --locked $args; then
  echo "warning: dependency pre-build on the skeleton failed; the full build will do it" >&2
fi
EOF

# The real sources. Touch every .rs so cargo rebuilds the workspace crates
# instead of trusting the stub builds (COPY keeps the context's older mtimes).
COPY . .
RUN <<'EOF'
set -eu
find . -path ./target -prune -o -type f -name '*.rs' -exec touch {} +
args=""
for b in $BINS; do args="$args --bin $b"; done
cargo build --release --locked $args
# (The release profile already strips symbols: strip = "symbols".)
mkdir -p /out
for b in $BINS; do
  cp "target/release/$b" "/out/$b"
done
EOF

# ---------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="crossplane-rs" \
      org.opencontainers.image.description="A Rust implementation of Crossplane's control plane: scheduler, application-controller, resource-controller, object-provider, package-manager, rbac-manager" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/ /usr/local/bin/
USER 65532:65532
