//! References and connection details: values flow in from other objects, Secrets stay out of status;
//! trace shows an Object with what it references and manages.

use super::*;

#[tokio::test]
async fn a_configmap_value_flows_into_the_manifest_and_follows_changes() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "ref").await;
    let settings: ConfigMap = serde_json::from_value(configmap(
        "common-settings",
        "default",
        json!({"region": "eu-west-1"}),
    ))
    .unwrap();
    let local_cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    let settings_name = testenv::unique_name("settings");
    let mut settings = settings;
    settings.metadata.name = Some(settings_name.clone());
    local_cms
        .create(&PostParams::default(), &settings)
        .await
        .unwrap();
    let name = format!("{ns}-region");
    apply_object(
        &client,
        object(
            &name,
            "remote",
            configmap("app", &ns, json!({"fixed": "x"})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": settings_name, "namespace": "default", "fieldPath": "data.region"}, "toFieldPath": "spec.forProvider.manifest.data.region"}]}),
        ),
    )
    .await;
    wait_ready(&client, &name).await;
    assert_eq!(
        remote_cm(&remote, &ns, "app").await.unwrap().data.unwrap()["region"],
        "eu-west-1"
    );
    local_cms
        .patch(
            &settings_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"region": "us-east-2"}})),
        )
        .await
        .unwrap();
    wait(
        WAIT,
        "the new region to reach the managed object",
        || async {
            (remote_cm(&remote, &ns, "app").await?.data?.get("region")? == "us-east-2")
                .then_some(())
        },
    )
    .await;
    delete_object(&client, &name).await;
}

#[tokio::test]
async fn connection_details_are_published_and_secrets_are_redacted() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "conn").await;
    let name = format!("{ns}-secret");
    let conn = testenv::unique_name("conn");
    apply_object(
        &client,
        object(
            &name,
            "remote",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": ns}, "stringData": {"password": "s3cr3t"}}),
            json!({
                "writeConnectionSecretToRef": {"name": conn, "namespace": "default"},
                "connectionDetails": [{"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": ns, "fieldPath": "data.password", "toConnectionSecretKey": "password"}],
            }),
        ),
    )
    .await;
    let o = wait_ready(&client, &name).await;
    let manifest = o.status.unwrap().at_provider.unwrap().manifest.unwrap();
    assert_eq!(manifest["data"]["password"], "REDACTED");
    let published = wait(WAIT, "the connection Secret", || async {
        Api::<Secret>::namespaced(client.clone(), "default")
            .get_opt(&conn)
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(published.data.unwrap()["password"].0, b"s3cr3t");
    let log = provider().lock().unwrap().log();
    assert!(
        !log.contains("s3cr3t") && !log.contains("czNjcjN0"),
        "a secret value reached the log"
    );
    delete_object(&client, &name).await;
}

#[tokio::test]
async fn a_removed_reference_no_longer_holds_its_former_target() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "unref").await;
    let (target, referrer) = (format!("{ns}-target"), format!("{ns}-referrer"));
    apply_object(
        &client,
        object(&target, "remote", configmap("t", &ns, json!({})), json!({})),
    )
    .await;
    let depends = json!({"references": [{"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": target}}]});
    apply_object(
        &client,
        object(&referrer, "remote", configmap("r", &ns, json!({})), depends),
    )
    .await;
    wait_ready(&client, &referrer).await;
    let finalizer = format!("referred-by.kubernetes.crossplane.io/{referrer}");
    assert!(
        get_object(&client, &target)
            .await
            .unwrap()
            .finalizers()
            .contains(&finalizer)
    );
    // The referrer drops the reference (and lives on).
    let generation = get_object(&client, &referrer)
        .await
        .unwrap()
        .metadata
        .generation;
    apply_object(
        &client,
        object(
            &referrer,
            "remote",
            configmap("r", &ns, json!({})),
            json!({}),
        ),
    )
    .await;
    wait(WAIT, "the referrer to sync its new spec", || async {
        let o = get_object(&client, &referrer).await?;
        let synced = o
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Synced")?
            .observed_generation;
        (synced > generation && cond(&o, "Synced")?.0 == "True").then_some(())
    })
    .await;
    // The former target can now be deleted, and goes at once.
    delete_object(&client, &target).await;
    wait(
        Duration::from_secs(10),
        &format!("Object {target} to be gone"),
        || async { get_object(&client, &target).await.is_none().then_some(()) },
    )
    .await;
    assert!(remote_cm(&remote, &ns, "t").await.is_none());
    delete_and_wait_gone(&client, &referrer).await;
}

