# shellcheck shell=bash
# Sourced by hack/run.sh once the seeds' examples are applied: `verdicts`
# checks what each seed's examples did, waiting up to VERDICT_TIMEOUT
# seconds (default 240) in all (the seeds progress side by side; a check
# that runs past it gets 5s), and fills `verdict_lines` (one line
# per seed, "seed NNN: ok — what was checked" or "seed NNN: FAILED — what was
# not so") and `failed` (1 when a verdict FAILED). Needs KUBECONFIG, `dir`
# (the run directory) and `mode` (pods or processes).

verdict_lines=()
failed=0

# until_ok CMD...: runs CMD every 2s until it succeeds; 1 once the
# verdicts' deadline has passed (at least 5s from now).
until_ok() {
  local deadline=$((verdict_deadline > $(date +%s) + 5 ? verdict_deadline : $(date +%s) + 5))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) >= deadline)) && return 1
    sleep 2
  done
}

# jget ARGS... JSONPATH: kubectl get ARGS -o jsonpath=JSONPATH, empty on error.
jget() {
  local path=${*: -1}
  kubectl get "${@:1:$#-1}" -o "jsonpath=$path" 2>/dev/null || true
}

# cond TYPE ARGS...: the status of condition TYPE of the object ARGS names.
cond() {
  local type=$1
  shift
  jget "$@" "{.status.conditions[?(@.type==\"$type\")].status}"
}

# is WANT CMD...: CMD prints exactly WANT.
is() {
  local want=$1
  shift
  [[ "$("$@")" == "$want" ]]
}

# reason TYPE ARGS...: "reason: message" of condition TYPE, for a FAILED line.
reason() {
  local type=$1
  shift
  jget "$@" "{.status.conditions[?(@.type==\"$type\")].reason}: {.status.conditions[?(@.type==\"$type\")].message}"
}

# joined ITEMS...: the items, separated by "; ".
joined() {
  local out=$1
  shift
  for i in "$@"; do out+="; $i"; done
  printf '%s' "$out"
}

verdict() { # SEED ok|FAILED|skipped TEXT
  verdict_lines+=("seed $1: $2 — $3")
  [[ "$2" == FAILED ]] && failed=1
  return 0
}


verdict_000() {
  local app=(-n complex kubernetesapplication wordpress-demo)
  if ! until_ok is Submitted jget "${app[@]}" '{.status.state}'; then
    verdict 000 FAILED "wordpress-demo is $(jget "${app[@]}" '{.status.state}') (want Submitted): $(reason Synced "${app[@]}")"
    return
  fi
  local counts states remote
  counts=$(jget "${app[@]}" '{.status.desiredResources}/{.status.submittedResources}')
  states=$(jget -n complex kubernetesapplicationresource --selector app=wordpress-demo \
    '{range .items[*]}{.status.state}{" "}{end}')
  remote=$(kubectl --kubeconfig "$dir/remote.kubeconfig" get deployments,services -A \
    --selector app=wordpress -o name 2>/dev/null | wc -l || true)
  if [[ "$counts" == 3/3 && "$states" == "Submitted Submitted Submitted " && "$remote" == 2 ]]; then
    verdict 000 ok "wordpress-demo Submitted (3 of 3 resources), its 3 KubernetesApplicationResources Submitted, the wordpress Deployment and Service in the remote cluster"
  else
    verdict 000 FAILED "wordpress-demo Submitted but desired/submitted $counts, resources: ${states:-none}, $remote of 2 objects in the remote cluster"
  fi
}

