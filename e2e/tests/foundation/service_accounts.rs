//! The binaries work as their shipped ServiceAccounts, and watch Secrets by metadata, never data.

use super::*;

#[tokio::test]
async fn the_package_and_rbac_managers_observe_as_their_service_accounts() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "observers").await;
    // Each runs as its deploy/ ServiceAccount, under leader election on its
    // Lease in crossplane-system as deployed: only the shipped roles apply.
    let mut running = Vec::new();
    for name in ["package-manager", "rbac-manager"] {
        let identity = testenv::unique_name(name);
        let mut bin = Running::start(
            name,
            &impersonating_kubeconfig(name),
            &[
                "--leader-elect",
                "--leader-election-namespace",
                "crossplane-system",
                "--identity",
                &identity,
            ],
        );
        bin.wait_healthy(Duration::from_secs(30)).await;
        wait_leads(bin.addr, name, Duration::from_secs(30)).await;
        running.push(bin);
    }
    let (package_manager, rbac_manager) = (&running[0], &running[1]);
    let watched = [
        (package_manager, "extensionrequest"),
        (package_manager, "extension"),
        (package_manager, "provider"),
        (package_manager, "providerrevision"),
        (package_manager, "controllerconfig"),
        (rbac_manager, "providerrevision"),
        (rbac_manager, "extension"),
    ];
    // Any result counts: the Provider below names a registry that does not
    // exist, so the package-manager's reconciles of it fail (and say so);
    // what matters here is that each controller runs, with the shipped
    // roles, and is refused nothing.
    let reconciled = |bin: &Running, controller: &str| {
        metric_sum(
            &bin.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", controller)],
        )
    };
    let before: Vec<f64> = watched
        .iter()
        .map(|(bin, controller)| reconciled(bin, controller))
        .collect();

    // One object of each kind they observe.
    let unique = testenv::unique_name("observed");
    let objects = format!(
        r#"
apiVersion: extensions.crossplane.io/v1alpha1
kind: ExtensionRequest
metadata: {{name: {unique}, namespace: {ns}}}
spec: {{package: "registry.example/redis:v0.1.0"}}
---
apiVersion: extensions.crossplane.io/v1alpha1
kind: Extension
metadata: {{name: {unique}, namespace: {ns}}}
spec: {{}}
---
apiVersion: pkg.crossplane.io/v1
kind: Provider
metadata: {{name: {unique}}}
spec: {{package: "registry.example/provider:v1"}}
---
apiVersion: pkg.crossplane.io/v1
kind: ProviderRevision
metadata: {{name: {unique}}}
spec: {{desiredState: Active, package: "registry.example/provider:v1", revision: 1}}
---
apiVersion: pkg.crossplane.io/v1beta1
kind: DeploymentRuntimeConfig
metadata: {{name: {unique}}}
spec: {{}}
---
apiVersion: pkg.crossplane.io/v1alpha1
kind: ControllerConfig
metadata: {{name: {unique}}}
spec: {{}}
"#
    );
    let out = plane
        .control
        .kubectl_stdin(&["apply", "-f", "-"], Some(&objects));
    assert!(
        out.status.success(),
        "creating the objects: {}",
        stderr(&out)
    );
    for ((bin, controller), before) in watched.iter().zip(before) {
        wait(
            Duration::from_secs(30),
            &format!("{}'s {controller} controller to reconcile", bin.name),
            || {
                let now = reconciled(bin, controller);
                async move { (now > before).then_some(()) }
            },
        )
        .await;
    }
    for bin in &running {
        assert!(leads_now(bin.addr), "{} stopped leading", bin.name);
        let log = bin.log();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{} was refused something:\n{log}",
            bin.name
        );
    }
}

