//! Package content is data: what a package, a stack, an Extension or a
//! registry says never takes more than the operator allowed. Every test
//! here runs against the six controllers as pods from `deploy/` (the
//! local-node overlay, plus the registry's CA as operator configuration),
//! on the real node, with packages in a real registry; each asserts what a
//! user sees (conditions, `kubectl auth can-i`, the live objects, the pods'
//! restart counts).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::Value;

use e2e::hostile::{Hostile, Reply};
use e2e::kubectl::{can_i, create_as};
use e2e::packages::{
    apply, condition, delete_provider, get_json, kubectl, kubectl_try, provider, provider_yaml,
    test_crd, wait_blocking, wait_provider_healthy,
};
use e2e::shipped::{
    NS, RUNTIMES, explain, lease_of, package_dir, package_manager_lease, pod_of, push_layer,
    reconciles, resident_bytes, shipped, xpkg_push,
};

/// Every condition message of an object, one per line (`Type=Status:
/// message`).
fn conditions_text(obj: &Value) -> String {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={}: {}",
                        c["type"].as_str().unwrap_or_default(),
                        c["status"].as_str().unwrap_or_default(),
                        c["message"].as_str().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn namespace(prefix: &str) -> String {
    shipped();
    let ns = testenv::unique_name(prefix);
    kubectl(&["create", "namespace", &ns]);
    ns
}

fn extension(ns: &str, name: &str) -> Option<Value> {
    get_json(&["extensions.extensions.crossplane.io", name, "-n", ns])
}

fn explain_ns(ns: &str) -> String {
    let (_, objects) = kubectl_try(&[
        "get",
        "extensions,deployments,serviceaccounts,pods",
        "-n",
        ns,
        "-o",
        "yaml",
    ]);
    format!("{objects}\n{}", explain())
}

/// Whether the API server lets `subject` `verb` the kind `plural` of
/// `group` (cluster-wide), asked as a SelfSubjectAccessReview: `kubectl
/// auth can-i` resolves a new CRD's kind through its cached discovery and,
/// when that does not know it yet, asks about another resource.
fn may(subject: &str, verb: &str, plural: &str, group: &str) -> bool {
    let (ok, out) = create_as(
        subject,
        &format!(
            "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec: {{resourceAttributes: {{verb: {verb}, group: {group}, resource: {plural}}}}}\n"
        ),
    );
    ok && out.contains("allowed: true")
}

/// Waits until the Extension's RBACReady is False and says every one of
/// `says`; returns its message.
fn wait_rbac_refused(ns: &str, name: &str, says: &[&str]) -> String {
    wait_blocking(
        Duration::from_secs(60),
        &format!("Extension {ns}/{name} RBACReady=False naming {says:?}"),
        || {
            let e = extension(ns, name)?;
            let (status, message) = condition(&e, "RBACReady")?;
            (status == "False" && says.iter().all(|s| message.contains(s))).then_some(message)
        },
        || explain_ns(ns),
    )
}

/// An Extension running a pause controller, owning `owns` (YAML flow list).
fn grabbing_extension(ns: &str, name: &str, owns: &str) -> String {
    format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: Extension\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  customresourcedefinitions:\n    owns: {owns}\n  title: grab\n  version: 0.1.0\n  controller:\n    deployment:\n      name: {name}-controller\n      spec:\n        replicas: 1\n        selector: {{matchLabels: {{app: {name}}}}}\n        template:\n          metadata: {{labels: {{app: {name}}}}}\n          spec:\n            containers:\n            - {{name: c, image: {}}}\n",
        shipped().pause_image
    )
}

#[test]
fn an_extension_cannot_own_built_in_kinds_or_make_itself_cluster_admin() {
    let ns = namespace("grab");
    apply(&grabbing_extension(
        &ns,
        "identities",
        "[{kind: Group, apiVersion: v1}, {kind: User, apiVersion: v1}, {kind: Secret, apiVersion: v1}]",
    ));
    apply(&grabbing_extension(
        &ns,
        "rbac",
        "[{kind: ClusterRole, apiVersion: rbac.authorization.k8s.io/v1}, {kind: ServiceAccount, apiVersion: v1}]",
    ));
    let m = wait_rbac_refused(
        &ns,
        "identities",
        &["Group (v1)", "User (v1)", "Secret (v1)"],
    );
    eprintln!("identities: RBACReady=False: {m}");
    let m = wait_rbac_refused(
        &ns,
        "rbac",
        &[
            "ClusterRole (rbac.authorization.k8s.io/v1)",
            "ServiceAccount (v1)",
        ],
    );
    eprintln!("rbac: RBACReady=False: {m}");
    for name in ["identities", "rbac"] {
        let sa = format!("system:serviceaccount:{ns}:{name}");
        assert!(
            !can_i(&sa, &["impersonate", "groups"]),
            "{sa} may impersonate groups"
        );
        assert!(
            !can_i(&sa, &["list", "secrets", "-A"]),
            "{sa} may list secrets"
        );
        assert!(
            !can_i(&sa, &["create", "clusterrolebindings"]),
            "{sa} may create ClusterRoleBindings"
        );
        assert!(
            !can_i(&sa, &["create", "clusterroles"]),
            "{sa} may create ClusterRoles"
        );
        assert!(
            !can_i(&sa, &["create", "serviceaccounts", "-n", NS]),
            "{sa} may create ServiceAccounts"
        );
    }
}

/// Pushes a Provider package of one kind, `things.<group>` (with
/// `spec_extra` meta lines under spec), whose runtime is the pause image,
/// and installs it as Provider `name`: returns the group.
fn install_provider_as(name: &str, prefix: &str, spec_extra: &str) -> String {
    let g = format!("{}.example.org", testenv::unique_name(prefix));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir(&format!("provider-{prefix}"), spec_extra, &[(file, crd)]);
    let reference = format!(
        "{}/{prefix}/provider-{prefix}:v1",
        shipped().registry.address
    );
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(name, &reference, ""));
    g
}

/// [`install_provider_as`] under a new name: (name, group).
fn install_provider(prefix: &str, spec_extra: &str) -> (String, String) {
    let name = testenv::unique_name(prefix);
    let g = install_provider_as(&name, prefix, spec_extra);
    (name, g)
}

#[test]
fn a_package_cannot_ask_for_impersonation_deployments_or_binding() {
    shipped();
    let (name, _) = install_provider(
        "asks",
        "  controller:\n    permissionRequests:\n    - {apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate]}\n    - {apiGroups: [apps], resources: [deployments], verbs: [create]}\n    - {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind]}\n",
    );
    let revision = wait_blocking(
        Duration::from_secs(90),
        "a revision refused by the rbac-manager, naming each request",
        || {
            let list = get_json(&[
                "providerrevisions.pkg.crossplane.io",
                "-l",
                &format!("pkg.crossplane.io/package={name}"),
            ])?;
            let r = list["items"].as_array()?.first()?.clone();
            let (status, message) = condition(&r, "RBACReady")?;
            (status == "False"
                && message.contains("impersonate serviceaccounts")
                && message.contains("create deployments")
                && message.contains("bind clusterroles"))
            .then_some(r)
        },
        explain,
    );
    let rev = revision["metadata"]["name"].as_str().unwrap().to_owned();
    // The runtime's ServiceAccount (it runs: the package names a runtime
    // image) holds none of it.
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    assert!(!can_i(&sa, &["impersonate", "serviceaccounts", "-A"]));
    assert!(!can_i(&sa, &["create", "deployments", "-n", RUNTIMES]));
    assert!(!can_i(&sa, &["bind", "clusterroles"]));
    let role = get_json(&["clusterrole", &format!("crossplane:provider:{rev}:system")]);
    assert!(
        role.is_none(),
        "a role was rendered for a refused revision: {role:?}"
    );
    delete_provider(&name);
}

