#!/usr/bin/env bash
# Builds the pinned upstream binaries the crossplane-rs tests run against
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy, kubectl, registry, the upstream crossplane CLI `crank`, cosign,
# and provider-kubernetes at every pinned release together with that release's
# unmodified package/ directory) from source via the Go module proxy, once per
# version, into a cache outside the repo; and builds the test node's small
# static programs from hack/node-programs/. provider-kubernetes v1.3.0 and
# later require github.com/nebius/gosdk, which the Go module proxy refuses
# (403): those are built with that one module replaced by the stub in
# hack/stubs/nebius-gosdk/, so nebius identity support is not built into these
# test binaries (a ProviderConfig using it fails with an error saying so).
# It builds only: Debian packages
# are hack/install-debian-packages.sh's (the test node's containerd, runc,
# containernetworking-plugins and iptables, which the callers install after
# this; docker-registry, which stands in for a registry that fails to build).
#
#   hack/build-binaries.sh            # prints CROSSPLANE_RS_BIN=<dir> as its last stdout line
#
# Versions come from hack/versions.env. Layout of the cache
# (${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}):
#
#   kubernetes-<ver>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl}
#   etcd-<ver>/etcd
#   registry-<ver>/registry
#   crank-<ver>/crank                        (CROSSPLANE_CLI_VERSION)
#   crank-<ver>/{crossplane,crds/,webhookconfigurations/} (upstream's core, its CRDs and webhook configurations; only
#                                             with CROSSPLANE_RS_CORE=1)
#   cosign-<ver>/cosign                      (COSIGN_VERSION)
#   provider-kubernetes-<ver>/provider       (each of PROVIDER_KUBERNETES_VERSIONS)
#   provider-kubernetes-<ver>/package/       (upstream's package/: crossplane.yaml, crds/)
#   provider-kubernetes-<ver>/examples/      (upstream's examples/, applied unchanged by the tests)
#   node-programs-<hash>/{pause,apicheck}    (hash of hack/node-programs/)
#   bin/<name> -> ../<component>-<ver>/<name>    (rewritten on every run), and
#     bin/provider-kubernetes-<ver> -> ../provider-kubernetes-<ver>/provider
#     bin/provider-kubernetes-<ver>-package -> ../provider-kubernetes-<ver>/package
#     bin/provider-kubernetes-<ver>-examples -> ../provider-kubernetes-<ver>/examples
#   work/      throwaway Go modules used for the builds
#   logs/      full output of every go invocation
#
# Binaries that already exist are not rebuilt, so a warm run takes seconds and
# needs neither Go nor the network. Progress goes to stderr.
#
# Environment knobs:
#   CROSSPLANE_RS_CACHE           cache root (default $HOME/.cache/crossplane-rs)
#   CROSSPLANE_RS_CORE=1          also build upstream Crossplane core (bin/crossplane,
#                                 bin/crossplane-crds/, bin/crossplane-webhookconfigurations/)
#                                 for the package benchmark
#   CROSSPLANE_RS_FETCH_TIMEOUT   seconds per download/resolve step (default 1800)
#   CROSSPLANE_RS_BUILD_TIMEOUT   seconds per `go build` (default 3600)
#   CROSSPLANE_RS_LOCK_TIMEOUT    seconds to wait for a concurrent run (default 7200)
#   GOPROXY, GOMODCACHE, GOCACHE  honoured as usual
set -euo pipefail

PROG=build-binaries
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# log, die, fmt_secs, signal traps, run_bg, run_logged
# shellcheck source=lib/steps.sh
source "$HACK_DIR/lib/steps.sh"

# ---------------------------------------------------------------------------
# Versions and settings
# ---------------------------------------------------------------------------
[[ -r "$HACK_DIR/versions.env" ]] || die "cannot read $HACK_DIR/versions.env"
# shellcheck source=versions.env
source "$HACK_DIR/versions.env"
for var in KUBERNETES_VERSION ETCD_VERSION REGISTRY_VERSION CROSSPLANE_CLI_VERSION COSIGN_VERSION PROVIDER_KUBERNETES_VERSIONS; do
  [[ -n "${!var:-}" ]] || die "$var is not set in $HACK_DIR/versions.env"
done
IFS=, read -ra PROVIDER_KUBERNETES_VERS <<<"$PROVIDER_KUBERNETES_VERSIONS"
for v in "$CROSSPLANE_CLI_VERSION" "$COSIGN_VERSION" "${PROVIDER_KUBERNETES_VERS[@]}"; do
  [[ "$v" =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]*)?$ ]] ||
    die "'$v' in $HACK_DIR/versions.env is not a module version like v1.2.3"
done
[[ "$(printf '%s\n' "${PROVIDER_KUBERNETES_VERS[@]}" | sort -u | wc -l)" == "${#PROVIDER_KUBERNETES_VERS[@]}" ]] ||
  die "PROVIDER_KUBERNETES_VERSIONS=$PROVIDER_KUBERNETES_VERSIONS names a version twice"

if [[ -z "${CROSSPLANE_RS_CACHE:-}" && -z "${HOME:-}" ]]; then
  die "neither CROSSPLANE_RS_CACHE nor HOME is set — cannot pick a cache directory"
fi
CACHE="${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}"
mkdir -p "$CACHE" || die "cannot create cache directory $CACHE"
CACHE="$(cd "$CACHE" && pwd -P)"

