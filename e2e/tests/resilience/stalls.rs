//! A stalled cluster or target holds up nobody else, and a reconcile that outlives --reconcile-timeout
//! is abandoned and says so.

use super::*;

/// The controllers run with the default --concurrency of 8 workers; the
/// stalled cluster gets three times as much work, so that it could hold
/// every worker again and again if nothing bounded it.
const STALLED: usize = 24;

/// How soon healthy work must be done while a cluster stalls.
const WITHIN: Duration = Duration::from_secs(30);

/// Objects are cluster-scoped and an object-provider reconciles every one:
/// two of this file's tests that each start their own provider (with
/// different flags) would also reconcile each other's Objects and write
/// each other's conditions. They take turns.
static OWN_PROVIDER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn synced(conds: &[types::common::Condition]) -> Option<(String, String)> {
    condition(conds, "Synced").map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
}

async fn put_secret(client: &Client, ns: &str, name: &str, kubeconfig: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"kubeconfig": kubeconfig},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(name, &ssa(), &Patch::Apply(&secret))
        .await
        .unwrap();
}

/// Applies HEALTHY applications for the healthy cluster, each with one
/// ConfigMap `healthy-<i>` whose data.v is `v`.
async fn healthy_apps(client: &Client, ns: &str, rns: &str, v: &str) {
    for i in 0..HEALTHY {
        let name = format!("healthy-{i}");
        let t = configmap_template(&format!("h{i}"), rns, &name, json!({"v": v}));
        let selector = json!({"matchLabels": {"pool": "healthy"}});
        apply_app(client, ns, app(&name, ns, selector, json!([t]))).await;
    }
}

#[tokio::test]
async fn a_stalled_cluster_does_not_starve_the_other_applications() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "stall-apps").await;
    let rns = remote_ns(&remote, "stall-apps").await;
    let _c = Controllers::start(&ns).await;
    let stalled = Stalled::start(Mode::Tls);
    cluster(
        &client,
        &ns,
        "healthy",
        json!({"pool": "healthy"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    cluster(
        &client,
        &ns,
        "stalling",
        json!({"pool": "stalling"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;

    // One application with more resources than the resource-controller has
    // workers, submitted while its cluster still answers.
    let templates: Vec<Value> = (0..STALLED)
        .map(|i| {
            configmap_template(
                &format!("s{i}"),
                &rns,
                &format!("stalled-{i}"),
                json!({"v": "1"}),
            )
        })
        .collect();
    apply_app(
        &client,
        &ns,
        app(
            "stalled",
            &ns,
            json!({"matchLabels": {"pool": "stalling"}}),
            json!(templates),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "stalled", "Submitted").await;

    // Then its cluster stalls: the API server accepts connections and
    // completes TLS, but never answers a request.
    put_secret(&client, &ns, "stalling-kubeconfig", &stalled.kubeconfig()).await;
    wait(
        WAIT,
        "the resource-controller to call the stalled cluster",
        || async { (stalled.accepted() > 0).then_some(()) },
    )
    .await;

    // Work for the healthy cluster arrives while the stalled one holds
    // whatever it can.
    let started = Instant::now();
    healthy_apps(&client, &ns, &rns, "1").await;
    let apps = Api::<KubernetesApplication>::namespaced(client.clone(), &ns);
    let submitted = || async {
        apps.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|a| a.name_any().starts_with("healthy-") && state_of_app(a) == "Submitted")
            .count()
    };
    wait_count(WITHIN, "healthy applications Submitted", HEALTHY, submitted).await;
    eprintln!(
        "{HEALTHY} healthy applications Submitted in {:?}",
        started.elapsed()
    );

    // They stay current: a changed template reaches the remote cluster at once.
    healthy_apps(&client, &ns, &rns, "2").await;
    let names: Vec<String> = (0..HEALTHY).map(|i| format!("healthy-{i}")).collect();
    wait_count(
        Duration::from_secs(20),
        "changed ConfigMaps in the remote cluster",
        HEALTHY,
        || configmaps_with(&remote, &rns, &names, "2"),
    )
    .await;

    // Meanwhile every stalled resource says what is wrong, naming its cluster.
    let needle = format!("KubernetesCluster {ns}/stalling did not answer");
    for i in 0..STALLED {
        let name = format!("s{i}");
        let res = wait(
            WAIT,
            &format!("resource {name} to say {needle:?}"),
            || async {
                get_res(&client, &ns, &name).await.filter(|r| {
                    let conds = r
                        .status
                        .as_ref()
                        .map(|s| s.conditions.as_slice())
                        .unwrap_or_default();
                    synced(conds)
                        .is_some_and(|(status, msg)| status == "False" && msg.contains(&needle))
                })
            },
        )
        .await;
        assert_eq!(state_of_res(&res), "Failed");
    }
    // And so does the cluster itself.
    let kc = Api::<KubernetesCluster>::namespaced(client.clone(), &ns);
    let ready = wait(
        WAIT,
        "KubernetesCluster stalling to be Ready=False",
        || async {
            let c = kc.get("stalling").await.unwrap();
            let conds = c.status.map(|s| s.conditions).unwrap_or_default();
            condition(&conds, "Ready")
                .filter(|r| r.status == "False")
                .cloned()
        },
    )
    .await;
    assert!(
        ready
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&needle),
        "{ready:?}"
    );
}

fn object(name: &str, config: &str, ns: &str, cm: &str, v: &str) -> Value {
    json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": name},
        "spec": {
            "providerConfigRef": {"name": config},
            "forProvider": {"manifest": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": cm, "namespace": ns}, "data": {"v": v},
            }},
        },
    })
}

async fn apply_object(client: &Client, body: &Value) {
    Api::<Object>::all(client.clone())
        .patch(
            body["metadata"]["name"].as_str().unwrap(),
            &ssa(),
            &Patch::Apply(body),
        )
        .await
        .unwrap();
}

async fn provider_config(client: &Client, name: &str, ns: &str, secret: &str) {
    let pc = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": name},
        "spec": {"credentials": {"source": "Secret", "secretRef": {"namespace": ns, "name": secret, "key": "kubeconfig"}}},
    });
    Api::<ProviderConfig>::all(client.clone())
        .patch(name, &ssa(), &Patch::Apply(&pc))
        .await
        .unwrap();
}