/// The fields of a hostile controller's pod template a refusal names.
const HOSTILE_FIELDS: [&str; 5] = [
    "template.spec.hostNetwork",
    "template.spec.hostPID",
    "template.spec.volumes[0].hostPath",
    "template.spec.containers[0].securityContext.privileged",
    "template.spec.serviceAccountName: ServiceAccount",
];

/// Waits until the Extension `ns/name` names every one of
/// [`HOSTILE_FIELDS`] in its conditions; returns their text.
fn wait_refused_fields(ns: &str, name: &str, timeout: Duration) -> String {
    wait_blocking(
        timeout,
        &format!("Extension {ns}/{name} to name every refused field"),
        || {
            let text = conditions_text(&extension(ns, name)?);
            HOSTILE_FIELDS
                .iter()
                .all(|f| text.contains(f))
                .then_some(text)
        },
        || explain_ns(ns),
    )
}

/// An Extension whose controller asks for everything "restricted" forbids.
fn hostile_extension(ns: &str, name: &str, service_account: &str) -> String {
    format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: Extension\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  title: hostile\n  version: 0.1.0\n  controller:\n    deployment:\n      name: {name}-controller\n      spec:\n        replicas: 1\n        selector: {{matchLabels: {{app: {name}}}}}\n        template:\n          metadata: {{labels: {{app: {name}}}}}\n          spec:\n            serviceAccountName: {service_account}\n            hostNetwork: true\n            hostPID: true\n            volumes: [{{name: root, hostPath: {{path: /}}}}]\n            containers:\n            - name: c\n              image: {}\n              securityContext: {{privileged: true}}\n              volumeMounts: [{{name: root, mountPath: /host}}]\n  permissions:\n    rules:\n    - {{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}}\n",
        shipped().pause_image
    )
}

#[test]
fn a_stack_controller_cannot_take_host_access_or_another_identity() {
    let ns = namespace("hostile");
    apply(&hostile_extension(&ns, "hostile", "default"));
    let message = wait_refused_fields(&ns, "hostile", Duration::from_secs(60));
    eprintln!("hostile: {message}");
    // The same in crossplane-system, naming the rbac-manager's identity: a
    // second Extension there is refused for the ServiceAccount alone.
    let sys = "hostile-in-system";
    apply(&hostile_extension(NS, sys, "rbac-manager"));
    wait_blocking(
        Duration::from_secs(60),
        "the Extension in crossplane-system to be refused the rbac-manager's ServiceAccount",
        || {
            let text = conditions_text(&extension(NS, sys)?);
            text.contains("ServiceAccount crossplane-system/rbac-manager exists")
                .then_some(())
        },
        || explain_ns(NS),
    );
    // Nothing runs, and no role went to a borrowed identity.
    for (namespace, name) in [(ns.as_str(), "hostile"), (NS, sys)] {
        let d = get_json(&["deployment", &format!("{name}-controller"), "-n", namespace]);
        assert!(d.is_none(), "{namespace}/{name}-controller exists: {d:?}");
    }
    // (An Extension's role is bound by a RoleBinding in its namespace, its
    // identity mark by a ClusterRoleBinding: both kinds are looked at.)
    let cluster = get_json(&["clusterrolebindings"]).unwrap();
    let namespaced = get_json(&["rolebindings", "-A"]).unwrap();
    let all = [cluster, namespaced];
    for b in all.iter().flat_map(|l| l["items"].as_array().unwrap()) {
        for s in b["subjects"].as_array().into_iter().flatten() {
            let (kind, name, namespace) = (
                s["kind"].as_str().unwrap_or_default(),
                s["name"].as_str().unwrap_or_default(),
                s["namespace"].as_str().unwrap_or_default(),
            );
            assert!(
                !(kind == "ServiceAccount"
                    && ((name == "default" && namespace == ns)
                        || (name == "rbac-manager"
                            && !b["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .starts_with("crossplane-rs:rbac-manager")))),
                "{} {} names {namespace}/{name}",
                b["kind"],
                b["metadata"]["name"]
            );
        }
    }
    kubectl(&[
        "delete",
        "extensions.extensions.crossplane.io",
        sys,
        "-n",
        NS,
        "--wait=false",
    ]);
}

#[test]
fn a_package_never_takes_over_a_crd_it_did_not_create() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("handmade"));
    // The administrator's CRD: a strict schema.
    let strict = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.{g}\nspec:\n  group: {g}\n  scope: Cluster\n  names: {{kind: Thing, plural: things, singular: thing, listKind: ThingList}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{size: {{type: integer}}}}}}}}}}\n"
    );
    let out = testenv::control_plane_with_node()
        .control
        .kubectl_stdin(&["create", "-f", "-"], Some(&strict));
    assert!(out.status.success(), "create the hand-made CRD: {out:?}");
    // The API server writes a new CRD's status itself (NamesAccepted, then
    // Established); look at it only after those, so that any later write
    // is somebody else's.
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        &format!("things.{g}"),
    ]);
    let before = get_json(&["crd", &format!("things.{g}")]).unwrap();
    let own_before = get_json(&["crd", "providers.pkg.crossplane.io"]).unwrap();
    // A package shipping a loose CRD of the same name, and one shipping
    // this project's own Provider CRD.
    let (file, loose) = test_crd(&g, "Thing");
    let own =
        std::fs::read_to_string(testenv::repo_root().join("crds/pkg.crossplane.io_providers.yaml"))
            .unwrap();
    let mut names = Vec::new();
    for (n, crds) in [
        ("takeover", vec![(file, loose)]),
        ("own-api", vec![("providers.yaml".to_owned(), own)]),
    ] {
        let dir = package_dir(&format!("provider-{n}"), "", &crds);
        let reference = format!("{}/takeover/provider-{n}:v1", shipped().registry.address);
        xpkg_push(&dir, &reference, None);
        let name = testenv::unique_name(n);
        apply(&provider_yaml(&name, &reference, ""));
        names.push(name);
    }
    let takeover = wait_blocking(
        Duration::from_secs(90),
        "the takeover package to be refused naming the CRD and its maker",
        || {
            let p = provider(&names[0])?;
            let (status, message) = condition(&p, "Healthy")?;
            (status == "False"
                && message.contains(&format!("things.{g}"))
                && message.contains("was not installed by this Provider")
                && message.contains("kubectl"))
            .then_some(message)
        },
        explain,
    );
    eprintln!("takeover: {takeover}");
    let own_api = wait_blocking(
        Duration::from_secs(90),
        "the package shipping providers.pkg.crossplane.io to be refused",
        || {
            let p = provider(&names[1])?;
            let (status, message) = condition(&p, "Healthy")?;
            (status == "False" && message.contains("providers.pkg.crossplane.io"))
                .then_some(message)
        },
        explain,
    );
    eprintln!("own API: {own_api}");
    for (before, name) in [
        (before, format!("things.{g}")),
        (own_before, "providers.pkg.crossplane.io".to_owned()),
    ] {
        let after = get_json(&["crd", &name]).unwrap();
        for field in ["/metadata/uid", "/metadata/resourceVersion"] {
            assert_eq!(
                before.pointer(field),
                after.pointer(field),
                "{name}: {field} changed"
            );
        }
    }
    // No role of either package gained rights on them.
    let roles = get_json(&["clusterroles"]).unwrap();
    for r in roles["items"].as_array().unwrap() {
        let role = r["metadata"]["name"].as_str().unwrap_or_default();
        if !role.starts_with("crossplane:provider:") {
            continue;
        }
        let text = r["rules"].to_string();
        assert!(
            !(text.contains(&g)
                || text.contains("pkg.crossplane.io") && text.contains("providers")),
            "{role} has rights on a CRD its package did not create: {text}"
        );
    }
    let edit_user = "system:serviceaccount:default:nobody";
    let (_, _) = kubectl_try(&["create", "serviceaccount", "nobody", "-n", "default"]);
    let (_, _) = kubectl_try(&[
        "create",
        "rolebinding",
        "nobody-edit",
        "--clusterrole=crossplane-edit",
        "--serviceaccount=default:nobody",
        "-n",
        "default",
    ]);
    assert!(!can_i(edit_user, &["create", &format!("things.{g}")]));
    for n in &names {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

/// A listener that accepts connections (TLS or not, it never answers) and
/// counts them.
fn counting_listener(
    ip: std::net::IpAddr,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let l = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(c);
        }
    });
    (addr, count)
}