#[tokio::test]
async fn deleting_an_object_whose_source_is_gone_deletes_what_it_applied() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "srcgone").await;
    let source = local_cm(&client, "srcname", json!({"name": "named-by-source"})).await;
    let name = format!("{ns}-named");
    apply_object(
        &client,
        object(
            &name,
            "remote",
            configmap("placeholder", &ns, json!({"a": "b"})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": source, "namespace": "default", "fieldPath": "data.name"}, "toFieldPath": "spec.forProvider.manifest.metadata.name"}]}),
        ),
    )
    .await;
    let o = wait_ready(&client, &name).await;
    assert!(remote_cm(&remote, &ns, "named-by-source").await.is_some());
    let recorded = o.status.unwrap().managed_object_ref.unwrap();
    assert_eq!(
        (
            recorded.api_version.as_str(),
            recorded.kind.as_str(),
            recorded.namespace.as_deref(),
            recorded.name.as_str()
        ),
        ("v1", "ConfigMap", Some(ns.as_str()), "named-by-source")
    );
    // The source goes first: the manifest can no longer be worked out.
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .delete(&source, &DeleteParams::default())
        .await
        .unwrap();
    delete_and_wait_gone(&client, &name).await;
    assert!(
        remote_cm(&remote, &ns, "named-by-source").await.is_none(),
        "the managed object was orphaned"
    );
}

#[tokio::test]
async fn values_read_from_a_secret_never_show_in_status() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "redact").await;
    let token = testenv::unique_name("tok");
    let source = testenv::unique_name("source");
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": source, "namespace": "default"}, "stringData": {"token": token}})).unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let name = format!("{ns}-copy");
    // The Secret's (base64) value lands in a ConfigMap, whose status copy
    // would show it.
    apply_object(
        &client,
        object(
            &name,
            "remote",
            configmap("copy", &ns, json!({"visible": "yes"})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "Secret", "name": source, "namespace": "default", "fieldPath": "data.token"}, "toFieldPath": "spec.forProvider.manifest.data.token"}]}),
        ),
    )
    .await;
    let o = wait_ready(&client, &name).await;
    let encoded = serde_json::to_value(k8s_openapi::ByteString(token.clone().into_bytes()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let live = remote_cm(&remote, &ns, "copy").await.unwrap().data.unwrap();
    assert_eq!(
        live["token"], encoded,
        "the value did reach the managed object"
    );
    let status = serde_json::to_string(&o.status).unwrap();
    let manifest = o.status.unwrap().at_provider.unwrap().manifest.unwrap();
    assert_eq!(manifest["data"]["token"], "REDACTED");
    assert_eq!(manifest["data"]["visible"], "yes");
    assert!(
        !status.contains(&encoded) && !status.contains(&token),
        "a Secret's value in status: {status}"
    );
    let log = provider().lock().unwrap().log();
    assert!(!log.contains(&encoded) && !log.contains(&token));
    delete_and_wait_gone(&client, &name).await;
}

#[tokio::test]
async fn references_read_with_the_providers_shipped_identity() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "identity").await;
    // Neither deploy/ nor the injected-identity component this test binary
    // applies grants reading ClusterRoles: the provider, running as its
    // ServiceAccount, is refused, and says so.
    let name = format!("{ns}-role");
    apply_object(
        &client,
        object(
            &name,
            "remote",
            configmap("role", &ns, json!({})),
            json!({"references": [{"fromObject": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "admin", "fieldPath": "metadata.uid"}, "toFieldPath": "spec.forProvider.manifest.data.uid"}]}),
        ),
    )
    .await;
    let msg = wait_synced_false(&client, &name, "forbidden").await;
    assert!(
        msg.contains("system:serviceaccount:crossplane-system:object-provider"),
        "{msg}"
    );
    assert!(remote_cm(&remote, &ns, "role").await.is_none());
    // Secrets: read (credentials, references) and written only as
    // connection Secrets are (create, apply); never listed, watched,
    // updated or deleted.
    let sa = "system:serviceaccount:crossplane-system:object-provider";
    let control = &testenv::control_plane().control;
    for (verb, allowed) in [
        ("get", "yes"),
        ("create", "yes"),
        ("patch", "yes"),
        ("list", "no"),
        ("watch", "no"),
        ("update", "no"),
        ("delete", "no"),
    ] {
        let out = control.kubectl(&[
            "auth",
            "can-i",
            verb,
            "secrets",
            "--all-namespaces",
            "--as",
            sa,
        ]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            allowed,
            "may the object-provider {verb} Secrets?"
        );
    }
    delete_and_wait_gone(&client, &name).await;
}