fn object_ready(o: &Object) -> bool {
    let conds = o
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    ["Synced", "Ready"]
        .iter()
        .all(|t| condition(conds, t).is_some_and(|c| c.status == "True"))
}

#[tokio::test]
async fn a_stalled_target_does_not_starve_the_other_objects() {
    let _turn = OWN_PROVIDER.lock().await;
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "stall-objects").await;
    let rns = remote_ns(&remote, "stall-objects").await;
    let stalled = Stalled::start(Mode::Tls);
    // A second target whose TLS handshake never completes.
    let silent = Stalled::start(Mode::Tcp);
    let id = testenv::unique_name("pc");
    let (healthy_pc, stalled_pc, silent_pc) = (
        format!("{id}-healthy"),
        format!("{id}-stalled"),
        format!("{id}-silent"),
    );
    put_secret(&client, &ns, "healthy", &plane.remote.kubeconfig).await;
    put_secret(&client, &ns, "stalled", &stalled.kubeconfig()).await;
    put_secret(&client, &ns, "silent", &silent.kubeconfig()).await;
    provider_config(&client, &healthy_pc, &ns, "healthy").await;
    provider_config(&client, &stalled_pc, &ns, "stalled").await;
    provider_config(&client, &silent_pc, &ns, "silent").await;
    let mut provider = Running::start(
        "object-provider",
        // As its shipped ServiceAccount: its deploy/ role is what it needs.
        &impersonating_kubeconfig("object-provider"),
        &["--poll-interval", "1s"],
    );
    provider.wait_healthy(Duration::from_secs(30)).await;
    let dump = DumpLog(&provider);

    // More Objects on the stalled target than the provider has workers.
    let stalled_names: Vec<String> = (0..STALLED).map(|i| format!("{id}-stalled-{i}")).collect();
    for (i, name) in stalled_names.iter().enumerate() {
        apply_object(
            &client,
            &object(name, &stalled_pc, &rns, &format!("stalled-{i}"), "1"),
        )
        .await;
    }
    let silent_name = format!("{id}-silent");
    apply_object(
        &client,
        &object(&silent_name, &silent_pc, &rns, "silent", "1"),
    )
    .await;
    wait(WAIT, "the provider to call the stalled target", || async {
        (stalled.accepted() > 0).then_some(())
    })
    .await;

    // Objects for the healthy target arrive while the stalled one holds
    // whatever it can.
    let started = Instant::now();
    let healthy_names: Vec<String> = (0..HEALTHY).map(|i| format!("{id}-healthy-{i}")).collect();
    let cms: Vec<String> = (0..HEALTHY).map(|i| format!("healthy-{i}")).collect();
    for (name, cm) in healthy_names.iter().zip(&cms) {
        apply_object(&client, &object(name, &healthy_pc, &rns, cm, "1")).await;
    }
    let objects = Api::<Object>::all(client.clone());
    let ready = || async {
        objects
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|o| healthy_names.contains(&o.name_any()) && object_ready(o))
            .count()
    };
    wait_count(WITHIN, "healthy Objects Ready", HEALTHY, ready).await;
    eprintln!("{HEALTHY} healthy Objects Ready in {:?}", started.elapsed());

    // They stay current: a changed manifest reaches the target at once.
    for (name, cm) in healthy_names.iter().zip(&cms) {
        apply_object(&client, &object(name, &healthy_pc, &rns, cm, "2")).await;
    }
    wait_count(
        Duration::from_secs(20),
        "changed ConfigMaps in the target",
        HEALTHY,
        || configmaps_with(&remote, &rns, &cms, "2"),
    )
    .await;

    // Meanwhile the stalled Objects say what is wrong, naming the target.
    for (name, pc) in stalled_names
        .iter()
        .map(|n| (n, &stalled_pc))
        .chain([(&silent_name, &silent_pc)])
    {
        let needle = format!("the target cluster of ProviderConfig {pc} did not answer");
        wait(
            WAIT,
            &format!("Object {name} to say {needle:?}"),
            || async {
                let o = objects.get(name).await.unwrap();
                let conds = o.status.map(|s| s.conditions).unwrap_or_default();
                synced(&conds).filter(|(status, msg)| status == "False" && msg.contains(&needle))
            },
        )
        .await;
    }
    assert!(silent.accepted() > 0, "nothing called the silent target");
    drop(dump);
}