FETCH_TIMEOUT="${CROSSPLANE_RS_FETCH_TIMEOUT:-1800}"
BUILD_TIMEOUT="${CROSSPLANE_RS_BUILD_TIMEOUT:-3600}"
LOCK_TIMEOUT="${CROSSPLANE_RS_LOCK_TIMEOUT:-7200}"

for tool in flock timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH — install util-linux/coreutils"
done

# ---------------------------------------------------------------------------
# Process / cleanup handling (CHILD, CHILD_SIG, on_signal, run_bg and
# run_logged are hack/lib/steps.sh's)
# ---------------------------------------------------------------------------
TMP_PATHS=()      # partial outputs to remove on exit

cleanup() {
  local p
  for p in "${TMP_PATHS[@]+"${TMP_PATHS[@]}"}"; do rm -rf -- "$p"; done
  # go leaves its $WORK dir behind when interrupted; keep those in the cache.
  [[ -n "${GO_READY:-}" ]] && rm -rf -- "$CACHE/work/.gotmp"
  return 0
}
trap cleanup EXIT
install_signal_traps

# ---------------------------------------------------------------------------
# Go helpers
# ---------------------------------------------------------------------------
GO_READY=""
BUILD_ENV=()  # see build_in_throwaway_module
need_go() {
  # A subshell that built something (the registry) wiped the temporary
  # directory on its exit: make sure it is there for the next build.
  [[ -n "$GO_READY" ]] && { mkdir -p "$GOTMPDIR"; return 0; }
  command -v go >/dev/null 2>&1 ||
    die "go not found on PATH — install Go (>= the 'go' line of https://proxy.golang.org/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod, 1.26 for v1.36)"
  # Deterministic, self-contained go environment: never switch toolchains
  # behind the user's back, ignore any go.work, no cgo (upstream release builds
  # of these binaries are static too).
  export GOTOOLCHAIN=local GOWORK=off GO111MODULE=on CGO_ENABLED=0 GIT_TERMINAL_PROMPT=0
  export GOFLAGS=""
  # go's temporary build dirs; wiped on exit (we hold the cache lock).
  export GOTMPDIR="$CACHE/work/.gotmp"
  rm -rf -- "$GOTMPDIR"; mkdir -p "$GOTMPDIR"
  go env GOVERSION >/dev/null 2>&1 || die "'go env GOVERSION' failed — is the Go installation broken? ($(command -v go))"
  GO_READY=1
}

# require_go <min-version-from-go.mod> <who-needs-it>
require_go() {
  local need="$1" who="$2" have
  have="$(go env GOVERSION)"
  have="${have#go}"; have="${have%% *}"; have="${have%%-*}"
  if [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]]; then
    die "$who requires Go >= $need but $(command -v go) is go$have (GOTOOLCHAIN=local) — install Go >= $need"
  fi
}

# mod_download <module> <version> <logfile> [VAR=value...]
# Fetches module@version into the module cache, with VAR=value added to go's
# environment. Sets MOD_GOMOD (path of its go.mod), MOD_DIR (its extracted
# source tree, read-only), MOD_TIME (commit time, RFC3339) and MOD_COMMIT (VCS
# hash or "").
mod_download() {
  local mod="$1" ver="$2" logf="$3" json err info
  shift 3
  local jsonf="$CACHE/work/.download/$$.json" rc=0
  mkdir -p "$CACHE/work/.download"
  : >"$logf"; : >"$jsonf"
  TMP_PATHS+=("$jsonf")
  run_bg "$FETCH_TIMEOUT" "$jsonf" "$logf" env -C "$CACHE/work/.download" "$@" go mod download -json "$mod@$ver" || rc=$?
  json="$(cat "$jsonf")"
  if ((rc != 0)); then
    printf '%s\n' "$json" >>"$logf"
    ((rc == 124 || rc == 137)) && die "fetching $mod $ver from the Go module proxy timed out after ${FETCH_TIMEOUT}s (GOPROXY=$(go env GOPROXY))"
    err="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)"
    [[ -n "$err" ]] || err="$(grep -v '^[[:space:]]*$' "$logf" | tail -n 1)"
    err="$(printf '%s' "$err" | sed 's/\\[nt]/ /g; s/[[:space:]]\{1,\}/ /g')"  # JSON escapes → one line
    die "fetching $mod $ver from the Go module proxy failed: ${err:-exit $rc} (GOPROXY=$(go env GOPROXY); log: $logf)"
  fi
  printf '%s\n' "$json" >>"$logf"
  MOD_GOMOD="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)"
  MOD_DIR="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)"
  info="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)"
  MOD_COMMIT="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)",\{0,1\}$/\1/p' | head -n 1)"
  [[ -n "$MOD_GOMOD" && -r "$MOD_GOMOD" ]] || die "fetching $mod $ver: go mod download did not report a go.mod file (log: $logf)"
  [[ -n "$MOD_DIR" && -d "$MOD_DIR" ]] || die "fetching $mod $ver: go mod download did not report the module's directory (log: $logf)"
  MOD_TIME=""
  if [[ -n "$info" && -r "$info" ]]; then
    MOD_TIME="$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info" | head -n 1)"
  fi
  # Prefer the hash recorded in the .info file (go mod download -json only
  # reports Origin when it fetched it just now).
  if [[ -z "$MOD_COMMIT" && -n "$info" && -r "$info" ]]; then
    MOD_COMMIT="$(sed -n 's/.*"Hash": *"\([0-9a-f]*\)".*/\1/p' "$info" | head -n 1)"
  fi
  return 0
}