/// A Secret with `len` random bytes under key `blob`.
fn random_secret(name: &str, len: usize, seed: u64) -> Secret {
    let mut x = seed | 1;
    let bytes = (0..len)
        .map(|_| {
            // xorshift64: incompressible enough that no layer shrinks it.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(
            [("blob".to_owned(), k8s_openapi::ByteString(bytes))]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn secret_watches_carry_metadata_not_data() {
    let plane = testenv::control_plane();
    let (client, remote) = workloads::clients().await;
    let ns = plane.control.namespace(&client, "secretwatch").await;
    let rns = workloads::remote_ns(&remote, "secretwatch").await;
    // The scheduler and the resource-controller run as their deploy/
    // ServiceAccounts, each through a proxy that counts the bytes the API
    // server sends it. They poll once an hour: only a watch wakes them.
    let (scheduler_proxy, kubeconfig) =
        Proxy::in_front_of(&impersonating_kubeconfig("scheduler")).await;
    let mut scheduler = Running::start(
        "scheduler",
        &kubeconfig,
        &["--watch-namespace", &ns, "--poll-interval", "1h"],
    );
    let (resource_proxy, kubeconfig) =
        Proxy::in_front_of(&impersonating_kubeconfig("resource-controller")).await;
    let mut resource = Running::start(
        "resource-controller",
        &kubeconfig,
        &["--watch-namespace", &ns, "--poll-interval", "1h"],
    );
    scheduler.wait_healthy(Duration::from_secs(30)).await;
    resource.wait_healthy(Duration::from_secs(30)).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // A cluster whose connection Secret does not exist yet is not Ready.
    workloads::cluster(&client, &ns, "late", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "late", "False").await;
    // Its status write wakes the scheduler once more; after that only the
    // Secret watch can.
    wait(Duration::from_secs(30), "the scheduler to settle", || {
        let n = metric_sum(
            &scheduler.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", "kubernetescluster")],
        );
        async move { (n >= 2.0).then_some(()) }
    })
    .await;
    // The Secret appears: the cluster becomes Ready.
    let connection: Secret = serde_json::from_value(json!({
        "metadata": {"name": "late-kubeconfig"},
        "stringData": {"kubeconfig": plane.remote.kubeconfig},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &connection)
        .await
        .unwrap();
    wait_cluster_ready(&client, &ns, "late", "True").await;

    // The resource-controller propagates Secret "shared" to the cluster.
    let shared: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shared"},
        "stringData": {"token": "v1"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let resource_body = json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplicationResource",
        "metadata": {"name": "propagates", "namespace": ns},
        "spec": {
            "clusterRef": {"name": "late"},
            "secrets": [{"name": "shared"}],
            "template": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": rns},
                "data": {"a": "1"},
            },
        },
    });
    workloads::apply_json(
        &client,
        &ns,
        "kubernetesapplicationresources",
        &resource_body,
    )
    .await;
    let remote_secrets: Api<Secret> = Api::namespaced(remote.clone(), &rns);
    let remote_token = |remote_secrets: Api<Secret>| async move {
        let s = remote_secrets
            .get_opt("propagates-shared")
            .await
            .ok()
            .flatten()?;
        Some(s.data?.get("token")?.0.clone())
    };
    wait(
        Duration::from_secs(30),
        "Secret shared in the remote cluster",
        || {
            let r = remote_secrets.clone();
            async move { (remote_token(r).await? == b"v1").then_some(()) }
        },
    )
    .await;

    // 2 MiB of Secret data lands in the namespace both watch.
    let (scheduler_before, resource_before) = (
        scheduler_proxy.bytes_to_clients(),
        resource_proxy.bytes_to_clients(),
    );
    const BLOB: usize = 256 * 1024;
    for i in 0..8u64 {
        secrets
            .create(
                &PostParams::default(),
                &random_secret(&format!("bulk-{i}"), BLOB, 0x9e37_79b9_7f4a_7c15 ^ i),
            )
            .await
            .unwrap();
    }
    // Then the Secrets they care about change. Each watch delivers events
    // in order, so once each has reacted, it has received every bulk
    // Secret's event. (The resource-controller first: it needs the
    // connection Secret that the scheduler's change then breaks.)
    secrets
        .patch(
            "shared",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"token": "v2"}})),
        )
        .await
        .unwrap();
    wait(
        Duration::from_secs(30),
        "the rotated Secret shared to reach the remote cluster",
        || {
            let r = remote_secrets.clone();
            async move { (remote_token(r).await? == b"v2").then_some(()) }
        },
    )
    .await;
    secrets
        .patch(
            "late-kubeconfig",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"kubeconfig": "not a kubeconfig"}})),
        )
        .await
        .unwrap();
    wait_cluster_ready(&client, &ns, "late", "False").await;
    // What the API server sent them meanwhile: metadata of the bulk Secrets
    // and the few small Secrets they read, never the bulk Secrets' data.
    for (who, proxy, before) in [
        ("scheduler", &scheduler_proxy, scheduler_before),
        ("resource-controller", &resource_proxy, resource_before),
    ] {
        let received = proxy.bytes_to_clients() - before;
        assert!(
            received < BLOB as u64,
            "the {who} received {received} bytes while 8 Secrets of {BLOB} bytes were written in the namespace it watches: its Secret watch carries their data"
        );
        eprintln!(
            "secret watch: the {who} received {received} bytes for 8 × {BLOB} bytes of Secret data"
        );
    }
    assert_eq!(scheduler.child.try_wait().unwrap(), None);
    assert_eq!(resource.child.try_wait().unwrap(), None);
}