#[test]
fn a_conversion_webhook_url_in_a_package_is_replaced_by_the_providers_own_service() {
    shipped();
    let node = testenv::control_plane_with_node().node.as_ref().unwrap();
    let (listener, connections) = counting_listener(node.host_ip.into());
    let g = format!("{}.example.org", testenv::unique_name("convert"));
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.{g}\nspec:\n  group: {g}\n  scope: Cluster\n  names: {{kind: Thing, plural: things, singular: thing, listKind: ThingList}}\n  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        url: https://{listener}/convert\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n  - name: v1alpha2\n    served: true\n    storage: false\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
    );
    let dir = package_dir("provider-convert", "", &[("things.yaml".to_owned(), crd)]);
    let reference = format!("{}/convert/provider-convert:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("convert");
    apply(&provider_yaml(&name, &reference, ""));
    let installed = wait_blocking(
        Duration::from_secs(90),
        "the CRD installed, converting at the Provider's own Service",
        || {
            let crd = get_json(&["crd", &format!("things.{g}")])?;
            (crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"]
                == name.as_str())
            .then_some(crd)
        },
        explain,
    );
    let client = &installed["spec"]["conversion"]["webhook"]["clientConfig"];
    assert!(
        client.get("url").is_none(),
        "the package's URL stayed: {client}"
    );
    assert_eq!(client["service"]["namespace"], RUNTIMES);
    assert_eq!(client["service"]["port"], 9443);
    let secret = get_json(&["secret", &format!("{name}-tls-server"), "-n", RUNTIMES]).unwrap();
    assert_eq!(client["caBundle"], secret["data"]["ca.crt"]);
    // A conversion is asked for: it goes to the Provider's Service (which
    // has no runtime here, so it fails), never to the package's URL.
    apply(&format!(
        "apiVersion: {g}/v1alpha1\nkind: Thing\nmetadata:\n  name: one\n"
    ));
    let (ok, out) = kubectl_try(&["get", &format!("things.v1alpha2.{g}"), "one"]);
    eprintln!("conversion without a runtime: {ok} {}", out.trim());
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the API server connected to the package's webhook URL"
    );
    kubectl(&[
        "delete",
        &format!("things.v1alpha1.{g}"),
        "one",
        "--wait=false",
    ]);
    delete_provider(&name);
}

/// A gzip tar layer of `files` entries of `each` zero bytes.
fn zeros_layer(files: usize, each: usize) -> oci::Layer {
    let zeros = vec![0u8; each];
    let mut b = oci::LayerBuilder::new().compression(1);
    for i in 0..files {
        b = b.file(format!("zeros/{i}"), 0o644, zeros.clone());
    }
    b.build().unwrap()
}

/// How many times a Warning was reported about the cluster-scoped object
/// `name`: an event repeated as a series counts each time.
fn warnings_about(name: &str) -> u64 {
    let selector = format!("involvedObject.name={name},type=Warning");
    let events = get_json(&["events", "-A", "--field-selector", &selector]).unwrap_or_default();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let count = e["count"].as_u64().unwrap_or(0);
            let series = e
                .pointer("/series/count")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            count.max(series).max(1)
        })
        .sum()
}