# go_line <go.mod>: the `go` directive
go_line() { awk '$1 == "go" { print $2; exit }' "$1"; }

# godebug_lines <go.mod>: the godebug directives, verbatim
godebug_lines() {
  awk '/^godebug[[:space:]]*\(/ { blk = 1; print; next }
       blk { print; if ($0 ~ /^\)/) blk = 0; next }
       /^godebug[[:space:]]/ { print }' "$1"
}

# remote_replaces <go.mod>: replace directives whose target is another module
# (not a local path) — those are lost when the module is a dependency, so the
# throwaway module has to repeat them. Printed as "old => new ver" lines.
remote_replaces() {
  awk '/^replace[[:space:]]*\(/ { blk = 1; next }
       blk && /^\)/ { blk = 0; next }
       /^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, ""); line = 1 }
       blk || line {
         line = 0
         for (i = 1; i <= NF; i++) if ($i == "=>") break
         if (i > NF) next
         tgt = $(i + 1)
         if (tgt ~ /^\.\.?\// || tgt ~ /^\//) next
         print
       }' "$1"
}

# build_in_throwaway_module <component> <module> <version> <ldflags> <extra go.mod text> <bin=pkg>...
# Builds main packages of <module>@<version> that cannot be `go install`ed
# from a generated module that requires it: `go install pkg@version` refuses a
# go.mod with replace directives, and it looks up the module's latest version
# (for deprecation notices) and fails when the proxy refuses that list (403),
# which a pinned requirement never asks for. With its go directive and godebug
# lines copied (GO_DIRECTIVE, GODEBUG_DIRECTIVES) and no replace directives of
# its own, the generated module selects exactly the module's own dependency
# versions. Missing binaries only; each is written atomically. The caller may
# set a local array BUILD_ENV of VAR=value pairs added to go's environment
# (after the defaults, so GOFLAGS can be overridden).
build_in_throwaway_module() {
  local component="$1" mod="$2" ver="$3" ldflags="$4" extra="$5"
  shift 5
  local dir="$CACHE/$component-$ver" work="$CACHE/work/$component-$ver"
  local logs="$CACHE/logs" spec bin pkg t0 tmp
  local -a missing=() pkgs=()
  for spec in "$@"; do
    bin="${spec%%=*}"; pkg="${spec#*=}"
    if [[ -x "$dir/$bin" ]]; then
      log "$bin $ver: cached ($dir/$bin)"
    else
      missing+=("$spec"); pkgs+=("$pkg")
    fi
  done
  ((${#missing[@]} > 0)) || return 0

  mkdir -p "$dir" "$work" "$logs"
  cat >"$work/go.mod" <<EOF
// Generated by crossplane-rs hack/build-binaries.sh — throwaway module used
// only to build $mod $ver. Safe to delete.
module crossplane-rs.invalid/build/$component

go $GO_DIRECTIVE
$GODEBUG_DIRECTIVES

require $mod $ver
$extra
EOF
  # No packages of its own; keep the module well-formed for `go list`.
  printf 'package build\n' >"$work/doc.go"

  : >"$logs/$component-$ver-resolve.log"
  log "$component $ver: resolving dependencies of ${pkgs[*]} (downloads on a cold module cache)…"
  t0=$SECONDS
  run_logged "resolving the dependencies of $mod $ver via the Go module proxy" \
    "$FETCH_TIMEOUT" "$logs/$component-$ver-resolve.log" \
    env -C "$work" GOFLAGS=-mod=mod "${BUILD_ENV[@]}" go list -deps -f '{{.ImportPath}}' "${pkgs[@]}"
  log "$component $ver: dependencies resolved in $(fmt_secs $((SECONDS - t0)))"

  for spec in "${missing[@]}"; do
    bin="${spec%%=*}"; pkg="${spec#*=}"
    tmp="$dir/.$bin.tmp.$$"
    TMP_PATHS+=("$tmp")
    log "$bin $ver: building $pkg (minutes on a cold Go build cache)…"
    t0=$SECONDS
    : >"$logs/$bin-$ver-build.log"
    run_logged "building $bin $ver (go build $pkg)" \
      "$BUILD_TIMEOUT" "$logs/$bin-$ver-build.log" \
      env -C "$work" GOFLAGS="-mod=mod -buildvcs=false" "${BUILD_ENV[@]}" \
      go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp" "$pkg"
    mv -f "$tmp" "$dir/$bin"
    log "$bin $ver: built in $(fmt_secs $((SECONDS - t0))) → $dir/$bin"
  done
}

# ---------------------------------------------------------------------------
# Components
# ---------------------------------------------------------------------------
K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

all_present() { # <dir> <bin>...
  local d="$1" b; shift
  for b in "$@"; do [[ -x "$d/$b" ]] || return 1; done
}

build_kubernetes() {
  local ver="$KUBERNETES_VERSION" dir="$CACHE/kubernetes-$KUBERNETES_VERSION"
  if all_present "$dir" "${K8S_BINS[@]}"; then
    log "kubernetes $ver: cached (${K8S_BINS[*]})"; return 0
  fi
  [[ "$ver" =~ ^v1\.([0-9]+)\.([0-9]+.*)$ ]] ||
    die "KUBERNETES_VERSION=$ver does not look like v1.<minor>.<patch>"
  local minor="${BASH_REMATCH[1]}" staging_ver="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
  need_go
  mkdir -p "$CACHE/logs"
  log "kubernetes $ver: fetching k8s.io/kubernetes from the Go module proxy…"
  mod_download k8s.io/kubernetes "$ver" "$CACHE/logs/kubernetes-$ver-download.log"
  GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
  [[ -n "$GO_DIRECTIVE" ]] || die "k8s.io/kubernetes $ver: no 'go' directive in $MOD_GOMOD"
  require_go "$GO_DIRECTIVE" "k8s.io/kubernetes $ver"
  GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"

  # k8s.io/kubernetes requires its staging repos at v0.0.0 and replaces them
  # with ./staging/src/... — which only works inside its own repo. Point every
  # one of them at the published v0.<minor>.<patch> tag instead.
  local staging
  staging="$(awk '$1 == "require" { $1 = ""; $0 = $0 }
                  $1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$MOD_GOMOD" | sort -u)"
  [[ -n "$staging" ]] || die "k8s.io/kubernetes $ver: found no k8s.io/* modules required at v0.0.0 in $MOD_GOMOD — has the layout changed?"
  local extra m
  extra="replace ("$'\n'
  for m in $staging; do extra+=$'\t'"$m => $m $staging_ver"$'\n'; done
  while IFS= read -r m; do [[ -n "$m" ]] && extra+=$'\t'"$m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
  extra+=")"
  log "kubernetes $ver: $(wc -w <<<"$staging") staging modules pinned to $staging_ver"

  # Same version stamping as kubernetes' hack/lib/version.sh, so that
  # `kubectl version` and the apiserver's /version report $ver.
  local ld="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    # The proxy has no commit hash for k8s.io/kubernetes; an empty gitCommit
    # beats the literal "$Format:%H$" placeholder.
    ld+=" -X $p.gitCommit=$MOD_COMMIT"
    [[ -n "$MOD_TIME" ]] && ld+=" -X $p.buildDate=$MOD_TIME"
  done

  local -a specs=()
  for m in "${K8S_BINS[@]}"; do specs+=("$m=k8s.io/kubernetes/cmd/$m"); done
  build_in_throwaway_module kubernetes k8s.io/kubernetes "$ver" "$ld" "$extra" "${specs[@]}"
}

build_etcd() {
  local ver="$ETCD_VERSION" dir="$CACHE/etcd-$ETCD_VERSION"
  if all_present "$dir" etcd; then log "etcd $ver: cached"; return 0; fi
  need_go
  mkdir -p "$CACHE/logs"
  # go.etcd.io/etcd/server/v3 is the etcd main package (server/main.go). Its
  # go.mod replaces the sibling etcd modules with ../ paths, so it cannot be
  # `go install`ed; the sibling modules are required at the same version anyway.
  log "etcd $ver: fetching go.etcd.io/etcd/server/v3 from the Go module proxy…"
  mod_download go.etcd.io/etcd/server/v3 "$ver" "$CACHE/logs/etcd-$ver-download.log"
  GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
  [[ -n "$GO_DIRECTIVE" ]] || die "go.etcd.io/etcd/server/v3 $ver: no 'go' directive in $MOD_GOMOD"
  require_go "$GO_DIRECTIVE" "go.etcd.io/etcd/server/v3 $ver"
  GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"
  local extra="" m
  while IFS= read -r m; do [[ -n "$m" ]] && extra+="replace $m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
  local ld=""
  [[ -n "$MOD_COMMIT" ]] && ld="-X go.etcd.io/etcd/api/v3/version.GitSHA=${MOD_COMMIT:0:7}"
  build_in_throwaway_module etcd go.etcd.io/etcd/server/v3 "$ver" "$ld" "$extra" \
    "etcd=go.etcd.io/etcd/server/v3"
}

REGISTRY_TARGET=""  # what bin/registry points at
build_registry() {
  local ver="$REGISTRY_VERSION" dir="$CACHE/registry-$REGISTRY_VERSION"
  local mod=github.com/distribution/distribution/v3 logs="$CACHE/logs"
  if all_present "$dir" registry; then
    log "registry $ver: cached"; REGISTRY_TARGET="../registry-$ver/registry"; return 0
  fi
  mkdir -p "$dir" "$logs"
  # Try the source build in a subshell so that a failure (die) falls back to
  # Debian's docker-registry package instead of aborting the whole script. It
  # runs as a background job with its own traps so signals still stop it.
  local rc=0 t0=$SECONDS
  (
    TMP_PATHS=(); CHILD=""
    trap cleanup EXIT
    trap 'on_signal TERM' TERM
    trap 'on_signal HUP' HUP
    need_go
    log "registry $ver: fetching $mod from the Go module proxy…"
    mod_download "$mod" "$ver" "$logs/registry-$ver-download.log"
    require_go "$(go_line "$MOD_GOMOD")" "$mod $ver"
    ld="-s -w -X $mod/version.version=$ver -X $mod/version.mainpkg=$mod"
    [[ -n "$MOD_COMMIT" ]] && ld+=" -X $mod/version.revision=$MOD_COMMIT"
    gobin="$dir/.gobin.tmp.$BASHPID"
    TMP_PATHS+=("$gobin")
    mkdir -p "$gobin"
    log "registry $ver: building $mod/cmd/registry (go install)…"
    # go install pkg@version builds outside any module and honours the
    # module's own go.mod (distribution has no replace directives).
    : >"$logs/registry-$ver-build.log"
    run_logged "building registry $ver (go install $mod/cmd/registry@$ver)" \
      "$BUILD_TIMEOUT" "$logs/registry-$ver-build.log" \
      env -C "$CACHE/work/.download" GOBIN="$gobin" GOFLAGS=-buildvcs=false \
      go install -trimpath -ldflags "$ld" "$mod/cmd/registry@$ver"
    mv -f "$gobin/registry" "$dir/registry"
  ) &
  CHILD=$! CHILD_SIG=TERM  # background subshells ignore SIGINT; its TERM trap forwards
  wait "$CHILD" || rc=$?
  CHILD=""
  if ((rc == 0)); then
    log "registry $ver: built in $(fmt_secs $((SECONDS - t0))) → $dir/registry"
    REGISTRY_TARGET="../registry-$ver/registry"
    return 0
  fi
  ((rc >= 128)) && exit "$rc"

  log "registry $ver: source build failed (see above) — falling back to Debian's docker-registry package"
  if [[ ! -x /usr/bin/docker-registry ]]; then
    # Installed (needs root and apt-get) by the script that installs every
    # Debian package the tests use; a background job like the build above,
    # so that the traps can stop it (its TERM trap stops apt-get).
    rc=0
    CROSSPLANE_RS_CACHE="$CACHE" "$HACK_DIR/install-debian-packages.sh" docker-registry </dev/null &
    CHILD=$! CHILD_SIG=TERM
    wait "$CHILD" || rc=$?
    CHILD=""
    ((rc >= 128)) && exit "$rc"
    ((rc == 0)) ||
      die "registry: building $mod $ver failed, and so did installing Debian's docker-registry in its place (see above) — fix the build, or run 'hack/install-debian-packages.sh docker-registry' as root"
  fi
  [[ -x /usr/bin/docker-registry ]] || die "registry fallback: /usr/bin/docker-registry missing after apt-get install"
  log "registry: WARNING using /usr/bin/docker-registry (Debian), not $mod $ver"
  REGISTRY_TARGET=/usr/bin/docker-registry
}

# The upstream crossplane CLI. Its main package is cmd/crank (released as
# `crossplane`); the tests use it to build and push packages the way users do.
# github.com/crossplane/crossplane/v2 has no replace directives, but the Go
# module proxy answers 403 for its version list, which `go install pkg@version`
# reads, hence the throwaway module.
build_crank() {
  local ver="$CROSSPLANE_CLI_VERSION" mod=github.com/crossplane/crossplane/v2 ld="" m extra=""
  if all_present "$CACHE/crank-$ver" crank; then log "crank $ver: cached"; return 0; fi
  need_go
  mkdir -p "$CACHE/logs"
  log "crank $ver: fetching $mod from the Go module proxy…"
  mod_download "$mod" "$ver" "$CACHE/logs/crank-$ver-download.log"
  GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
  [[ -n "$GO_DIRECTIVE" ]] || die "$mod $ver: no 'go' directive in $MOD_GOMOD"
  require_go "$GO_DIRECTIVE" "$mod $ver"
  GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"
  while IFS= read -r m; do [[ -n "$m" ]] && extra+="replace $m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
  # Stamped like upstream's release build (nix/build.nix), so that
  # `crank version` reports $ver.
  if grep -qs '^var version string' "$MOD_DIR/internal/version/version.go"; then
    ld="-X $mod/internal/version.version=$ver"
  else
    log "crank $ver: WARNING no 'var version string' in $mod/internal/version — the binary will not know its version"
  fi
  build_in_throwaway_module crank "$mod" "$ver" "$ld" "$extra" "crank=$mod/cmd/crank"
}

# Upstream Crossplane core (main package cmd/crossplane, the binary of its
# image: `crossplane core init|start`, `crossplane rbac init|start`) and a
# copy of the CRDs its image carries in /crds (cluster/crds of the same
# module). Only the package benchmark runs it (hack/bench-packages.sh sets
# CROSSPLANE_RS_CORE=1); the tests never do, so a test run does not build it.
build_crossplane_core() {
  local ver="$CROSSPLANE_CLI_VERSION" mod=github.com/crossplane/crossplane/v2 ld="" m extra=""
  local dir="$CACHE/crank-$ver"
  if all_present "$dir" crossplane && [[ -r "$dir/crds/.complete" && -d "$dir/webhookconfigurations" ]]; then
    log "crossplane core $ver: cached"; return 0
  fi
  need_go
  mkdir -p "$CACHE/logs"
  log "crossplane core $ver: fetching $mod from the Go module proxy…"
  mod_download "$mod" "$ver" "$CACHE/logs/crossplane-$ver-download.log"
  GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
  [[ -n "$GO_DIRECTIVE" ]] || die "$mod $ver: no 'go' directive in $MOD_GOMOD"
  require_go "$GO_DIRECTIVE" "$mod $ver"
  GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"
  while IFS= read -r m; do [[ -n "$m" ]] && extra+="replace $m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
  grep -qs '^var version string' "$MOD_DIR/internal/version/version.go" && ld="-X $mod/internal/version.version=$ver"
  local sub
  for sub in crds webhookconfigurations; do
    [[ -d "$MOD_DIR/cluster/$sub" ]] || die "$mod $ver has no cluster/$sub directory"
    rm -rf -- "${dir:?}/$sub"
    mkdir -p "$dir/$sub"
    cp -- "$MOD_DIR/cluster/$sub"/*.yaml "$dir/$sub/"
    chmod -R u+w "$dir/$sub"
  done
  : >"$dir/crds/.complete"
  # A static binary, as upstream's image has it.
  local -a BUILD_ENV=(CGO_ENABLED=0)
  build_in_throwaway_module crank "$mod" "$ver" "$ld" "$extra" "crossplane=$mod/cmd/crossplane"
}

# Upstream cosign (main package cmd/cosign), which the tests use to sign
# and attest packages in a local registry, offline. Built in a throwaway
# module like crank, which selects exactly cosign's own dependency versions.
build_cosign() {
  local ver="$COSIGN_VERSION" ld="" m extra="" rmod=sigs.k8s.io/release-utils rver
  local mod="github.com/sigstore/cosign"
  [[ "$ver" =~ ^v([2-9]|[1-9][0-9]+)\. ]] && mod+="/v${BASH_REMATCH[1]}"
  if all_present "$CACHE/cosign-$ver" cosign; then log "cosign $ver: cached"; return 0; fi
  need_go
  mkdir -p "$CACHE/logs"
  log "cosign $ver: fetching $mod from the Go module proxy…"
  mod_download "$mod" "$ver" "$CACHE/logs/cosign-$ver-download.log"
  GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
  [[ -n "$GO_DIRECTIVE" ]] || die "$mod $ver: no 'go' directive in $MOD_GOMOD"
  require_go "$GO_DIRECTIVE" "$mod $ver"
  GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"
  while IFS= read -r m; do [[ -n "$m" ]] && extra+="replace $m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
  # Stamped like upstream's Makefile (LDFLAGS), so that `cosign version`
  # reports $ver: the variables are in $rmod/version, at the version cosign
  # requires.
  rver="$(awk -v m="$rmod" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m { print $2; exit }' "$MOD_GOMOD")"
  ld="-X $rmod/version.gitVersion=$ver -X $rmod/version.gitTreeState=clean"
  [[ -n "$MOD_COMMIT" ]] && ld+=" -X $rmod/version.gitCommit=$MOD_COMMIT"
  [[ -n "$MOD_TIME" ]] && ld+=" -X $rmod/version.buildDate=$MOD_TIME"
  if [[ -z "$rver" ]]; then
    log "cosign $ver: WARNING $mod does not require $rmod — the binary will not know its version"; ld=""
  else
    mod_download "$rmod" "$rver" "$CACHE/logs/cosign-$ver-release-utils-download.log"
    grep -qs '^[[:space:]]*gitVersion[[:space:]]*=' "$MOD_DIR/version/version.go" || {
      log "cosign $ver: WARNING no gitVersion variable in $rmod $rver/version — the binary will not know its version"; ld=""; }
  fi
  build_in_throwaway_module cosign "$mod" "$ver" "$ld" "$extra" "cosign=$mod/cmd/cosign"
}

# provider-kubernetes at each of PROVIDER_KUBERNETES_VERSIONS: the provider
# binary (the image's entrypoint upstream) and a writable copy of the
# release's package/ directory (crossplane.yaml, crds/) exactly as tagged, so
# that tests build the package with crank from upstream's own metadata.
PK_MOD=github.com/crossplane-contrib/provider-kubernetes
# Not every release is in the public checksum database (sum.golang.org
# answers 404 for v0.18.0, which go treats as a verification failure): that
# one module is exempt; its dependencies are still checked against the database.
PK_GOENV=(GONOSUMDB="$PK_MOD")
# Releases from v1.3.0 require github.com/nebius/gosdk (in-process Nebius IAM
# tokens for a ProviderConfig's identity), which the Go module proxy refuses
# (403). They are built with that one module replaced by a stub with only the
# API the provider uses, whose every function that can fail fails: "nebius
# identity support is not built into this test binary". The modules only
# gosdk needed are no longer part of the build. (v1.4.x cannot be built even
# so: the proxy also refuses the zips of the crossplane-runtime/v2 pseudo-version
# and crossplane/apis/v2 v2.4.1 they require, and they need go 1.27.1.)
PK_NEBIUS_MOD=github.com/nebius/gosdk
PK_NEBIUS_STUB="$HACK_DIR/stubs/nebius-gosdk"
build_provider_kubernetes() {
  local ver
  for ver in "${PROVIDER_KUBERNETES_VERS[@]}"; do build_provider_kubernetes_version "$ver"; done
}
build_provider_kubernetes_version() {
  local ver="$1" dir="$CACHE/provider-kubernetes-$1" ld="" tmp have_bin="" have_pkg=""
  all_present "$dir" provider && have_bin=1
  [[ -r "$dir/package/crossplane.yaml" && -d "$dir/package/crds" && -d "$dir/examples" ]] && have_pkg=1
  if [[ -n "$have_bin" && -n "$have_pkg" ]]; then log "provider-kubernetes $ver: cached (provider, package/)"; return 0; fi
  # Built in a throwaway module like crank (`go install pkg@version` would
  # also depend on the proxy serving this module's version list).
  need_go
  mkdir -p "$dir" "$CACHE/logs"
  log "provider-kubernetes $ver: fetching $PK_MOD from the Go module proxy…"
  mod_download "$PK_MOD" "$ver" "$CACHE/logs/provider-kubernetes-$ver-download.log" "${PK_GOENV[@]}"
  if [[ -z "$have_bin" ]]; then
    GO_DIRECTIVE="$(go_line "$MOD_GOMOD")"
    [[ -n "$GO_DIRECTIVE" ]] || die "$PK_MOD $ver: no 'go' directive in $MOD_GOMOD"
    require_go "$GO_DIRECTIVE" "$PK_MOD $ver"
    GODEBUG_DIRECTIVES="$(godebug_lines "$MOD_GOMOD")"
    local m extra=""
    while IFS= read -r m; do [[ -n "$m" ]] && extra+="replace $m"$'\n'; done < <(remote_replaces "$MOD_GOMOD")
    if grep -q "^[[:space:]]*$PK_NEBIUS_MOD[[:space:]]" "$MOD_GOMOD"; then
      # The stub (see PK_NEBIUS_MOD) is copied into the throwaway module.
      [[ -r "$PK_NEBIUS_STUB/go.mod" ]] || die "provider-kubernetes $ver requires $PK_NEBIUS_MOD, but $PK_NEBIUS_STUB/go.mod is missing"
      rm -rf -- "$CACHE/work/provider-kubernetes-$ver/nebius-gosdk"
      mkdir -p "$CACHE/work/provider-kubernetes-$ver"
      cp -R -- "$PK_NEBIUS_STUB" "$CACHE/work/provider-kubernetes-$ver/nebius-gosdk"
      extra+="replace $PK_NEBIUS_MOD => ./nebius-gosdk"$'\n'
      log "provider-kubernetes $ver: $PK_NEBIUS_MOD replaced by the stub hack/stubs/nebius-gosdk (nebius identity support not built in)"
    fi
    # Releases from v0.18 stamp internal/version.Version like upstream's
    # Makefile does; older ones have no such package.
    [[ -d "$MOD_DIR/internal/version" ]] && ld="-X $PK_MOD/internal/version.Version=$ver"
    local -a BUILD_ENV=("${PK_GOENV[@]}")
    build_in_throwaway_module provider-kubernetes "$PK_MOD" "$ver" "$ld" "$extra" "provider=$PK_MOD/cmd/provider"
  fi
  if [[ -z "$have_pkg" ]]; then
    [[ -r "$MOD_DIR/package/crossplane.yaml" && -d "$MOD_DIR/package/crds" ]] ||
      die "provider-kubernetes $ver: $MOD_DIR has no package/crossplane.yaml and package/crds/ — has the layout changed?"
    tmp="$dir/.package.tmp.$$"
    TMP_PATHS+=("$tmp")
    rm -rf -- "$tmp" "$dir/package"
    cp -R -- "$MOD_DIR/package" "$tmp"
    chmod -R u+w -- "$tmp"  # the module cache is read-only
    mv -T -- "$tmp" "$dir/package"
    [[ -d "$MOD_DIR/examples" ]] ||
      die "provider-kubernetes $ver: $MOD_DIR has no examples/ — has the layout changed?"
    tmp="$dir/.examples.tmp.$$"
    TMP_PATHS+=("$tmp")
    rm -rf -- "$tmp" "$dir/examples"
    cp -R -- "$MOD_DIR/examples" "$tmp"
    chmod -R u+w -- "$tmp"
    mv -T -- "$tmp" "$dir/examples"
    log "provider-kubernetes $ver: package/ and examples/ copied → $dir"
  fi
  grep -qs 'strategy: Webhook' "$dir/package/crds/kubernetes.crossplane.io_objects.yaml" ||
    log "provider-kubernetes $ver: WARNING its Object CRD has no 'conversion: strategy: Webhook' (the upgrade tests expect one)"
}

# The test node's own small programs (hack/node-programs/: standard library
# only, so no network): built static into a directory named by the hash of
# their sources, so an edit rebuilds them and a warm run does not.
NODE_PROGRAMS=(pause apicheck)
NODE_PROGRAMS_DIR=""  # what bin/<program> points into
build_node_programs() {
  local src="$HACK_DIR/node-programs" hash dir p t0 tmp
  hash="$(cd "$src" && find . -type f \( -name '*.go' -o -name go.mod \) -print0 | LC_ALL=C sort -z |
          xargs -0 sha256sum | sha256sum | cut -c1-12)"
  dir="$CACHE/node-programs-$hash"
  NODE_PROGRAMS_DIR="../node-programs-$hash"
  if all_present "$dir" "${NODE_PROGRAMS[@]}"; then log "node programs: cached (${NODE_PROGRAMS[*]})"; return 0; fi
  need_go
  mkdir -p "$dir" "$CACHE/logs"
  for p in "${NODE_PROGRAMS[@]}"; do
    tmp="$dir/.$p.tmp.$$"
    TMP_PATHS+=("$tmp")
    t0=$SECONDS
    : >"$CACHE/logs/node-program-$p-build.log"
    run_logged "building the node program $p (hack/node-programs/$p)" \
      "$BUILD_TIMEOUT" "$CACHE/logs/node-program-$p-build.log" \
      env -C "$src" GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "$tmp" "./$p"
    mv -f "$tmp" "$dir/$p"
    log "node program $p: built in $(fmt_secs $((SECONDS - t0))) → $dir/$p"
  done
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another build-binaries run holds $CACHE/.lock — waiting up to ${LOCK_TIMEOUT}s…"
  flock -w "$LOCK_TIMEOUT" 9 || die "timed out after ${LOCK_TIMEOUT}s waiting for $CACHE/.lock (is another build stuck?)"
fi
mkdir -p "$CACHE/work" "$CACHE/logs"

T_START=$SECONDS
SUMMARY="kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION, registry $REGISTRY_VERSION, crank $CROSSPLANE_CLI_VERSION, cosign $COSIGN_VERSION, provider-kubernetes ${PROVIDER_KUBERNETES_VERS[*]}"
log "cache: $CACHE ($SUMMARY)"
build_etcd
build_kubernetes
build_registry
build_crank
[[ "${CROSSPLANE_RS_CORE:-}" == 1 ]] && build_crossplane_core
build_cosign
build_provider_kubernetes
build_node_programs

# (Re)create bin/ — each link is replaced atomically so concurrent readers
# never see a missing file; anything else in bin/ is removed.
declare -A LINKS=(
  [etcd]="../etcd-$ETCD_VERSION/etcd"
  [kube-apiserver]="../kubernetes-$KUBERNETES_VERSION/kube-apiserver"
  [kube-controller-manager]="../kubernetes-$KUBERNETES_VERSION/kube-controller-manager"
  [kube-scheduler]="../kubernetes-$KUBERNETES_VERSION/kube-scheduler"
  [kubelet]="../kubernetes-$KUBERNETES_VERSION/kubelet"
  [kube-proxy]="../kubernetes-$KUBERNETES_VERSION/kube-proxy"
  [kubectl]="../kubernetes-$KUBERNETES_VERSION/kubectl"
  [registry]="$REGISTRY_TARGET"
  [crank]="../crank-$CROSSPLANE_CLI_VERSION/crank"
  [cosign]="../cosign-$COSIGN_VERSION/cosign"
)
for name in "${NODE_PROGRAMS[@]}"; do LINKS[$name]="$NODE_PROGRAMS_DIR/$name"; done
if [[ "${CROSSPLANE_RS_CORE:-}" == 1 ]]; then
  LINKS[crossplane]="../crank-$CROSSPLANE_CLI_VERSION/crossplane"
  LINKS[crossplane-crds]="../crank-$CROSSPLANE_CLI_VERSION/crds"  # a directory
  LINKS[crossplane-webhookconfigurations]="../crank-$CROSSPLANE_CLI_VERSION/webhookconfigurations"  # a directory
fi
for v in "${PROVIDER_KUBERNETES_VERS[@]}"; do
  LINKS[provider-kubernetes-$v]="../provider-kubernetes-$v/provider"
  LINKS[provider-kubernetes-$v-package]="../provider-kubernetes-$v/package"  # a directory
  LINKS[provider-kubernetes-$v-examples]="../provider-kubernetes-$v/examples"  # a directory
done
mkdir -p "$CACHE/bin"
for name in "${!LINKS[@]}"; do
  ln -sfn "${LINKS[$name]}" "$CACHE/bin/.$name.tmp"
  mv -Tf "$CACHE/bin/.$name.tmp" "$CACHE/bin/$name"
  if [[ "$name" == *-examples || "$name" == crossplane-crds || "$name" == crossplane-webhookconfigurations ]]; then
    [[ -d "$CACHE/bin/$name" ]] || die "bin/$name -> ${LINKS[$name]} is not a directory (cache corrupted? delete $CACHE/${LINKS[$name]#../} and rerun)"
  elif [[ "$name" == *-package ]]; then
    [[ -r "$CACHE/bin/$name/crossplane.yaml" ]] || die "bin/$name -> ${LINKS[$name]} has no crossplane.yaml (cache corrupted? delete $CACHE/${LINKS[$name]#../} and rerun)"
  else
    [[ -x "$CACHE/bin/$name" && ! -d "$CACHE/bin/$name" ]] || die "bin/$name -> ${LINKS[$name]} is not an executable (cache corrupted? delete $CACHE and rerun)"
  fi
done
# Node programs built from older sources are no longer linked.
for f in "$CACHE"/node-programs-*; do
  [[ -d "$f" && "../$(basename "$f")" != "$NODE_PROGRAMS_DIR" ]] && rm -rf -- "$f"
done
for f in "$CACHE/bin"/* "$CACHE/bin"/.[!.]*; do
  [[ -e "$f" || -L "$f" ]] || continue
  [[ -n "${LINKS[$(basename "$f")]+x}" ]] || rm -f -- "$f"
done

log "done in $(fmt_secs $((SECONDS - T_START))): ${#LINKS[@]} entries in $CACHE/bin ($SUMMARY)"
echo "CROSSPLANE_RS_BIN=$CACHE/bin"
