#!/usr/bin/env bash
# The README's run command: builds everything, starts a local control plane
# (etcd, a control and a remote kube-apiserver, a kube-controller-manager
# each) with a real node (containerd, kubelet, kube-proxy, kube-scheduler;
# needs root), builds the project's image without Docker (crates/oci) and
# loads it into the node, applies deploy/ (overlay local-node: the six
# controllers run as pods under their shipped ServiceAccounts and RBAC),
# applies examples/ and prints what `kubectl get` shows. Stays up until
# Ctrl-C (set RUN_ONCE=1 to stop after printing).
#
#   hack/run.sh               # controllers as pods on the local node
#   hack/run.sh --processes   # controllers as processes on this machine
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

say "building crossplane-rs"
cargo build --workspace --bins --locked

say "starting the local control plane (logs in $dir/logs)"
rm -f "$dir/ready"
plane_args=(--dir "$dir")
[[ "$mode" == pods ]] && plane_args+=(--node --load-image "$repo/target/debug")
target/debug/controlplane "${plane_args[@]}" >"$dir/logs/controlplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
  [[ -f "$dir/ready" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/logs/controlplane.log" >&2; exit 1; }
  sleep 0.2
done
[[ -f "$dir/ready" ]] || { say "control plane did not start within 120s"; cat "$dir/logs/controlplane.log" >&2; exit 1; }
export KUBECONFIG="$dir/control.kubeconfig"

if [[ "$mode" == pods ]]; then
  grep -E '^(node|image) ' "$dir/logs/controlplane.log" | sed 's/^/    /' >&2 || true
  say "applying deploy/ (overlay local-node): the six controllers as pods"
  kubectl apply --server-side --force-conflicts -k deploy/overlays/local-node >/dev/null
  kubectl -n crossplane-system wait deployment --all --for=condition=Available --timeout=180s
  kubectl get pods -n crossplane-system -o wide
  remote_kubeconfig="$dir/remote.pod.kubeconfig"
else
remote_kubeconfig="$dir/remote.kubeconfig"
say "starting the six controllers"
port=18080
binaries=(scheduler application-controller resource-controller object-provider package-manager rbac-manager)
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
for f in examples/seeds/*.yaml; do
  grep -q '^# Applies unchanged: yes' "$f" || continue
  kubectl apply -f "$f"
done

say "waiting for wordpress-demo to be submitted to the remote cluster"
kubectl -n complex wait kubernetesapplication/wordpress-demo \
  --for=jsonpath='{.status.state}'=Submitted --timeout=120s

kubectl wait object/sample-namespace --for=condition=Ready --timeout=60s

say "kubectl get (control cluster)"
kubectl -n complex get kubernetescluster
kubectl -n complex get kubernetesapplication
kubectl -n complex get kubernetesapplicationresource --selector app=wordpress-demo
kubectl get crossplane
say "kubectl get (remote cluster: what the applications delivered)"
kubectl --kubeconfig "$dir/remote.kubeconfig" get namespaces,deployments,services -A \
  --selector app=wordpress 2>/dev/null || true
kubectl --kubeconfig "$dir/remote.kubeconfig" get namespace sample-namespace --show-labels

if [[ "$mode" == pods ]]; then
  say "kubectl get pods -n crossplane-system"
  kubectl get pods -n crossplane-system
fi
say "demo up in $(( $(date +%s) - t0 ))s (build included; mode: $mode)"

if [[ "${RUN_ONCE:-0}" == 1 ]]; then exit 0; fi
say "running; KUBECONFIG=$dir/control.kubeconfig (remote: $dir/remote.kubeconfig). Ctrl-C stops everything."
wait "${pids[0]}"
