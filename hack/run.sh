#!/usr/bin/env bash
# The README's run command: builds everything, starts a local control plane
# (etcd, a control and a remote kube-apiserver, a kube-controller-manager
# each) with a real node (containerd, kubelet, kube-proxy, kube-scheduler;
# needs root) and a local TLS registry the node trusts, builds the project's
# image without Docker (crates/oci) and loads it into the node, applies
# deploy/ (overlay local-node: the six controllers run as pods under their
# shipped ServiceAccounts and RBAC), pushes the packages and images the
# seeds name to the local registry (xpkg, oci-image) and applies the
# ImageConfigs that map those names onto it (examples/demo/imageconfigs.yaml),
# applies examples/ (every seed file marked `Applies unchanged: yes`,
# unchanged), prints what `kubectl get` shows and ends with one verdict per
# seed and the time it took. Stays up until Ctrl-C (set RUN_ONCE=1 to stop
# after the verdicts; it then exits 1 if one FAILED).
#
#   hack/run.sh               # controllers as pods on the local node
#   hack/run.sh --processes   # controllers as processes on this machine
#                             # (no node: seeds 001 and 004 are skipped)
set -euo pipefail
mode=pods
for arg in "$@"; do
  case "$arg" in
    --processes) mode=processes ;;
    *) echo "usage: hack/run.sh [--processes]" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
