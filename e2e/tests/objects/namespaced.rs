//! Crossplane v2's namespaced Objects (`kubernetes.m.crossplane.io`): they
//! use a ProviderConfig of their own namespace or a ClusterProviderConfig,
//! and a tenant who may create them in one namespace gains nothing outside
//! it.

use super::*;
use types::kubernetes_m::v1alpha1 as m;

/// The namespaced Objects of `ns`.
fn objects_in(client: &Client, ns: &str) -> Api<m::Object> {
    Api::namespaced(client.clone(), ns)
}

/// A namespaced Object `name` in `ns` managing `manifest` through the
/// config `config` (`kind`: ProviderConfig or ClusterProviderConfig), with
/// the fields of `extra` added to its spec.
fn namespaced_object(
    name: &str,
    ns: &str,
    (kind, config): (&str, &str),
    manifest: Value,
    extra: Value,
) -> Value {
    let mut spec = json!({"forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": kind, "name": config}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": m::API_VERSION, "kind": "Object",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// Applies `docs` (YAML or JSON documents) with kubectl, as `user` when
/// given (impersonated: that user's RBAC decides), failing with kubectl's
/// words.
fn kubectl_apply(user: Option<&str>, docs: &str) {
    let control = &testenv::control_plane().control;
    let mut args = vec!["apply", "-f", "-"];
    if let Some(u) = user {
        args.extend(["--as", u]);
    }
    let out = control.kubectl_stdin(&args, Some(docs));
    assert!(
        out.status.success(),
        "kubectl apply as {user:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl auth can-i` as `user`: whether the API server says yes.
fn can_i(user: &str, args: &[&str]) -> bool {
    let control = &testenv::control_plane().control;
    let mut all = vec!["auth", "can-i", "--as", user];
    all.extend(args);
    let out = control.kubectl(&all);
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// The condition `t` of a namespaced Object: (status, reason, message).
fn condition_of(o: &m::Object, t: &str) -> Option<(String, String, String)> {
    condition_in(&o.status.as_ref()?.conditions, t)
}

/// Waits until the namespaced Object `ns/name` is Synced and Ready.
async fn wait_namespaced_ready(client: &Client, ns: &str, name: &str) -> m::Object {
    let api = objects_in(client, ns);
    wait(
        WAIT,
        &format!("Object {ns}/{name} to be Synced and Ready"),
        || async {
            let o = api
                .get_opt(name)
                .await
                .unwrap()
                .ok_or_else(|| "no such Object".to_owned())?;
            let is_true = |t| condition_of(&o, t).is_some_and(|c| c.0 == "True");
            if is_true("Synced") && is_true("Ready") {
                Ok(o)
            } else {
                Err(format!("status {:?}", o.status))
            }
        },
    )
    .await
}

/// Waits until the namespaced Object `ns/name` is Synced=False saying
/// `needle`; answers its message.
async fn wait_refused(client: &Client, ns: &str, name: &str, needle: &str) -> String {
    let api = objects_in(client, ns);
    wait(
        WAIT,
        &format!("Object {ns}/{name} to be Synced=False saying {needle:?}"),
        || async {
            let o = api.get_opt(name).await.unwrap()?;
            let (status, _, message) = condition_of(&o, "Synced")?;
            (status == "False" && message.contains(needle)).then_some(message)
        },
    )
    .await
}

/// A Role in `ns` for `user`: Objects, ProviderConfigs, ConfigMaps and
/// Secrets there, and nothing anywhere else.
fn tenant_role(ns: &str, user: &str) -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: tenant, namespace: {ns}}}
rules:
- apiGroups: ["kubernetes.m.crossplane.io"]
  resources: [objects, providerconfigs]
  verbs: ["*"]
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: tenant, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}
"#
    )
}