#[test]
fn bombs_are_refused_within_seconds_and_the_package_manager_keeps_working() {
    shipped();
    let (pod, restarts) = pod_of("package-manager");
    let (holder, transitions) = package_manager_lease();
    let registry = &shipped().registry.address;
    // Two layers of 1 GiB of zeros (about 1 MB each, gzip), and a
    // package.yaml of 150 MiB (under 1 MB compressed).
    let bomb = zeros_layer(16, 64 * 1024 * 1024);
    eprintln!(
        "bomb: {} bytes compressed, {} inflated",
        bomb.size(),
        bomb.uncompressed_size()
    );
    let mut references = Vec::new();
    for i in 0..2 {
        let reference = format!("{registry}/bombs/zeros-{i}:v1");
        push_layer(&reference, bomb.clone());
        references.push(reference);
    }
    let mut big = b"apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: big\n  annotations:\n    filler: \"".to_vec();
    big.resize(big.len() + 150 * 1024 * 1024, b'a');
    big.extend_from_slice(b"\"\n");
    let yaml_bomb = oci::LayerBuilder::new()
        .compression(1)
        .file("package.yaml", 0o644, big)
        .build()
        .unwrap();
    let reference = format!("{registry}/bombs/big-yaml:v1");
    push_layer(&reference, yaml_bomb);
    references.push(reference);
    // A plain package, installed meanwhile.
    let g = format!("{}.example.org", testenv::unique_name("meanwhile"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-meanwhile", "", &[(file, crd)]);
    let plain = format!("{registry}/bombs/provider-meanwhile:v1");
    xpkg_push(&dir, &plain, None);

    let names: Vec<String> = (0..references.len())
        .map(|i| testenv::unique_name(&format!("bomb{i}")))
        .collect();
    let started = Instant::now();
    for (name, reference) in names.iter().zip(&references) {
        apply(&provider_yaml(name, reference, ""));
    }
    let meanwhile = testenv::unique_name("meanwhile");
    apply(&provider_yaml(&meanwhile, &plain, ""));
    for name in &names {
        let message = wait_blocking(
            Duration::from_secs(60),
            &format!("Provider {name} refused naming the bound"),
            || {
                let p = provider(name)?;
                let (status, message) = condition(&p, "Healthy")?;
                (status == "False" && message.contains("bound")).then_some(message)
            },
            explain,
        );
        eprintln!("{name} refused after {:?}: {message}", started.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refusals took {:?}",
            started.elapsed()
        );
    }
    wait_blocking(
        Duration::from_secs(30),
        "the plain Provider to become Healthy beside the bombs",
        || {
            let p = provider(&meanwhile)?;
            (condition(&p, "Healthy")?.0 == "True").then_some(())
        },
        explain,
    );
    eprintln!("meanwhile: Healthy {:?} after apply", started.elapsed());
    // Each bomb is refused again (a Warning event more, as the API server
    // counts them): still no restart, same leader.
    for name in &names {
        let before = warnings_about(name);
        wait_blocking(
            Duration::from_secs(120),
            &format!("Provider {name} refused again (Warning events beyond {before})"),
            || {
                let now = warnings_about(name);
                if now > before {
                    Ok(now)
                } else {
                    Err(format!("{now} Warning events"))
                }
            },
            String::new,
        );
    }
    let (pod_after, restarts_after) = pod_of("package-manager");
    assert_eq!(
        (pod_after, restarts_after),
        (pod, restarts),
        "the package-manager restarted"
    );
    assert_eq!(
        package_manager_lease(),
        (holder, transitions),
        "the package-manager lost its lease"
    );
    for n in names.iter().chain(std::iter::once(&meanwhile)) {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

#[test]
fn tenant_deployments_with_the_extension_label_do_not_grow_the_package_manager() {
    let ns = namespace("tenant");
    let (pod, restarts) = pod_of("package-manager");
    let before = resident_bytes("package-manager");
    let filler = "x".repeat(1_000_000);
    let count = 150;
    for i in 0..count {
        let d = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": format!("big-{i}"),
                "namespace": ns,
                "labels": {"extensions.crossplane.io/extension": "mine"},
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "big"}},
                "template": {
                    "metadata": {"labels": {"app": "big"}},
                    "spec": {"containers": [{
                        "name": "c",
                        "image": shipped().pause_image,
                        "env": [{"name": "FILLER", "value": filler}],
                    }]},
                },
            },
        });
        let out = testenv::control_plane_with_node()
            .control
            .kubectl_stdin(&["create", "-f", "-"], Some(&d.to_string()));
        assert!(out.status.success(), "create big-{i}: {out:?}");
    }
    // A last Deployment, controlled by an Extension of the namespace: once
    // the package-manager reconciles that Extension for it, its watch has
    // delivered every Deployment created before (a watch is ordered).
    apply(&format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: Extension\nmetadata:\n  name: marker\n  namespace: {ns}\nspec:\n  title: marker\n"
    ));
    let uid = wait_blocking(
        Duration::from_secs(30),
        "the marker Extension to be reconciled",
        || {
            let e = extension(&ns, "marker")?;
            condition(&e, "Ready")?;
            e["metadata"]["uid"].as_str().map(str::to_owned)
        },
        || explain_ns(&ns),
    );
    let seen = reconciles("package-manager", "extension");
    let marker = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "marker",
            "namespace": ns,
            "labels": {"extensions.crossplane.io/extension": "marker"},
            "ownerReferences": [{
                "apiVersion": "extensions.crossplane.io/v1alpha1", "kind": "Extension",
                "name": "marker", "uid": uid, "controller": true,
            }],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "marker"}},
            "template": {
                "metadata": {"labels": {"app": "marker"}},
                "spec": {"containers": [{"name": "c", "image": shipped().pause_image}]},
            },
        },
    });
    let out = testenv::control_plane_with_node()
        .control
        .kubectl_stdin(&["create", "-f", "-"], Some(&marker.to_string()));
    assert!(out.status.success(), "create the marker: {out:?}");
    wait_blocking(
        Duration::from_secs(30),
        "the package-manager to see the marker Deployment",
        || (reconciles("package-manager", "extension") > seen).then_some(()),
        || explain_ns(&ns),
    );
    let after = resident_bytes("package-manager");
    eprintln!(
        "package-manager RSS: {} MiB before, {} MiB after {count} tenant Deployments of 1 MB",
        before / (1 << 20),
        after / (1 << 20)
    );
    assert!(
        after < before + 24 * (1 << 20),
        "RSS grew from {before} to {after} bytes"
    );
    assert_eq!(pod_of("package-manager"), (pod, restarts));
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn a_stack_package_whose_install_yaml_asks_for_the_host_runs_nothing() {
    let ns = namespace("hostile-stack");
    let dir = shipped().work.join(testenv::unique_name("hostile-stack"));
    let reg = dir.join(".registry");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::write(
        reg.join("app.yaml"),
        "title: Hostile\ndescription: |\n  Asks for the host.\nversion: 0.1.0\nmaintainers:\n- name: Test\n  email: test@example.org\ncompany: crossplane-rs\nkeywords: [test]\nlinks:\n- description: Source\n  url: https://example.org/stack\nlicense: Apache-2.0\n",
    )
    .unwrap();
    std::fs::write(
        reg.join("install.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: hostile-controller\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: hostile}}\n  template:\n    metadata:\n      labels: {{app: hostile}}\n    spec:\n      serviceAccountName: default\n      hostNetwork: true\n      hostPID: true\n      volumes: [{{name: root, hostPath: {{path: /}}}}]\n      containers:\n      - name: controller\n        image: {}\n        securityContext: {{privileged: true}}\n        volumeMounts: [{{name: root, mountPath: /host}}]\n",
            shipped().pause_image
        ),
    )
    .unwrap();
    let registry = &shipped().registry.address;
    xpkg_push(&dir, &format!("{registry}/hostile-stack:v1"), None);
    apply(&format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata:\n  name: hostile\n  namespace: {ns}\nspec:\n  source: {registry}\n  package: hostile-stack:v1\n"
    ));
    let text = wait_refused_fields(&ns, "hostile-stack", Duration::from_secs(90));
    eprintln!("hostile stack: {text}");
    let deployments = get_json(&["deployments", "-n", &ns]).unwrap();
    assert_eq!(
        deployments["items"].as_array().map(Vec::len),
        Some(0),
        "something runs: {deployments}"
    );
    let binding = get_json(&[
        "rolebinding",
        &format!("crossplane:extension:{ns}:hostile-stack:system"),
        "-n",
        &ns,
    ]);
    assert!(
        binding
            .as_ref()
            .is_none_or(|b| !b["subjects"].to_string().contains("\"default\"")),
        "the stack's role is bound to the namespace's default ServiceAccount: {binding:?}"
    );
}

/// The node's host address, where the pods reach this machine.
fn host_ip() -> std::net::IpAddr {
    shipped();
    testenv::control_plane_with_node()
        .node
        .as_ref()
        .unwrap()
        .host_ip
        .into()
}

/// A hostile HTTPS registry of testenv's CA (which the package-manager
/// trusts) on the node's host address.
fn hostile_registry() -> Hostile {
    let tls = testenv::control_plane_with_node().serving_tls().unwrap();
    Hostile::https_testenv(host_ip(), &tls).unwrap()
}

/// A pull Secret in the runtimes' namespace with `user`/`password`
/// for `registry`.
fn pull_secret(name: &str, registry: &str, user: &str, password: &str) {
    let auth = serde_json::json!({"auths": {registry: {"username": user, "password": password}}});
    let (_, _) = kubectl_try(&["delete", "secret", name, "-n", RUNTIMES]);
    kubectl(&[
        "create",
        "secret",
        "generic",
        name,
        "-n",
        RUNTIMES,
        "--type=kubernetes.io/dockerconfigjson",
        &format!("--from-literal=.dockerconfigjson={auth}"),
    ]);
}

/// Waits until the Provider has a condition that is False and whose
/// message contains every one of `says`; returns every condition's text.
fn wait_provider_says(name: &str, says: &[&str]) -> String {
    wait_blocking(
        Duration::from_secs(90),
        &format!("Provider {name} to say {says:?}"),
        || {
            let p = provider(name)?;
            let text = conditions_text(&p);
            (text.contains("=False") && says.iter().all(|s| text.contains(s))).then_some(text)
        },
        explain,
    )
}

/// Applies a Provider of package `<registry>/evil/<repository>:v1` (with
/// `extra` spec lines) and waits until a condition of it is False naming
/// the registry and every one of `says`; returns its name and the
/// conditions' text.
fn install_from(
    registry: &Hostile,
    repository: &str,
    extra: &str,
    says: &[&str],
) -> (String, String) {
    let name = testenv::unique_name(repository);
    let host = registry.host();
    apply(&provider_yaml(
        &name,
        &format!("{host}/evil/{repository}:v1"),
        extra,
    ));
    let mut all = vec![host.as_str()];
    all.extend_from_slice(says);
    let text = wait_provider_says(&name, &all);
    (name, text)
}

