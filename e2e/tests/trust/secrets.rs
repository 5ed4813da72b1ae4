//! Secret values stay secret and keyed: a pasted token shows nowhere, two keys of one Secret are two
//! clusters, a ProviderConfig's exec kubeconfig never runs in the object-provider.

use super::*;

#[tokio::test]
async fn a_token_pasted_as_the_secret_value_appears_in_no_status_event_or_log() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-pasted").await;
    let bins = Binaries::start(&["scheduler", "resource-controller"], &ns, &[]).await;
    let token = format!("sk-{}", testenv::unique_name("pasted").replace('-', ""));
    // A bare token, and one in YAML that does not parse.
    cluster_with(&client, &ns, "pasted", &token).await;
    cluster_with(&client, &ns, "broken", &format!("token: \"{token}\n  - [")).await;
    scheduled_resource(&client, &ns, "pasted-resource", "pasted").await;
    scheduled_resource(&client, &ns, "broken-resource", "broken").await;

    let quoted = |_: &str, msg: &str| {
        msg.contains(&token)
            .then(|| format!("the condition quotes the Secret: {msg}"))
    };
    wait_cluster_refused(&client, &ns, "pasted", "it is not a kubeconfig", quoted).await;
    let msg = wait_cluster_refused(
        &client,
        &ns,
        "broken",
        "is not one valid YAML document",
        quoted,
    )
    .await;
    assert!(msg.contains("line 1, column"), "names the position: {msg}");
    wait_resource_refused(
        &client,
        &ns,
        "pasted-resource",
        "it is not a kubeconfig",
        quoted,
    )
    .await;
    wait_resource_refused(&client, &ns, "broken-resource", "line 1, column", quoted).await;
    more_reconciles(bins.get("scheduler"), "kubernetescluster", 2).await;
    more_reconciles(
        bins.get("resource-controller"),
        "kubernetesapplicationresource",
        2,
    )
    .await;

    let clusters = Api::<KubernetesCluster>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    // The refusal is reported as an event too (posted after the status).
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    e2e::wait_event(&client, Some(&ns), None, "ClusterNotReady").await;
    let events = events.list(&ListParams::default()).await.unwrap();
    for (what, text) in [
        (
            "KubernetesCluster status",
            serde_json::to_string(&clusters.items).unwrap(),
        ),
        (
            "resource status",
            serde_json::to_string(&resources.items).unwrap(),
        ),
        ("events", serde_json::to_string(&events.items).unwrap()),
        ("logs", bins.logs()),
    ] {
        assert!(
            !text.contains(&token),
            "the token appears in the {what}: {text}"
        );
    }
}

#[tokio::test]
async fn an_exec_kubeconfig_in_a_provider_config_never_runs_in_the_object_provider() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-pc").await;
    let mut provider = Running::start(
        "object-provider",
        // As its shipped ServiceAccount: its deploy/ role is what it needs.
        &impersonating_kubeconfig("object-provider"),
        &["--poll-interval", "1s", "--deletion-timeout", "10s"],
    );
    provider.wait_healthy(Duration::from_secs(30)).await;
    let marker = temp_path("trust-pc-marker");
    let kc = kubeconfig(
        json!({"server": "https://127.0.0.1:1"}),
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]}}),
    );
    secret(&client, &ns, "creds", &[("kubeconfig", &kc)]).await;
    let config = testenv::unique_name("trust-exec");
    let object = testenv::unique_name("trust-exec");
    let ssa = kube::api::PatchParams::apply("e2e-test").force();
    let pc = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": config},
        "spec": {"credentials": {"source": "Secret",
                 "secretRef": {"namespace": ns, "name": "creds", "key": "kubeconfig"}}},
    });
    Api::<types::kubernetes::v1alpha1::ProviderConfig>::all(client.clone())
        .patch(&config, &ssa, &Patch::Apply(&pc))
        .await
        .unwrap();
    let obj = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": object},
        "spec": {"providerConfigRef": {"name": config}, "forProvider": {"manifest": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": object, "namespace": "default"}}}},
    });
    let objects = Api::<Object>::all(client.clone());
    objects
        .patch(&object, &ssa, &Patch::Apply(&obj))
        .await
        .unwrap();

    let msg = wait(
        WAIT,
        "the Object to be Synced=False naming exec",
        || async {
            assert!(
                !marker.exists(),
                "the exec command ran in the object-provider (it made {})",
                marker.display()
            );
            let o = objects.get_opt(&object).await.unwrap()?;
            let c = o
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Synced")?;
            let msg = c.message.unwrap_or_default();
            (c.status == "False" && msg.contains("users[0].user.exec")).then_some(msg)
        },
    )
    .await;
    assert!(!msg.contains("touch"), "{msg}");
    assert!(
        !marker.exists(),
        "the exec command ran in the object-provider"
    );
    more_reconciles(&provider, "object", 2).await;
    assert!(
        !marker.exists(),
        "the exec command ran in the object-provider; log:\n{}",
        provider.log()
    );
}

#[tokio::test]
async fn two_clusters_reading_two_keys_of_one_secret_each_get_their_own_applications() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "trust-keys").await;
    // The same namespace in the remote cluster, for the remote application.
    let remote_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(remote.clone())
        .create(&PostParams::default(), &remote_ns)
        .await
        .unwrap();
    let _controllers = Controllers::start(&ns).await;
    secret(
        &client,
        &ns,
        "both",
        &[
            ("control", plane.control.kubeconfig.as_str()),
            ("remote", plane.remote.kubeconfig.as_str()),
        ],
    )
    .await;
    kubernetes_cluster(
        &client,
        &ns,
        "to-control",
        "both",
        "control",
        json!({"target": "control"}),
    )
    .await;
    kubernetes_cluster(
        &client,
        &ns,
        "to-remote",
        "both",
        "remote",
        json!({"target": "remote"}),
    )
    .await;
    for target in ["control", "remote"] {
        let name = format!("for-{target}");
        let template = configmap_template(&name, &ns, &name, json!({"target": target}));
        apply_app(
            &client,
            &ns,
            app(
                &name,
                &ns,
                json!({"matchLabels": {"target": target}}),
                json!([template]),
            ),
        )
        .await;
    }
    wait_app_state(&client, &ns, "for-control", "Submitted").await;
    wait_app_state(&client, &ns, "for-remote", "Submitted").await;

    let in_control = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let in_remote = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    assert!(in_control.get_opt("for-control").await.unwrap().is_some());
    assert!(in_remote.get_opt("for-remote").await.unwrap().is_some());
    assert!(
        in_control.get_opt("for-remote").await.unwrap().is_none(),
        "the remote application landed in the control cluster"
    );
    assert!(
        in_remote.get_opt("for-control").await.unwrap().is_none(),
        "the control application landed in the remote cluster"
    );
}