/// `crossplane-rs trace object/NAME` as a user of crossplane-view: the
/// Object, its ProviderConfig, its references (an Object it depends on,
/// with that Object's status; a ConfigMap it reads, which crossplane-view
/// may not read, so the node says what to bind and the rest still prints)
/// and the managed object as the Object's status records it.
#[tokio::test]
async fn trace_shows_an_object_its_references_and_the_managed_object() {
    let (client, _remote, _dump, ns) = begin(&PROVIDER, "trace").await;
    let settings = local_cm(&client, "trace-settings", json!({"region": "eu-west-1"})).await;
    let first = format!("{ns}-first");
    apply_object(
        &client,
        object(
            &first,
            "remote",
            configmap("first", &ns, json!({"a": "b"})),
            json!({}),
        ),
    )
    .await;
    let name = format!("{ns}-traced");
    apply_object(
        &client,
        object(
            &name,
            "remote",
            configmap("app", &ns, json!({"fixed": "x"})),
            json!({"references": [
                {"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": first}},
                {"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": settings, "namespace": "default", "fieldPath": "data.region"}, "toFieldPath": "spec.forProvider.manifest.data.region"},
            ]}),
        ),
    )
    .await;
    wait_ready(&client, &name).await;
    let viewer = e2e::trace::viewer(&testenv::control_plane().control, false, &[]);
    let tree = e2e::trace::json(&viewer, &[&format!("object/{name}")]);
    assert_eq!(tree["kind"], "Object");
    assert_eq!(tree["apiVersion"], "kubernetes.crossplane.io/v1alpha1");
    assert!(tree.get("namespace").is_none(), "{tree:#}");
    assert_eq!(tree["status"]["ready"], "True", "{tree:#}");
    assert_eq!(tree["status"]["state"], "Synced=True", "{tree:#}");
    e2e::trace::node(&tree, "ProviderConfig", "remote");
    let dependency = e2e::trace::node(&tree, "Object", &first);
    assert_eq!(dependency["status"]["ready"], "True", "{dependency:#}");
    assert_eq!(dependency["status"]["reference"], "dependsOn");
    let cm = e2e::trace::node(&tree, "ConfigMap", &settings);
    assert_eq!(cm["status"]["state"], "forbidden", "{cm:#}");
    assert_eq!(
        cm["status"]["message"],
        "forbidden: configmaps in default (bind crossplane-view)"
    );
    let managed = e2e::trace::node(&tree, "ConfigMap", "app");
    assert_eq!(managed["namespace"], ns.as_str());
    assert_eq!(managed["status"]["managed"], "status.atProvider.manifest");
    assert_ne!(managed["status"]["state"], "not observed", "{managed:#}");
    let text = e2e::trace::text(&viewer, &["objects", &name]);
    for shown in [
        format!("Object/{name}"),
        format!("Object/{first}"),
        "ConfigMap/app".into(),
    ] {
        assert!(text.contains(&shown), "{shown} missing from:\n{text}");
    }
    // --watch redraws when something in the tree changes: the Object it
    // depends on being deleted (held by this one until it goes).
    let (mut watching, trees) = e2e::trace::watch(&viewer, &[&format!("object/{name}")]);
    let first_tree = trees.recv_timeout(Duration::from_secs(30)).unwrap();
    let dependency = e2e::trace::node(&first_tree, "Object", &first);
    assert_eq!(dependency["status"]["ready"], "True", "{dependency:#}");
    assert!(dependency["status"]["deleting"].is_null(), "{dependency:#}");
    delete_object(&client, &first).await;
    let redrawn = loop {
        let tree = trees
            .recv_timeout(Duration::from_secs(60))
            .expect("a redraw after the dependency was deleted");
        let dependency = e2e::trace::node(&tree, "Object", &first);
        if dependency["status"]["deleting"] == "true" || dependency["status"]["state"] == "missing"
        {
            break tree;
        }
    };
    let _ = watching.kill();
    let _ = watching.wait();
    assert_eq!(redrawn["name"], name.as_str());
    delete_object(&client, &name).await;
}