#[test]
fn registry_credentials_never_follow_a_redirect_or_a_foreign_token_realm() {
    let (pod, restarts) = pod_of("package-manager");
    let registry = hostile_registry();
    let other = Hostile::http(host_ip()).unwrap();
    other.script(
        "/stolen",
        Reply::json(
            200,
            &serde_json::json!({"leak": "ANSWER-OF-THE-OTHER-HOST"}),
        ),
    );
    other.script(
        "/token",
        Reply::json(
            200,
            &serde_json::json!({"token": "t0ken-of-the-other-host"}),
        ),
    );
    // The registry asks for Basic credentials, then sends the manifest
    // request to another host (https → http, another port).
    registry.route("/v2/", |s| {
        if s.header("authorization").is_some() {
            Reply::new(200)
        } else {
            Reply::basic_challenge()
        }
    });
    let stolen = other.url("/stolen");
    registry.route("/v2/evil/redirect/manifests/v1", move |_| {
        Reply::redirect(&stolen)
    });
    pull_secret("hostile-pull", &registry.host(), "robot", "s3cret-pull");
    let (redirected, text) = install_from(
        &registry,
        "redirect",
        "  packagePullSecrets:\n  - name: hostile-pull\n",
        &[],
    );
    eprintln!("redirect: {text}");
    assert!(
        !text.contains("ANSWER-OF-THE-OTHER-HOST"),
        "the other host's answer reached status: {text}"
    );
    // A second registry whose token realm is the other host, over http.
    let realm_registry = hostile_registry();
    let realm = other.url("/token");
    let service = realm_registry.host();
    realm_registry.route("/v2/", move |s| {
        if s.header("authorization")
            .is_some_and(|a| a.starts_with("Bearer "))
        {
            Reply::new(200)
        } else {
            Reply::bearer_challenge(&realm, &service)
        }
    });
    pull_secret(
        "hostile-realm-pull",
        &realm_registry.host(),
        "robot",
        "s3cret-realm",
    );
    let (foreign, text) = install_from(
        &realm_registry,
        "realm",
        "  packagePullSecrets:\n  - name: hostile-realm-pull\n",
        &[],
    );
    eprintln!("foreign realm: {text}");
    let seen: Vec<String> = other
        .requests()
        .iter()
        .filter(|s| s.header("authorization").is_some())
        .map(|s| format!("{} {} {:?}", s.method, s.path, s.header("authorization")))
        .collect();
    assert!(
        seen.is_empty(),
        "the other host received credentials: {seen:?}"
    );
    assert!(
        registry
            .requests()
            .iter()
            .any(|s| s.header("authorization").is_some()),
        "the registry itself never got its credentials (the test proves nothing)"
    );
    assert_eq!(pod_of("package-manager"), (pod, restarts));
    for n in [&redirected, &foreign] {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

#[test]
fn a_mebibyte_error_body_leaves_a_short_written_condition() {
    let registry = hostile_registry();
    registry.script("/v2/", Reply::new(200));
    // A registry that fails with a mebibyte of text, as JSON errors and as
    // a plain body.
    let body =
        serde_json::json!({"errors": [{"code": "UNKNOWN", "message": "M".repeat(1024 * 1024)}]});
    registry.script("/v2/evil/huge/manifests/v1", Reply::json(500, &body));
    let (name, text) = install_from(&registry, "huge", "", &["MMMM"]);
    let p = provider(&name).unwrap();
    for c in p["status"]["conditions"].as_array().unwrap() {
        let m = c["message"].as_str().unwrap_or_default();
        assert!(
            m.len() <= 1024,
            "a condition of {} bytes: {}",
            m.len(),
            &m[..200]
        );
    }
    eprintln!("huge error body: {text}");
    delete_provider(&name);
}

#[test]
fn a_hostile_token_cannot_crash_the_package_manager() {
    let (pod, restarts) = pod_of("package-manager");
    let registry = hostile_registry();
    let realm = registry.url("/token");
    let service = registry.host();
    registry.route("/v2/", move |_| Reply::bearer_challenge(&realm, &service));
    // The token is JSON-valid and a control character inside: no header
    // can carry it.
    registry.script(
        "/token",
        Reply::new(200)
            .header("Content-Type", "application/json")
            .body(r#"{"token":"a\u0001b","access_token":"a\u0001b"}"#),
    );
    let (name, text) = install_from(&registry, "token", "", &[]);
    eprintln!("hostile token: {text}");
    assert!(
        !registry.requests_to("/token").is_empty(),
        "the token endpoint was never asked (the test proves nothing)"
    );
    assert_eq!(
        pod_of("package-manager"),
        (pod, restarts),
        "the package-manager restarted"
    );
    delete_provider(&name);
}

#[test]
fn a_runtime_config_cannot_make_a_runtime_privileged_or_borrow_a_controller() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("drc"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-drc", "", &[(file, crd)]);
    let reference = format!("{}/drc/provider-drc:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    let config = testenv::unique_name("privileged");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: DeploymentRuntimeConfig\nmetadata: {{name: {config}}}\nspec:\n  deploymentTemplate:\n    spec:\n      selector: {{}}\n      template:\n        spec:\n          hostNetwork: true\n          containers:\n          - name: package-runtime\n            securityContext: {{privileged: true}}\n  serviceAccountTemplate:\n    metadata: {{name: rbac-manager}}\n"
    ));
    let name = testenv::unique_name("drc");
    apply(&provider_yaml(
        &name,
        &reference,
        &format!(
            "  runtimeConfigRef: {{apiVersion: pkg.crossplane.io/v1beta1, kind: DeploymentRuntimeConfig, name: {config}}}\n"
        ),
    ));
    let text = wait_provider_says(
        &name,
        &[
            "template.spec.hostNetwork",
            "containers[0].securityContext.privileged",
            "ServiceAccount crossplane-rs-runtimes/rbac-manager",
        ],
    );
    eprintln!("runtime config: {text}");
    let revisions = get_json(&[
        "providerrevisions.pkg.crossplane.io",
        "-l",
        &format!("pkg.crossplane.io/package={name}"),
    ])
    .unwrap();
    for r in revisions["items"].as_array().unwrap() {
        let rev = r["metadata"]["name"].as_str().unwrap();
        assert!(
            get_json(&["deployment", rev, "-n", RUNTIMES]).is_none(),
            "the refused runtime {rev} runs"
        );
    }
    delete_provider(&name);
}

/// The admission policy `deploy/` ships for package identities, as its
/// refusals name it.
const POLICY: &str = "crossplane-rs-package-identities";
/// The policy that keeps package identities' writes out of the runtimes'
/// namespace.
const RUNTIMES_POLICY: &str = "crossplane-rs-package-runtimes";

/// A Secret of type `kubernetes.io/service-account-token` for
/// ServiceAccount `ns/for`: kube-controller-manager fills it with a token of
/// that ServiceAccount.
fn token_secret(ns: &str, name: &str, for_sa: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{kubernetes.io/service-account.name: {for_sa}}}\ntype: kubernetes.io/service-account-token\n"
    )
}

fn opaque_secret(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\nstringData: {{password: connection-detail}}\n"
    )
}

/// Asserts that `subject` cannot mint a token of `ns/for_sa`: the create is
/// refused by the package-identity policy, and no such Secret exists.
fn assert_cannot_mint(subject: &str, ns: &str, for_sa: &str) {
    let name = testenv::unique_name("minted");
    let (ok, out) = create_as(subject, &token_secret(ns, &name, for_sa));
    assert!(
        !ok && out.contains(POLICY) && out.contains("service-account-token"),
        "{subject} created a token Secret for {ns}/{for_sa}: {out}"
    );
    assert!(get_json(&["secret", &name, "-n", ns]).is_none());
}

