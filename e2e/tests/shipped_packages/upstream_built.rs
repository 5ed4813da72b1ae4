//! A provider built by upstream's own CLI installs, runs and upgrades without a failed read.

use super::*;

fn object_yaml(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: kubernetes.crossplane.io/v1alpha2\nkind: Object\nmetadata:\n  name: {name}\nspec:\n  providerConfigRef:\n    name: injected\n  forProvider:\n    manifest:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        name: {name}\n        namespace: {ns}\n      data:\n        written-by: provider-kubernetes\n"
    )
}

#[test]
fn an_upstream_built_provider_installs_runs_and_upgrades_without_a_conversion_error() {
    let _group = kubernetes_group();
    let up = upstream();
    let name = "provider-kubernetes";
    apply(&provider_yaml(name, &up.references[0], ""));
    let p = wait_blocking(
        Duration::from_secs(300),
        "the upstream-built Provider Installed and Healthy",
        || provider_healthy(name),
        explain,
    );
    let revs = revisions_of(name);
    assert_eq!(revs.len(), 1, "{revs:?}");
    let first = revs[0].clone();
    // The package image is the runtime: pinned to the package's digest.
    let digest = first["metadata"]["annotations"]["pkg.crossplane.io/digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let image = first["spec"]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        image.ends_with(&format!("/crossplane-contrib/provider-kubernetes@{digest}")),
        "the revision runs the package image itself: {image} ({digest})"
    );
    assert_eq!(
        condition(&first, "RuntimeHealthy").map(|c| c.0),
        Some("True".to_owned()),
        "{p}"
    );

    // Its pod runs that image on the node, with its TLS Secrets mounted.
    let pods = runtime_pods(name);
    let pod = pods
        .iter()
        .find(|p| p["status"]["phase"] == "Running")
        .unwrap_or_else(|| panic!("no running runtime pod: {pods:?}"));
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    let mounts = container["volumeMounts"].to_string();
    assert!(
        mounts.contains("/tls/server") && mounts.contains("/tls/client"),
        "{mounts}"
    );
    let volumes = pod["spec"]["volumes"].to_string();
    assert!(
        volumes.contains("provider-kubernetes-tls-server")
            && volumes.contains("provider-kubernetes-tls-client"),
        "{volumes}"
    );
    assert!(
        !pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
    );
    for secret in [
        "provider-kubernetes-tls-server",
        "provider-kubernetes-tls-client",
    ] {
        let s = get_json(&["secret", secret, "-n", RUNTIMES]).unwrap();
        for key in ["tls.crt", "tls.key", "ca.crt"] {
            assert!(s["data"][key].is_string(), "{secret} has {key}");
        }
    }
    let env = container["env"].to_string();
    for var in [
        "PROVIDER_NAME",
        "REVISION_NAME",
        "REVISION_UID",
        "TLS_SERVER_CERTS_DIR",
        "TLS_CLIENT_CERTS_DIR",
        "WEBHOOK_TLS_CERT_DIR",
    ] {
        assert!(env.contains(var), "{var} in {env}");
    }
    let restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1);
    assert_eq!(restarts, 0, "the provider did not crash: {pod}");

    // Its managed resources become Ready.
    let ns = testenv::unique_name("upstream");
    kubectl(&["create", "namespace", &ns]);
    apply(
        "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata:\n  name: injected\nspec:\n  credentials:\n    source: InjectedIdentity\n",
    );
    let object = testenv::unique_name("cm");
    apply(&object_yaml(&object, &ns));
    wait_blocking(
        Duration::from_secs(120),
        "the Object Ready and Synced, its ConfigMap made",
        || {
            let o = get_json(&["objects.kubernetes.crossplane.io", &object])?;
            let ready = condition(&o, "Ready").is_some_and(|c| c.0 == "True");
            let synced = condition(&o, "Synced").is_some_and(|c| c.0 == "True");
            (ready && synced && get_json(&["configmap", &object, "-n", &ns]).is_some())
                .then_some(())
        },
        || {
            format!(
                "{}\n{}\nruntime log (tail):\n{}",
                kubectl_try(&["get", "objects.kubernetes.crossplane.io", "-o", "yaml"]).1,
                explain(),
                kubectl_try(&[
                    "logs",
                    "-n",
                    RUNTIMES,
                    "-l",
                    &format!("pkg.crossplane.io/provider={name}"),
                    "--tail=400",
                ])
                .1
                .lines()
                .filter(|l| !l.contains("TLS handshake error"))
                .collect::<Vec<_>>()
                .join("\n")
            )
        },
    );
    // Reading it at the other version goes through the provider's
    // conversion webhook.
    let old = kubectl(&[
        "get",
        "objects.v1alpha1.kubernetes.crossplane.io",
        &object,
        "-o",
        "jsonpath={.apiVersion}",
    ]);
    assert_eq!(old, "kubernetes.crossplane.io/v1alpha1");

    // The upgrade: `kubectl get` of the converted kind, every 100 ms,
    // never fails.
    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let poller = {
        let (stop, polls, errors, object) =
            (stop.clone(), polls.clone(), errors.clone(), object.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let (ok, out) = kubectl_try(&[
                    "get",
                    "objects.v1alpha1.kubernetes.crossplane.io",
                    &object,
                    "-o",
                    "name",
                ]);
                polls.fetch_add(1, Ordering::SeqCst);
                if !ok {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("{:?}: {}", started, out.trim()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let upgrade_started = Instant::now();
    apply(&provider_yaml(name, &up.references[1], ""));
    let second = wait_blocking(
        Duration::from_secs(300),
        "the second release's revision active with a healthy runtime, the first one's runtime gone",
        || {
            let revs = revisions_of(name);
            let newest = revs.last()?.clone();
            let active = newest["spec"]["desiredState"] == "Active"
                && newest["metadata"]["name"] != first["metadata"]["name"]
                && condition(&newest, "RuntimeHealthy").is_some_and(|c| c.0 == "True");
            let old_gone = !kubectl(&["get", "deployments", "-n", RUNTIMES, "-o", "name"])
                .contains(first["metadata"]["name"].as_str()?);
            let old_pods_gone = runtime_pods(name).iter().all(|p| {
                p["metadata"]["labels"]["pkg.crossplane.io/revision"] != first["metadata"]["name"]
            });
            (active && old_gone && old_pods_gone && provider_healthy(name).is_some())
                .then_some(newest)
        },
        explain,
    );
    // Some more reads against the new runtime alone.
    let settled = polls.load(Ordering::SeqCst);
    wait_blocking(
        Duration::from_secs(60),
        "20 more reads of the converted kind against the new runtime",
        || {
            let n = polls.load(Ordering::SeqCst);
            if n >= settled + 20 {
                Ok(())
            } else {
                Err(format!("{} reads since", n - settled))
            }
        },
        String::new,
    );
    stop.store(true, Ordering::SeqCst);
    poller.join().unwrap();
    let errors = errors.lock().unwrap().clone();
    let total = polls.load(Ordering::SeqCst);
    eprintln!(
        "upgrade: {total} reads of the converted kind in {:?}, {} failed",
        upgrade_started.elapsed(),
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "kubectl get of a conversion-webhook kind failed during the upgrade ({} of {total}): {errors:#?}",
        errors.len()
    );
    assert!(total >= 30, "the reads ran throughout the upgrade: {total}");
    // How (docs/packages.md): the Service sends to the new revision's pods
    // alone, and the CRD names the Service port it moved to.
    let service = get_json(&["service", name, "-n", RUNTIMES]).unwrap();
    assert_eq!(
        service.pointer("/spec/selector/pkg.crossplane.io~1revision"),
        second.pointer("/metadata/name"),
        "{service}"
    );
    let port = service
        .pointer("/metadata/annotations/pkg.crossplane.io~1webhook-port")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let crd = get_json(&["crd", "objects.kubernetes.crossplane.io"]).unwrap();
    assert_eq!(
        crd.pointer("/spec/conversion/webhook/clientConfig/service/port")
            .map(Value::to_string),
        Some(port),
        "the CRD's conversion calls the Service port it names"
    );
    let image = second["spec"]["image"].as_str().unwrap_or_default();
    assert!(
        image.contains("/crossplane-contrib/provider-kubernetes@sha256:"),
        "{image}"
    );
    // The managed resource is still Ready under the new runtime.
    let o = get_json(&["objects.kubernetes.crossplane.io", &object]).unwrap();
    assert_eq!(condition(&o, "Ready").map(|c| c.0), Some("True".to_owned()));

    kubectl(&[
        "delete",
        "objects.kubernetes.crossplane.io",
        &object,
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(get_json(&["configmap", &object, "-n", &ns]).is_none());
    // Its custom resources would hold the Provider's deletion.
    kubectl(&[
        "delete",
        "providerconfigs.kubernetes.crossplane.io",
        "injected",
        "--wait=true",
        "--timeout=60s",
    ]);
    delete_provider_with(name, &["objects.kubernetes.crossplane.io"]);
}