#[tokio::test]
async fn a_tenant_with_rights_in_one_namespace_gains_nothing_outside_it() {
    let (client, _remote, _dump, _) = begin(&PROVIDER, "tenant").await;
    let control = &testenv::control_plane().control;
    let team_a = control.namespace(&client, "team-a").await;
    let team_b = control.namespace(&client, "team-b").await;
    let user = testenv::unique_name("tenant");
    kubectl_apply(None, &tenant_role(&team_a, &user));
    // Another team's secret, and what the tenant may not do itself.
    kubectl_apply(
        None,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: theirs, namespace: {team_b}}}\nstringData: {{password: s3cr3t-of-b}}\n"
        ),
    );
    assert!(!can_i(
        &user,
        &["create", "configmaps", "-n", "kube-system"]
    ));
    assert!(!can_i(&user, &["create", "clusterroles"]));
    assert!(!can_i(&user, &["get", "secrets", "-n", &team_b]));
    assert!(can_i(
        &user,
        &[
            "create",
            "objects.kubernetes.m.crossplane.io",
            "-n",
            &team_a
        ]
    ));

    // As the tenant: the provider's own identity, through a ProviderConfig
    // of the tenant's namespace.
    let config = ("ProviderConfig", "mine");
    kubectl_apply(
        Some(&user),
        &format!(
            "apiVersion: {}\nkind: ProviderConfig\nmetadata: {{name: mine, namespace: {team_a}}}\nspec: {{credentials: {{source: InjectedIdentity}}}}\n",
            m::API_VERSION
        ),
    );
    let cm = testenv::unique_name("cm");
    let refused = [
        (
            "to-kube-system",
            namespaced_object(
                "to-kube-system",
                &team_a,
                config,
                configmap(&cm, "kube-system", json!({"v": "1"})),
                json!({}),
            ),
            "spec.forProvider.manifest is outside namespace",
        ),
        (
            "to-a-clusterrole",
            namespaced_object(
                "to-a-clusterrole",
                &team_a,
                config,
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": cm}, "rules": []}),
                json!({}),
            ),
            "spec.forProvider.manifest is outside namespace",
        ),
        (
            "reads-team-b",
            namespaced_object(
                "reads-team-b",
                &team_a,
                config,
                configmap(&cm, &team_a, json!({})),
                json!({"references": [{"patchesFrom": {"apiVersion": "v1", "kind": "Secret",
                    "name": "theirs", "namespace": team_b, "fieldPath": "data.password"},
                    "toFieldPath": "data.stolen"}]}),
            ),
            "spec.references[0] is outside namespace",
        ),
    ];
    for (_, object, _) in &refused {
        kubectl_apply(Some(&user), &object.to_string());
    }
    for (name, _, needle) in &refused {
        let message = wait_refused(&client, &team_a, name, needle).await;
        assert!(!message.contains("s3cr3t"), "{message}");
    }
    // Nothing was made outside team-a.
    let in_kube_system = Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    assert!(in_kube_system.get_opt(&cm).await.unwrap().is_none());
    let clusterroles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone());
    assert!(clusterroles.get_opt(&cm).await.unwrap().is_none());

    // The same Object targeting team-a (its manifest naming no namespace:
    // the Object's own) works.
    let own = namespaced_object(
        "own",
        &team_a,
        config,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm}, "data": {"v": "1"}}),
        json!({}),
    );
    kubectl_apply(Some(&user), &own.to_string());
    wait_namespaced_ready(&client, &team_a, "own").await;
    let made = Api::<ConfigMap>::namespaced(client.clone(), &team_a)
        .get(&cm)
        .await
        .unwrap();
    assert_eq!(
        made.data.unwrap_or_default().get("v").map(String::as_str),
        Some("1")
    );

    // Deleting it deletes what it made.
    let control_out = control.kubectl(&[
        "delete",
        "--as",
        &user,
        "-n",
        &team_a,
        "objects.kubernetes.m.crossplane.io",
        "own",
        "--wait=true",
    ]);
    assert!(
        control_out.status.success(),
        "{}",
        String::from_utf8_lossy(&control_out.stderr)
    );
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &team_a)
            .get_opt(&cm)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_cluster_provider_config_decides_how_far_its_objects_reach() {
    let (client, remote, _dump, rns) = begin(&PROVIDER, "reach").await;
    let control = &testenv::control_plane().control;
    let ns = control.namespace(&client, "reach").await;
    let elsewhere = control.namespace(&client, "reach-elsewhere").await;
    let (confined, wide, far) = (
        testenv::unique_name("confined"),
        testenv::unique_name("wide"),
        testenv::unique_name("far"),
    );
    kubectl_apply(
        None,
        &format!(
            "apiVersion: {v}\nkind: ClusterProviderConfig\nmetadata: {{name: {confined}}}\nspec: {{credentials: {{source: InjectedIdentity}}}}\n---\napiVersion: {v}\nkind: ClusterProviderConfig\nmetadata: {{name: {wide}}}\nspec: {{credentials: {{source: InjectedIdentity}}, reach: Cluster}}\n---\napiVersion: {v}\nkind: ClusterProviderConfig\nmetadata: {{name: {far}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n",
            v = m::API_VERSION
        ),
    );
    let cpc = |name: &str| ("ClusterProviderConfig", name.to_owned());
    let to_elsewhere = |name: &str, config: &str| {
        let (kind, config) = cpc(config);
        namespaced_object(
            name,
            &ns,
            (kind, &config),
            configmap(name, &elsewhere, json!({})),
            json!({}),
        )
    };
    kubectl_apply(None, &to_elsewhere("confined", &confined).to_string());
    kubectl_apply(None, &to_elsewhere("wide", &wide).to_string());
    // Another cluster, through its own kubeconfig: its RBAC decides there.
    let (kind, far_name) = cpc(&far);
    kubectl_apply(
        None,
        &namespaced_object(
            "far",
            &ns,
            (kind, &far_name),
            configmap("far", &rns, json!({"v": "far"})),
            json!({"writeConnectionSecretToRef": {"name": "far-details"},
                "connectionDetails": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "far",
                    "namespace": rns, "fieldPath": "data.v", "toConnectionSecretKey": "v"}]}),
        )
        .to_string(),
    );
    wait_refused(
        &client,
        &ns,
        "confined",
        &format!("is outside namespace {ns:?}: ConfigMap {elsewhere}/confined"),
    )
    .await;
    wait_namespaced_ready(&client, &ns, "wide").await;
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &elsewhere)
            .get_opt("wide")
            .await
            .unwrap()
            .is_some()
    );
    wait_namespaced_ready(&client, &ns, "far").await;
    assert!(remote_cm(&remote, &rns, "far").await.is_some());
    // Its connection Secret is in its own namespace.
    let details = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("far-details")
        .await
        .unwrap();
    let v = details
        .data
        .unwrap_or_default()
        .get("v")
        .map(|b| b.0.clone());
    assert_eq!(v.as_deref(), Some(b"far".as_slice()));

    // A config in use counts its users and is not deleted until they go.
    let cpcs = Api::<m::ClusterProviderConfig>::all(client.clone());
    wait(
        WAIT,
        &format!("ClusterProviderConfig {wide} to count 1 user"),
        || async {
            let c = cpcs.get(&wide).await.unwrap();
            (c.status.and_then(|s| s.users) == Some(1)).then_some(())
        },
    )
    .await;
    cpcs.delete(&wide, &DeleteParams::default()).await.unwrap();
    wait(
        WAIT,
        &format!("ClusterProviderConfig {wide} to say it is in use"),
        || async {
            let c = cpcs.get(&wide).await.unwrap();
            let conds = c.status.map(|s| s.conditions).unwrap_or_default();
            conds
                .iter()
                .find(|c| c.type_ == "InUse" && c.status == "True")
                .and_then(|c| c.message.clone())
                .filter(|m| m.contains(&format!("Object {ns}/wide")))
        },
    )
    .await;
    objects_in(&client, &ns)
        .delete("wide", &DeleteParams::default())
        .await
        .unwrap();
    wait(
        WAIT,
        &format!("ClusterProviderConfig {wide} to be gone"),
        || async { cpcs.get_opt(&wide).await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &elsewhere)
            .get_opt("wide")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_namespaced_provider_config_reads_only_secrets_of_its_own_namespace() {
    let (client, _remote, _dump, rns) = begin(&PROVIDER, "pc-secret").await;
    let control = &testenv::control_plane().control;
    let ns = control.namespace(&client, "pc-secret").await;
    // The kubeconfig Secret is in `default`, not in the config's namespace.
    kubectl_apply(
        None,
        &format!(
            "apiVersion: {}\nkind: ProviderConfig\nmetadata: {{name: borrowed, namespace: {ns}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n",
            m::API_VERSION
        ),
    );
    kubectl_apply(
        None,
        &namespaced_object(
            "borrows",
            &ns,
            ("ProviderConfig", "borrowed"),
            configmap("borrows", &rns, json!({})),
            json!({}),
        )
        .to_string(),
    );
    wait_refused(
        &client,
        &ns,
        "borrows",
        "a namespaced ProviderConfig reads only Secrets of its own namespace",
    )
    .await;
}

#[tokio::test]
async fn namespaced_objects_are_ordered_by_their_references_and_show_upstreams_columns() {
    let (client, remote, _dump, rns) = begin(&PROVIDER, "m-order").await;
    let control = &testenv::control_plane().control;
    let ns = control.namespace(&client, "m-order").await;
    let far = testenv::unique_name("m-order");
    kubectl_apply(
        None,
        &format!(
            "apiVersion: {}\nkind: ClusterProviderConfig\nmetadata: {{name: {far}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n",
            m::API_VERSION
        ),
    );
    let config = ("ClusterProviderConfig", far.as_str());
    // `later` depends on `first` (the reference names no namespace: its
    // own) and copies a value from it.
    kubectl_apply(
        None,
        &namespaced_object(
            "later",
            &ns,
            config,
            configmap("later", &rns, json!({})),
            json!({"references": [{"patchesFrom": {"name": "first",
                "fieldPath": "spec.forProvider.manifest.data.color"}, "toFieldPath": "data.color"}]}),
        )
        .to_string(),
    );
    kubectl_apply(
        None,
        &namespaced_object(
            "first",
            &ns,
            config,
            configmap("first", &rns, json!({"color": "blue"})),
            json!({}),
        )
        .to_string(),
    );
    wait_namespaced_ready(&client, &ns, "later").await;
    let later = remote_cm(&remote, &rns, "later").await.unwrap();
    assert_eq!(
        later
            .data
            .unwrap_or_default()
            .get("color")
            .map(String::as_str),
        Some("blue")
    );
    // The referenced Object is held while its referrer exists.
    let first = objects_in(&client, &ns).get("first").await.unwrap();
    assert!(
        first
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.starts_with("referred-by.kubernetes.crossplane.io/")),
        "no referrer finalizer on first"
    );
    // kubectl get shows upstream's columns.
    let out = control
        .kubectl_ok(&["get", "objects.kubernetes.m.crossplane.io", "-n", &ns])
        .unwrap();
    let header = out.lines().next().unwrap_or_default();
    for column in ["NAME", "KIND", "PROVIDERCONFIG", "SYNCED", "READY", "AGE"] {
        assert!(header.contains(column), "{header}");
    }
    // Deleting both: the referrer goes first, then what it referenced.
    let api = objects_in(&client, &ns);
    for name in ["first", "later"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait(WAIT, "both namespaced Objects to be gone", || async {
        let left = api.list(&ListParams::default()).await.unwrap().items;
        left.is_empty().then_some(())
    })
    .await;
    assert!(remote_cm(&remote, &rns, "first").await.is_none());
    assert!(remote_cm(&remote, &rns, "later").await.is_none());
}