#[test]
fn a_provider_runtime_cannot_mint_a_token_or_take_a_controllers_lease() {
    shipped();
    // A package that asks for nothing: only its own kinds and the runtime's
    // defaults.
    let (name, g) = install_provider("plain", "");
    wait_provider_healthy(&name, Duration::from_secs(150));
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    wait_blocking(
        Duration::from_secs(60),
        "the runtime's system role to be bound",
        || {
            (may(&sa, "list", "things", &g) && can_i(&sa, &["create", "secrets", "-n", NS]))
                .then_some(())
        },
        explain,
    );
    // What a provider needs still works: a Secret for connection details
    // in the controllers' namespace (where credentials live too), and its
    // own leader-election Lease in its own namespace.
    let detail = testenv::unique_name("detail");
    let (ok, out) = create_as(&sa, &opaque_secret(NS, &detail));
    assert!(ok, "the runtime cannot write a connection Secret: {out}");
    assert!(can_i(&sa, &["create", "leases", "-n", RUNTIMES]));
    // No token for the rbac-manager (escalate and bind), nor for
    // kube-system's default: RBAC lets it write Secrets there, the policy
    // refuses the token.
    assert_cannot_mint(&sa, NS, "rbac-manager");
    assert_cannot_mint(&sa, "kube-system", "default");
    // No Lease outside its namespace: not the controllers' and not
    // kube-system's (the scheduler's and kube-controller-manager's leader
    // election).
    for args in [
        ["update", "leases/crossplane-rs-object-provider", "-n", NS],
        ["create", "leases", "-n", NS],
        ["create", "leases", "-n", "kube-system"],
        ["update", "leases", "-n", "kube-system"],
        ["get", "leases", "-n", "default"],
    ] {
        assert!(!can_i(&sa, &args), "{sa} may {args:?}");
    }
    // A real write to a controller's Lease is refused, and the
    // object-provider goes on leading without a restart.
    let (pod, restarts) = pod_of("object-provider");
    let (holder, transitions) = lease_of("object-provider");
    assert_eq!(holder, pod, "the object-provider leads before the attempt");
    let lease = "crossplane-rs-object-provider";
    let take =
        format!("{{\"spec\":{{\"holderIdentity\":\"{name}\",\"leaseDurationSeconds\":3600}}}}");
    let attempts: [&[&str]; 2] = [
        &[
            "patch",
            "lease",
            lease,
            "-n",
            NS,
            "--type=merge",
            "-p",
            &take,
        ],
        &["delete", "lease", lease, "-n", NS],
    ];
    for attempt in attempts {
        let mut args = attempt.to_vec();
        args.extend(["--as", &sa]);
        let (ok, out) = kubectl_try(&args);
        assert!(
            !ok && out.contains("forbidden"),
            "{sa} may {attempt:?}: {out}"
        );
    }
    // Nor a controller's Lease in its own namespace, where it may write
    // Leases: the policy refuses the name.
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: crossplane-rs-scheduler-next, namespace: {RUNTIMES}}}\nspec: {{holderIdentity: {name}}}\n"
        ),
    );
    assert!(!ok && out.contains(POLICY), "{out}");
    assert_eq!(lease_of("object-provider"), (holder, transitions));
    assert_eq!(pod_of("object-provider"), (pod, restarts));
    // A runtime reads Secrets in every namespace by default (upstream's
    // providers need that for credentials), so no CA key is kept in one:
    // what it reads of a provider's CA, its own or another's, is
    // certificates only.
    let (ok, ca) = kubectl_try(&[
        "get",
        "secret",
        &format!("{name}-tls-ca"),
        "-n",
        RUNTIMES,
        "-o",
        "json",
        "--as",
        &sa,
    ]);
    assert!(ok, "{ca}");
    let ca: serde_json::Value = serde_json::from_str(&ca).unwrap();
    let keys: Vec<&String> = ca["data"].as_object().unwrap().keys().collect();
    assert!(
        keys.iter().all(|k| *k == "tls.crt" || *k == "previous.crt") && !keys.is_empty(),
        "the CA Secret holds {keys:?}"
    );
    assert!(!ca.to_string().contains("PRIVATE KEY"), "{ca}");
    // Whatever RBAC a runtime is given in the runtimes' namespace (here
    // the administrator binds it `edit` there, as a wide permission
    // request would), it writes nothing there but Leases and Events: no pod
    // that would mount another runtime's keys, no exec into one.
    let edit = testenv::unique_name("edit");
    kubectl(&[
        "create",
        "rolebinding",
        &edit,
        "-n",
        RUNTIMES,
        "--clusterrole=edit",
        &format!("--serviceaccount={RUNTIMES}:{name}"),
    ]);
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {edit}, namespace: {RUNTIMES}}}\nspec:\n  containers: [{{name: c, image: {}}}]\n  volumes: [{{name: k, secret: {{secretName: {name}-tls-ca}}}}]\n",
            shipped().pause_image
        ),
    );
    assert!(
        !ok && out.contains(RUNTIMES_POLICY) && out.contains("may write only Leases and Events"),
        "{out}"
    );
    let runtime_pod = get_json(&[
        "pods",
        "-n",
        RUNTIMES,
        "-l",
        &format!("pkg.crossplane.io/provider={name}"),
    ])
    .and_then(|l| {
        l.pointer("/items/0/metadata/name")?
            .as_str()
            .map(str::to_owned)
    })
    .unwrap_or_else(|| panic!("no runtime pod of {name}: {}", explain()));
    let (ok, out) = kubectl_try(&[
        "exec",
        &runtime_pod,
        "-n",
        RUNTIMES,
        "--as",
        &sa,
        "--",
        "true",
    ]);
    assert!(
        !ok && out.contains(RUNTIMES_POLICY) && out.contains("pods/exec"),
        "{out}"
    );
    let (ok, out) = create_as(
        &sa,
        &format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {edit}, namespace: {RUNTIMES}}}\nspec: {{holderIdentity: {name}}}\n"
        ),
    );
    assert!(ok, "the runtime cannot write its own Lease: {out}");
    kubectl(&["delete", "rolebinding", &edit, "-n", RUNTIMES]);
    kubectl(&["delete", "lease", &edit, "-n", RUNTIMES]);
    // The policy leaves every other identity as the cluster has it: the
    // administrator still may.
    let admin_ns = namespace("admin-token");
    apply(&token_secret(&admin_ns, "admin-made", "default"));
    kubectl(&["delete", "secret", &detail, "-n", NS]);
    delete_provider(&name);
}

