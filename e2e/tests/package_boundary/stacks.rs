//! A stack's package and controller stay inside what the operator allowed: no built-in kinds, no host access,
//! no other identity, a pod spec with only what a controller needs, rights in its own namespace.

use super::*;

use e2e::extensions::{explain_ns, extension};

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
    let _rbac = rbac_manager_as_installed();
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
    let _rbac = rbac_manager_as_installed();
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
fn tenant_deployments_with_the_extension_label_do_not_grow_the_package_manager() {
    let _rbac = rbac_manager_as_installed();
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
    let _rbac = rbac_manager_as_installed();
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

#[test]
fn seed_001s_extension_has_its_rights_in_its_namespace_only_and_mints_no_token() {
    let _rbac = rbac_manager_as_installed();
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
    let _rbac = rbac_manager_as_installed();
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