cd "$(dirname "$0")/.."
repo=$(pwd)
dir="${CROSSPLANE_RS_RUN_DIR:-${TMPDIR:-/tmp}/crossplane-rs-run}"
mkdir -p "$dir/logs"
say() { printf '==> %s\n' "$*" >&2; }
pids=()
cleanup() {
  say "stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building upstream binaries"
bin_line=$(hack/build-binaries.sh | tail -n 1)
export "${bin_line?}"
export PATH="$CROSSPLANE_RS_BIN:$PATH"
say "installing the node's Debian packages when missing"
hack/install-debian-packages.sh

say "building crossplane-rs"
cargo build --workspace --bins --locked

say "starting the local control plane (logs in $dir/logs)"
rm -f "$dir/ready" "$dir/registry.address" "$dir/registry-ca.pem"
plane_args=(--dir "$dir")
[[ "$mode" == pods ]] && plane_args+=(--node --load-image "$repo/target/debug" --registry)
target/debug/controlplane "${plane_args[@]}" >"$dir/logs/controlplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 900); do
  [[ -f "$dir/ready" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/logs/controlplane.log" >&2; exit 1; }
  sleep 0.2
done
[[ -f "$dir/ready" ]] || { say "control plane did not start within 180s"; cat "$dir/logs/controlplane.log" >&2; exit 1; }
export KUBECONFIG="$dir/control.kubeconfig"

if [[ "$mode" == pods ]]; then
  grep -E '^(node|image|registry) ' "$dir/logs/controlplane.log" | sed 's/^/    /' >&2 || true
  registry=$(cat "$dir/registry.address")
  ca="$dir/registry-ca.pem"
  say "pushing the seeds' packages and images to the local registry $registry"
  push_image() { # REFERENCE BINARY [NAME=VALUE...]: one binary on the Debian base
    local ref=$1 bin=$2; shift 2
    local envs=()
    for e in "$@"; do envs+=(--env "$e"); done
    target/debug/oci-image "$ref" --binary "$bin" --bin-dir target/debug "${envs[@]}" \
      --ca-file "$ca" 2>&1 | sed 's/^/    /' >&2
  }
  # Seed 004's provider-example: a Provider package serving a Widget kind,
  # its runtime image the sample controller alone, told by the image's
  # environment to act on Widgets in every namespace (a Provider runtime's
  # rights are cluster-wide; a stack's controller watches its own namespace).
  push_image "$registry/crossplane-contrib/provider-example-controller:v1.0.0" stack-controller \
    STACK_GROUP=example.crossplane.io STACK_VERSION=v1alpha1 STACK_KIND=Widget STACK_PLURAL=widgets \
    'WATCH_NAMESPACE=*'
  target/debug/xpkg push examples/demo/provider-example "$registry/crossplane-contrib/provider-example:v1.0.0" \
    --runtime-image xpkg.upbound.io/crossplane-contrib/provider-example-controller:v1.0.0 \
    --ca-file "$ca" | sed 's/^/    /' >&2
  # Seed 001: the Redis stack its ExtensionRequests ask for, its controller,
  # and the controller the seed's Extension names (the same program, told
  # by its image's environment which kind it runs).
  target/debug/xpkg push examples/stacks/redis "$registry/redis:v0.1.0" --ca-file "$ca" | sed 's/^/    /' >&2
  push_image "$registry/stack-controller:v0.1.0" stack-controller
  push_image "$registry/redis/redis-crossplane-controller:2.0.9" stack-controller \
    STACK_GROUP=crossplane.redislabs.com STACK_VERSION=v1alpha1 STACK_KIND=RedisCluster STACK_PLURAL=redisclusters

  say "applying deploy/ (overlay local-node): the six controllers as pods"
  kubectl apply --server-side --force-conflicts -k deploy/overlays/local-node >/dev/null
  # Operator configuration: the package-manager trusts the registry's CA.
  kubectl -n crossplane-system create configmap registry-ca --from-file=ca.pem="$ca" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n crossplane-system patch deployment package-manager --type=json -p '[
    {"op": "add", "path": "/spec/template/spec/volumes/-",
     "value": {"name": "registry-ca", "configMap": {"name": "registry-ca"}}},
    {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
     "value": {"name": "registry-ca", "mountPath": "/etc/crossplane-rs/registry-ca", "readOnly": true}},
    {"op": "add", "path": "/spec/template/spec/containers/0/env/-",
     "value": {"name": "CA_BUNDLE_PATH", "value": "/etc/crossplane-rs/registry-ca/ca.pem"}}]' >/dev/null
  kubectl -n crossplane-system rollout status deployment package-manager --timeout=180s >/dev/null
  kubectl -n crossplane-system wait deployment --all --for=condition=Available --timeout=180s
  kubectl get pods -n crossplane-system -o wide
  say "applying the ImageConfigs (examples/demo/imageconfigs.yaml, LOCAL_REGISTRY=$registry)"
  sed "s|LOCAL_REGISTRY|$registry|g" examples/demo/imageconfigs.yaml | kubectl apply -f - ||
    say "the ImageConfigs did not apply (seeds 001 and 004 will not find their packages)"
  remote_kubeconfig="$dir/remote.pod.kubeconfig"
else
remote_kubeconfig="$dir/remote.kubeconfig"
say "starting the six controllers"
port=18080
binaries=(scheduler application-controller resource-controller object-provider package-manager rbac-manager)
rm -f "$dir/addrs.new"
for b in "${binaries[@]}"; do
  port=$((port + 1))
  target/debug/"$b" --metrics-addr "127.0.0.1:$port" >"$dir/logs/$b.log" 2>&1 &
  pids+=($!)
  echo "$b 127.0.0.1:$port" >>"$dir/addrs.new"
done
mv "$dir/addrs.new" "$dir/addrs"

say "waiting for every controller to answer /healthz"
while read -r b addr; do
  ok=
  for _ in $(seq 1 150); do
    if curl -fsS "http://$addr/healthz" >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  [[ -n "$ok" ]] || { say "$b is not healthy; its log:"; cat "$dir/logs/$b.log" >&2; exit 1; }
  printf '    %-24s healthy on http://%s (metrics: /metrics)\n' "$b" "$addr"
done <"$dir/addrs"

fi

say "applying examples/ (the seeds' examples and the wordpress-demo cluster)"
kubectl create namespace complex --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n complex create secret generic wordpress-demo-cluster \
  --from-file=kubeconfig="$remote_kubeconfig" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace crossplane-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n crossplane-system create secret generic remote-kubeconfig \
  --from-file=kubeconfig="$remote_kubeconfig" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f examples/object-provider/
kubectl apply -f examples/wordpress-demo/
# Seed 001's ExtensionRequests go into namespace `stacks`: the Extension
# record they make is `redis`, the name of the seed's own Extension (which
# stays in `default`); one namespace cannot hold both.
kubectl create namespace stacks --dry-run=client -o yaml | kubectl apply -f - >/dev/null
for f in examples/seeds/*.yaml; do
  grep -q '^# Applies unchanged: yes' "$f" || continue
  case "$f" in
    */001-extensionrequests.yaml) kubectl apply -n stacks -f "$f" ;;
    *) kubectl apply -f "$f" ;;
  esac
done

source hack/verdicts.sh
say "checking each seed (waiting up to ${VERDICT_TIMEOUT:-240}s in all)"
verdicts

say "kubectl get (control cluster)"
kubectl -n complex get kubernetescluster
kubectl -n complex get kubernetesapplication
kubectl -n complex get kubernetesapplicationresource --selector app=wordpress-demo
kubectl get crossplane -A
say "kubectl get (remote cluster: what the applications delivered)"
kubectl --kubeconfig "$dir/remote.kubeconfig" get namespaces,deployments,services -A \
  --selector app=wordpress 2>/dev/null || true
kubectl --kubeconfig "$dir/remote.kubeconfig" get namespace sample-namespace --show-labels || true

if [[ "$mode" == pods ]]; then
  say "kubectl get pods -A (controllers, the Provider's runtime, the stacks' controllers)"
  kubectl get pods -A -o wide
fi

say "verdicts"
printf '%s\n' "${verdict_lines[@]}"
say "demo up in $(( $(date +%s) - t0 ))s (build included; mode: $mode)"

if [[ "${RUN_ONCE:-0}" == 1 ]]; then exit "$failed"; fi
say "running; KUBECONFIG=$dir/control.kubeconfig (remote: $dir/remote.kubeconfig). Ctrl-C stops everything."
wait "${pids[0]}"