#[test]
fn seed_001s_extension_has_its_rights_in_its_namespace_only_and_mints_no_token() {
    let ns = namespace("seed001");
    let seed = testenv::repo_root().join("examples/seeds/001-extension-redis.yaml");
    kubectl(&[
        "apply",
        "--server-side",
        "-n",
        &ns,
        "-f",
        &seed.to_string_lossy(),
    ]);
    wait_blocking(
        Duration::from_secs(90),
        &format!("Extension {ns}/redis RBACReady=True, bound"),
        || {
            let (status, message) = condition(&extension(&ns, "redis")?, "RBACReady")?;
            (status == "True" && message.contains("bound to ServiceAccount")).then_some(())
        },
        || explain_ns(&ns),
    );
    let sa = format!("system:serviceaccount:{ns}:redis-controller");
    // What the seed asks for, in its own namespace.
    for args in [
        ["create", "secrets", "-n", ns.as_str()],
        ["delete", "serviceaccounts", "-n", ns.as_str()],
    ] {
        assert!(
            can_i(&sa, &args),
            "{sa} may not {args:?} (the seed asks for it)"
        );
    }
    // Nothing of it anywhere else.
    let controllers_ns = format!("namespace/{NS}");
    for args in [
        ["create", "secrets", "-n", NS],
        ["get", "secrets", "-n", "kube-system"],
        ["delete", "namespace/kube-system", "-n", "kube-system"],
        ["delete", controllers_ns.as_str(), "-n", NS],
    ] {
        assert!(!can_i(&sa, &args), "{sa} may {args:?}");
    }
    assert!(!can_i(&sa, &["delete", "namespaces", "-A"]));
    // Real attempts: a Secret in crossplane-system is forbidden, deleting
    // kube-system is forbidden (a server-side dry run: authorization and
    // admission, nothing deleted), and no token can be minted, not even in
    // its own namespace.
    let (ok, out) = create_as(&sa, &opaque_secret(NS, &testenv::unique_name("x")));
    assert!(!ok && out.contains("forbidden"), "{out}");
    let (ok, out) = kubectl_try(&[
        "delete",
        "namespace",
        "kube-system",
        "--dry-run=server",
        "--as",
        &sa,
    ]);
    assert!(!ok && out.contains("forbidden"), "{out}");
    assert_cannot_mint(&sa, &ns, "default");
    assert_cannot_mint(&sa, &ns, "redis-controller");
    // Its rights are a Role and RoleBinding it controls; the only
    // cluster-wide object is the identity mark, which grants nothing.
    let role = format!("crossplane:extension:{ns}:redis:system");
    for kind in ["role", "rolebinding"] {
        let o = get_json(&[kind, &role, "-n", &ns]).unwrap_or_else(|| panic!("no {kind} {role}"));
        assert_eq!(o["metadata"]["ownerReferences"][0]["kind"], "Extension");
    }
    let rules = get_json(&["role", &role, "-n", &ns]).unwrap()["rules"].to_string();
    assert!(
        rules.contains("secrets") && rules.contains("namespaces"),
        "{rules}"
    );
    // No stack installed its RedisCluster CRD: nothing is granted on it
    // (an Extension owns only what its stack installed), and RBACReady
    // says it waits for it.
    assert!(
        !rules.contains("crossplane.redislabs.com") && !rules.contains("redisclusters"),
        "{rules}"
    );
    let (_, message) = condition(&extension(&ns, "redis").unwrap(), "RBACReady").unwrap();
    assert!(message.contains("RedisCluster"), "{message}");
    let b = get_json(&["rolebinding", &role, "-n", &ns]).unwrap();
    assert_eq!(
        b["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "redis-controller", "namespace": ns}])
    );
    assert!(get_json(&["clusterrole", &role]).is_none());
    assert!(get_json(&["clusterrolebinding", &role]).is_none());
    let mark = get_json(&[
        "clusterrolebinding",
        &format!("crossplane:extension:{ns}:redis:identity"),
    ])
    .unwrap();
    assert_eq!(mark["roleRef"]["name"], "crossplane-rs:package-identity");
    // Deleting the Extension takes all of it.
    kubectl(&[
        "delete",
        "extensions.extensions.crossplane.io",
        "redis",
        "-n",
        &ns,
    ]);
    wait_blocking(
        Duration::from_secs(60),
        "the Extension's role, binding and mark to go",
        || {
            (get_json(&["role", &role, "-n", &ns]).is_none()
                && get_json(&["rolebinding", &role, "-n", &ns]).is_none()
                && get_json(&[
                    "clusterrolebinding",
                    &format!("crossplane:extension:{ns}:redis:identity"),
                ])
                .is_none())
            .then_some(())
        },
        || explain_ns(&ns),
    );
}

#[test]
fn a_refused_permission_request_is_shown_escaped_and_the_provider_is_not_healthy() {
    shipped();
    // A verb that would retitle the terminal of whoever reads it raw.
    let (name, _) = install_provider(
        "esc",
        "  controller:\n    permissionRequests:\n    - {apiGroups: [\"\"], resources: [configmaps], verbs: [\"\\e]0;pwned\\a\"]}\n",
    );
    let healthy = wait_provider_says(&name, &["no roles", "]0;pwned"]);
    let provider = e2e::packages::provider(&name).unwrap();
    let (status, message) = condition(&provider, "Healthy").unwrap();
    assert_eq!(status, "False", "{healthy}");
    assert!(
        message.contains("\\u{1b}]0;pwned\\u{7}") && !message.contains('\u{1b}'),
        "{message:?}"
    );
    for r in e2e::packages::revisions_of(&name) {
        let (_, rbac) = condition(&r, "RBACReady").unwrap();
        assert!(
            !rbac.contains('\u{1b}') && !rbac.contains('\u{7}'),
            "{rbac:?}"
        );
    }
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[]);
    let wide = e2e::trace::text(&viewer, &[&format!("provider/{name}"), "-o", "wide"]);
    assert!(
        wide.contains("]0;pwned") && !wide.contains('\u{1b}') && !wide.contains('\u{7}'),
        "{wide:?}"
    );
    delete_provider(&name);
}

#[test]
fn with_runtime_secret_namespaces_set_a_runtime_reads_secrets_only_there() {
    let creds = namespace("creds");
    // Operator configuration: runtimes keep Secrets in the controllers'
    // namespace (credentials there) and in `creds`, nowhere else.
    e2e::pods::controller_flags(
        "rbac-manager",
        &[&format!("--runtime-secret-namespaces={NS},{creds}")],
    );
    let (name, g) = install_provider("narrow", "");
    wait_provider_healthy(&name, Duration::from_secs(150));
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    wait_blocking(
        Duration::from_secs(90),
        &format!("{sa} to read Secrets in {creds}"),
        || can_i(&sa, &["get", "secrets", "-n", &creds]).then_some(()),
        explain,
    );
    assert!(can_i(&sa, &["create", "secrets", "-n", NS]));
    assert!(may(&sa, "list", "things", &g));
    for ns in ["kube-system", "default", RUNTIMES] {
        assert!(
            !can_i(&sa, &["get", "secrets", "-n", ns]),
            "{sa} may get secrets in {ns}"
        );
        assert!(
            !can_i(&sa, &["create", "configmaps", "-n", ns]),
            "{sa} may create configmaps in {ns}"
        );
    }
    assert!(!can_i(&sa, &["list", "secrets", "-A"]));
    let (ok, out) = kubectl_try(&["get", "secrets", "-n", "kube-system", "--as", &sa]);
    assert!(!ok && out.contains("forbidden"), "{out}");
    // Nothing in the runtimes' namespace: not its own certificates (and so
    // not another provider's server key), nor an ImageConfig's pull Secret.
    let pull = testenv::unique_name("pull");
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {pull}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{{\"auths\": {{}}}}'\n"
    ));
    assert!(get_json(&["secret", &format!("{name}-tls-ca"), "-n", RUNTIMES]).is_some());
    for secret in [
        format!("{name}-tls-ca"),
        format!("{name}-tls-server"),
        pull.clone(),
    ] {
        let (ok, out) = kubectl_try(&["get", "secret", &secret, "-n", RUNTIMES, "--as", &sa]);
        assert!(
            !ok && out.contains("forbidden"),
            "{sa} read {secret}: {out}"
        );
    }
    kubectl(&["delete", "secret", &pull, "-n", RUNTIMES]);
    delete_provider(&name);
}

/// `dependsOn` lines of a package's meta for `repositories`.
fn depends_on(repositories: &[String]) -> String {
    let mut out = "  dependsOn:\n".to_owned();
    for r in repositories {
        out.push_str(&format!("  - provider: {r}\n    version: \">=v1.0.0\"\n"));
    }
    out
}

/// The Providers whose package is in `repository_prefix`.
fn providers_from(repository_prefix: &str) -> Vec<Value> {
    get_json(&["providers.pkg.crossplane.io"])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.pointer("/spec/package")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(repository_prefix))
        })
        .collect()
}