#[tokio::test]
async fn a_reconcile_that_outlives_reconcile_timeout_is_abandoned_and_says_so() {
    let _turn = OWN_PROVIDER.lock().await;
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "deadline").await;
    let rns = remote_ns(&remote, "deadline").await;
    let stalled = Stalled::start(Mode::Tls);
    let id = testenv::unique_name("deadline");
    put_secret(&client, &ns, "stalled", &stalled.kubeconfig()).await;
    provider_config(&client, &id, &ns, "stalled").await;
    // The remote part may take a minute, the whole reconcile only 2 s: the
    // reconcile deadline is what fires.
    let mut provider = Running::start(
        "object-provider",
        // As its shipped ServiceAccount: its deploy/ role is what it needs.
        &impersonating_kubeconfig("object-provider"),
        &[
            "--poll-interval",
            "1s",
            "--remote-timeout",
            "1m",
            "--reconcile-timeout",
            "2s",
        ],
    );
    provider.wait_healthy(Duration::from_secs(30)).await;
    let dump = DumpLog(&provider);
    apply_object(&client, &object(&id, &id, &rns, "cm", "1")).await;
    let objects = Api::<Object>::all(client.clone());
    let needle = "the reconcile did not finish within 2s";
    wait(WAIT, &format!("Object {id} to say {needle:?}"), || async {
        let o = objects.get(&id).await.unwrap();
        let conds = o.status.map(|s| s.conditions).unwrap_or_default();
        synced(&conds).filter(|(status, msg)| status == "False" && msg.contains(needle))
    })
    .await;
    let timeouts = metric_sum(
        &provider.metrics(),
        "crossplane_rs_reconcile_errors_total",
        &[("category", "ReconcileTimedOut")],
    );
    assert!(timeouts >= 1.0, "no ReconcileTimedOut error counted");
    drop(dump);
}
