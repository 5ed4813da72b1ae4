#!/usr/bin/env bash
# The README's run command: builds everything, starts a local control plane
# (etcd, a control and a remote kube-apiserver, a kube-controller-manager
# each), installs the CRDs, starts the six controllers, applies examples/ and
# prints what `kubectl get` shows. Stays up until Ctrl-C (set RUN_ONCE=1 to
# stop after printing).
set -euo pipefail
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
target/debug/controlplane --dir "$dir" >"$dir/logs/controlplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
  [[ -f "$dir/ready" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/logs/controlplane.log" >&2; exit 1; }
  sleep 0.2
done
[[ -f "$dir/ready" ]] || { say "control plane did not start within 120s"; cat "$dir/logs/controlplane.log" >&2; exit 1; }
export KUBECONFIG="$dir/control.kubeconfig"

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

say "applying examples/ (the seeds' examples and the wordpress-demo cluster)"
kubectl create namespace complex --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n complex create secret generic wordpress-demo-cluster \
  --from-file=kubeconfig="$dir/remote.kubeconfig" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace crossplane-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n crossplane-system create secret generic remote-kubeconfig \
  --from-file=kubeconfig="$dir/remote.kubeconfig" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
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

if [[ "${RUN_ONCE:-0}" == 1 ]]; then exit 0; fi
say "running; KUBECONFIG=$dir/control.kubeconfig (remote: $dir/remote.kubeconfig). Ctrl-C stops everything."
wait "${pids[0]}"