verdict_001() {
  if [[ "$mode" != pods ]]; then
    verdict 001 skipped "stacks run their controllers as pods: run without --processes"
    return
  fi
  local bad=() r
  for r in redis-from-package redis-from-crd; do
    until_ok is True cond Ready -n stacks extensionrequest "$r" ||
      bad+=("ExtensionRequest $r not Ready ($(reason Ready -n stacks extensionrequest "$r"))")
  done
  until_ok is True cond Ready -n stacks extensions.extensions.crossplane.io redis ||
    bad+=("the stack's Extension stacks/redis not Ready ($(reason Ready -n stacks extensions.extensions.crossplane.io redis))")
  if ((${#bad[@]} == 0)); then
    kubectl apply -n stacks -f - >/dev/null <<'YAML' || bad+=("RedisCluster demo-cache could not be applied")
apiVersion: cache.crossplane.io/v1alpha1
kind: RedisCluster
metadata:
  name: demo-cache
spec:
  size: 3
YAML
    until_ok is '{"size":3}' jget -n stacks configmap demo-cache '{.data.spec}' ||
      bad+=("no ConfigMap stacks/demo-cache from the stack's controller for RedisCluster demo-cache")
  fi
  # The seed's own Extension record (namespace default): its controller
  # runs, from the image the ImageConfig maps; it owns
  # redisclusters.crossplane.redislabs.com, which only a stack can install.
  local ext=(-n default extensions.extensions.crossplane.io redis) seed_ext
  until_ok is True jget -n default deployment redis-controller \
    '{.status.conditions[?(@.type=="Available")].status}' ||
    bad+=("the seed Extension's controller default/redis-controller is not Available ($(jget -n default pods -l core.crossplane.io/name=redis '{.items[*].status.containerStatuses[*].state}'))")
  until_ok is True cond RBACReady "${ext[@]}" ||
    bad+=("the seed Extension default/redis is not RBACReady ($(reason RBACReady "${ext[@]}"))")
  if [[ "$(cond Ready "${ext[@]}")" == True ]]; then
    seed_ext="Extension redis Ready"
  elif [[ "$(jget "${ext[@]}" '{.status.conditions[?(@.type=="Ready")].reason}')" == MissingCRDs ]]; then
    seed_ext="the seed's Extension redis: controller Available, RBACReady (its Ready stays False, MissingCRDs: it owns redisclusters.crossplane.redislabs.com, which no stack here installs)"
  else
    bad+=("the seed Extension default/redis: $(reason Ready "${ext[@]}")")
  fi
  if ((${#bad[@]} == 0)); then
    verdict 001 ok "redis-from-package and redis-from-crd Ready (Extension stacks/redis Ready), RedisCluster demo-cache acted on by the stack controller (ConfigMap demo-cache); $seed_ext"
  else
    verdict 001 FAILED "$(joined "${bad[@]}")"
  fi
}

verdict_002_003() {
  local obj=(objects.kubernetes.crossplane.io sample-namespace) ok=1
  until_ok is True cond Ready "${obj[@]}" || ok=
  until_ok is True cond Synced "${obj[@]}" || ok=
  local labels olm
  labels=$(kubectl --kubeconfig "$dir/remote.kubeconfig" get namespace sample-namespace \
    -o jsonpath='{.metadata.labels.example}' 2>/dev/null || true)
  olm="csv-kong (002-object-csv-kong-*) is not checked: it observes an OLM Subscription/ClusterServiceVersion, and OLM is not installed here"
  if [[ -n "$ok" && "$labels" == true ]]; then
    verdict 002 ok "Object sample-namespace Synced and Ready, Namespace sample-namespace (example=true) in the remote cluster; $olm"
  else
    verdict 002 FAILED "Object sample-namespace: Synced $(cond Synced "${obj[@]}"), Ready $(cond Ready "${obj[@]}") ($(reason Ready "${obj[@]}")), remote label example=${labels:-none}; $olm"
  fi
  # Seed 003 is the managed-resource API's patterns; none of its examples
  # applies unchanged (illustrative GCP kinds and fragments), so they are
  # checked on the Object, a managed resource.
  local at
  at=$(jget "${obj[@]}" '{.status.atProvider.manifest.kind}/{.status.atProvider.manifest.metadata.name}')
  if [[ -n "$ok" && "$at" == Namespace/sample-namespace ]]; then
    verdict 003 ok "no 003 example applies unchanged (illustrative GCP kinds); its patterns on Object sample-namespace: spec.forProvider applied, status.atProvider.manifest observed ($at), Synced and Ready conditions"
  else
    verdict 003 FAILED "Object sample-namespace: status.atProvider.manifest is '${at}', Ready $(cond Ready "${obj[@]}")"
  fi
}

verdict_004() {
  if [[ "$mode" != pods ]]; then
    verdict 004 skipped "a Provider's runtime runs as a pod: run without --processes"
    return
  fi
  local p=(providers.pkg.crossplane.io provider-example) bad=()
  until_ok is True cond Installed "${p[@]}" ||
    bad+=("Provider provider-example not Installed ($(reason Installed "${p[@]}"))")
  until_ok is True cond Healthy "${p[@]}" ||
    bad+=("Provider provider-example not Healthy ($(reason Healthy "${p[@]}"))")
  local sel=(-n crossplane-rs-runtimes pods -l pkg.crossplane.io/package=provider-example)
  until_ok is Running jget "${sel[@]}" '{.items[0].status.phase}' ||
    bad+=("its runtime pod is '$(jget "${sel[@]}" '{.items[*].status.phase}')'")
  local ref label image
  ref=$(jget "${p[@]}" '{.spec.runtimeConfigRef.kind}/{.spec.runtimeConfigRef.name}')
  label=$(jget -n crossplane-rs-runtimes deployments -l pkg.crossplane.io/package=provider-example \
    '{.items[0].metadata.labels.example}')
  image=$(jget "${sel[@]}" '{.items[0].spec.containers[?(@.name=="package-runtime")].image}')
  [[ "$ref" == DeploymentRuntimeConfig/default && "$label" == label ]] ||
    bad+=("runtimeConfigRef $ref; its Deployment's label example=${label:-none} (want the default DeploymentRuntimeConfig's example=label)")
  if ((${#bad[@]} == 0)); then
    # The runtime acts on the kind the package installed.
    kubectl apply -n default -f - >/dev/null <<'YAML' || bad+=("Widget demo-widget could not be applied")
apiVersion: example.crossplane.io/v1alpha1
kind: Widget
metadata:
  name: demo-widget
spec:
  color: blue
YAML
    until_ok is '{"color":"blue"}' jget -n default configmap demo-widget '{.data.spec}' ||
      bad+=("no ConfigMap default/demo-widget from the provider's runtime for Widget demo-widget")
  fi
  if ((${#bad[@]} == 0)); then
    verdict 004 ok "provider-example Installed and Healthy, its runtime pod Running ($image) under DeploymentRuntimeConfig default (its label example=label), Widget demo-widget acted on by it (ConfigMap demo-widget)"
  else
    verdict 004 FAILED "$(joined "${bad[@]}")"
  fi
}

verdicts() {
  local started
  started=$(date +%s)
  verdict_deadline=$((started + ${VERDICT_TIMEOUT:-240}))
  verdict_000
  verdict_001
  verdict_002_003
  verdict_004
  say "verdicts took $(($(date +%s) - started))s"
}