#[test]
fn dependency_lists_and_chains_past_their_bounds_are_refused_naming_the_bound() {
    shipped();
    let registry = &shipped().registry.address;
    // 33 dependencies: refused before any is looked up or installed.
    let many = testenv::unique_name("many");
    let deps: Vec<String> = (0..33).map(|i| format!("{registry}/{many}/d{i}")).collect();
    let g = format!("{many}.example.org");
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-many", &depends_on(&deps), &[(file, crd)]);
    let reference = format!("{registry}/{many}/root:v1.0.0");
    xpkg_push(&dir, &reference, None);
    let root = testenv::unique_name("many");
    apply(&provider_yaml(&root, &reference, ""));
    let said = wait_provider_says(&root, &["33 dependencies", "32"]);
    eprintln!("33 dependencies: {said}");
    assert!(providers_from(&format!("{registry}/{many}/d")).is_empty());
    // A chain l0 → l1 → … → l8: l0 is installed by the user, l1…l7 as
    // dependencies; l7's own dependency would be level 9.
    let chain = testenv::unique_name("chain");
    let levels: Vec<String> = (0..9).map(|i| format!("{registry}/{chain}/l{i}")).collect();
    for (i, repository) in levels.iter().enumerate() {
        let g = format!("l{i}.{chain}.example.org");
        let (file, crd) = test_crd(&g, "Thing");
        let deps = levels
            .get(i + 1)
            .map(|next| depends_on(std::slice::from_ref(next)));
        let dir = package_dir(
            &format!("provider-l{i}"),
            &deps.unwrap_or_default(),
            &[(file, crd)],
        );
        xpkg_push(&dir, &format!("{repository}:v1.0.0"), None);
    }
    let first = testenv::unique_name("chain");
    apply(&provider_yaml(&first, &format!("{}:v1.0.0", levels[0]), ""));
    let deepest = wait_blocking(
        Duration::from_secs(240),
        "the Provider of level 8 to name the bound",
        || {
            let p = providers_from(&format!("{}:", levels[7])).pop()?;
            let text = conditions_text(&p);
            (text.contains("level 9") && text.contains("8 levels")).then_some(text)
        },
        explain,
    );
    eprintln!("chain: {deepest}");
    // The refusal climbs the chain: the Provider the user installed names it.
    let at_root = wait_blocking(
        Duration::from_secs(120),
        "the Provider the user installed to name the chain's bound",
        || {
            let text = conditions_text(&provider(&first)?);
            (text.contains("is 9 levels deep") && text.contains(&format!("{chain}/l8")))
                .then_some(text)
        },
        explain,
    );
    eprintln!("chain, at its root: {at_root}");
    assert!(
        providers_from(&levels[8]).is_empty(),
        "level 9 was installed"
    );
    assert_eq!(providers_from(&format!("{registry}/{chain}/")).len(), 8);
    for p in [root, first] {
        delete_provider(&p);
    }
}

/// An Extension whose controller runs the pause image with `pod` (YAML
/// lines under the pod spec, indented 12) and `deployment` (lines under the
/// Deployment spec, indented 8).
fn stack_extension(ns: &str, name: &str, deployment: &str, pod: &str, container: &str) -> String {
    format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: Extension\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  title: fields\n  version: 0.1.0\n  controller:\n    deployment:\n      name: {name}-controller\n      spec:\n{deployment}        selector: {{matchLabels: {{app: {name}}}}}\n        template:\n          metadata: {{labels: {{app: {name}}}}}\n          spec:\n{pod}            containers:\n            - name: c\n              image: {}\n{container}  permissions:\n    rules:\n    - {{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}}\n",
        shipped().pause_image
    )
}

#[test]
fn a_stack_pod_spec_may_set_only_what_a_controller_needs() {
    let ns = namespace("fields");
    kubectl(&[
        "create",
        "secret",
        "generic",
        "theirs",
        "-n",
        &ns,
        "--from-literal=password=x",
    ]);
    apply(&stack_extension(
        &ns,
        "grabby",
        "        replicas: 50\n",
        "            priorityClassName: system-node-critical\n            tolerations: [{operator: Exists}]\n            nodeName: somewhere\n            volumes: [{name: theirs, secret: {secretName: theirs}}]\n",
        "              env: [{name: P, valueFrom: {secretKeyRef: {name: theirs, key: password}}}]\n              envFrom: [{secretRef: {name: theirs}}]\n",
    ));
    let at = "spec.controller.deployment.spec";
    let fields = [
        format!("{at}.replicas"),
        format!("{at}.template.spec.priorityClassName"),
        format!("{at}.template.spec.tolerations"),
        format!("{at}.template.spec.nodeName"),
        format!("{at}.template.spec.volumes[0].secret"),
        format!("{at}.template.spec.containers[0].env[0].valueFrom.secretKeyRef"),
        format!("{at}.template.spec.containers[0].envFrom[0].secretRef"),
    ];
    let text = wait_blocking(
        Duration::from_secs(60),
        "the Extension to name every refused field",
        || {
            let text = conditions_text(&extension(&ns, "grabby")?);
            fields
                .iter()
                .all(|f| text.contains(f.as_str()))
                .then_some(text)
        },
        || explain_ns(&ns),
    );
    eprintln!("fields: {text}");
    assert!(get_json(&["deployment", "grabby-controller", "-n", &ns]).is_none());
    // Security fields set to null are unset, and hardened: the pod runs as
    // non-root without privilege escalation.
    apply(&stack_extension(
        &ns,
        "nulls",
        "        replicas: 1\n",
        "            securityContext: {runAsNonRoot: null, runAsUser: null}\n",
        "              securityContext: {allowPrivilegeEscalation: null}\n",
    ));
    let pod = wait_blocking(
        Duration::from_secs(120),
        "the nulls Extension's controller pod to run",
        || {
            let pods = get_json(&["pods", "-n", &ns, "-l", "app=nulls"])?;
            let pod = pods["items"].as_array()?.first()?.clone();
            (pod.pointer("/status/phase")? == "Running").then_some(pod)
        },
        || explain_ns(&ns),
    );
    let spec = &pod["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{spec:#}");
    assert_eq!(spec["securityContext"]["runAsUser"], 65532, "{spec:#}");
    assert_eq!(
        spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"], false,
        "{spec:#}"
    );
}

#[test]
fn a_provider_never_takes_over_a_service_account_it_did_not_make() {
    shipped();
    // Someone else's ServiceAccount in the runtimes' namespace, named as a
    // Provider's runtime would be.
    let name = testenv::unique_name("taken");
    kubectl(&["create", "serviceaccount", &name, "-n", RUNTIMES]);
    kubectl(&[
        "label",
        "serviceaccount",
        &name,
        "-n",
        RUNTIMES,
        "owner=someone-else",
    ]);
    install_provider_as(&name, "taken", "");
    let text = wait_provider_says(
        &name,
        &[
            &format!("ServiceAccount {RUNTIMES}/{name} exists"),
            "never takes over",
        ],
    );
    eprintln!("takeover: {text}");
    let sa = get_json(&["serviceaccount", &name, "-n", RUNTIMES]).unwrap();
    assert!(sa["metadata"].get("ownerReferences").is_none(), "{sa:#}");
    assert_eq!(
        sa["metadata"]["labels"],
        serde_json::json!({"owner": "someone-else"})
    );
    for r in e2e::packages::revisions_of(&name) {
        let rev = r["metadata"]["name"].as_str().unwrap();
        assert!(
            get_json(&["deployment", rev, "-n", RUNTIMES]).is_none(),
            "{rev} runs"
        );
    }
    delete_provider(&name);
    kubectl(&["delete", "serviceaccount", &name, "-n", RUNTIMES]);
}
