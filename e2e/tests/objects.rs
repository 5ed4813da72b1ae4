//! Seeds 002 and 003: Objects manage any manifest in the remote or the
//! control cluster, with management policies, references, ordered install
//! and uninstall, pause, drift correction and connection details.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use e2e::{objects::*, wait};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::{Object, ProviderConfig};

/// This file's object-provider, running as its shipped ServiceAccount
/// (deploy/), polling every second, with a ProviderConfig `remote` (the
/// remote cluster's kubeconfig), `kubernetes-provider` (the seed's name, the
/// same) and `local` (InjectedIdentity, the control cluster).
const PROVIDER: ProviderSetup = ProviderSetup {
    configs: r#"
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: remote}
spec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}
---
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: kubernetes-provider}
spec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}
---
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: default}
spec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}
---
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: local}
spec: {credentials: {source: InjectedIdentity}}
"#,
    prepare,
    args: &["--poll-interval", "1s", "--deletion-timeout", "10s"],
};

/// The OLM CRDs of seed 003 in the remote cluster and, beyond deploy/, the
/// ClusterRole of the opt-in InjectedIdentity component.
fn prepare() {
    let plane = testenv::control_plane();
    let crds = testenv::repo_root().join("e2e/testdata/olm-crds.yaml");
    let out = plane
        .remote
        .kubectl(&["apply", "-f", &crds.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = plane.remote.kubectl(&[
        "wait",
        "--for=condition=Established",
        "-f",
        &crds.to_string_lossy(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Beyond deploy/: the `local` (InjectedIdentity) cases manage
    // Namespaces in the control cluster, which needs the opt-in
    // component's ClusterRole, exactly as an operator would apply it.
    let injected = testenv::repo_root()
        .join("deploy/components/object-provider-injected-identity/clusterrole.yaml");
    let out = plane
        .control
        .kubectl(&["apply", "-f", &injected.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn wait_synced_false(client: &Client, name: &str, needle: &str) -> String {
    wait(
        WAIT,
        &format!("Object {name} to be Synced=False saying {needle:?}"),
        || async {
            let o = get_object(client, name).await?;
            let (status, _, msg) = cond(&o, "Synced")?;
            (status == "False" && msg.contains(needle)).then_some(msg)
        },
    )
    .await
}

/// Waits until the provider has observed managed objects in `cluster` `n`
/// more times than `from`: proof that its polls ran, where a sleep would
/// prove nothing.
async fn wait_observations(cluster: &str, from: u64, n: u64) {
    wait(
        WAIT,
        &format!("{n} observations in cluster {cluster} (polls)"),
        || async { (observations(cluster) >= from + n).then_some(()) },
    )
    .await;
}

/// Events about the object called `name`.
async fn events_of(client: &Client, name: &str) -> Vec<Event> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

/// Appends to `order` what the watches sent since the last call; fails the
/// test when they stopped.
fn receive<T: std::fmt::Debug>(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
    order: &mut Vec<T>,
) {
    use tokio::sync::mpsc::error::TryRecvError;
    loop {
        match rx.try_recv() {
            Ok(e) => order.push(e),
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => panic!("the watches stopped: {order:?}"),
        }
    }
}

async fn remote_cm(remote: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(remote.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_seed_namespace_object_is_created_in_the_remote_cluster_and_locally_with_injected_identity()
 {
    let (client, remote) = clients(&PROVIDER).await;
    let _dump = DumpOnPanic;
    let plane = testenv::control_plane();
    let file = testenv::repo_root().join("examples/seeds/002-object-sample-namespace.yaml");
    let out = plane
        .control
        .kubectl(&["apply", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let o = wait_ready(&client, "sample-namespace").await;
    // metadata.name defaults to the Object's name.
    let ns = Api::<Namespace>::all(remote.clone())
        .get("sample-namespace")
        .await
        .unwrap();
    assert_eq!(ns.labels()["example"], "true");
    let manifest = o.status.unwrap().at_provider.unwrap().manifest.unwrap();
    assert_eq!(manifest["metadata"]["uid"], ns.uid().unwrap());
    assert_eq!(
        manifest["status"]["phase"], "Active",
        "atProvider.manifest includes the live status"
    );
    let out = plane
        .control
        .kubectl(&["get", "object", "sample-namespace"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "KIND",
            "TARGET-NAME",
            "TARGET-NAMESPACE",
            "PROVIDERCONFIG",
            "SYNCED",
            "READY",
            "AGE"
        ]
    );
    assert!(
        text.contains("kubernetes-provider") && text.contains("True"),
        "{text}"
    );

    // The same with InjectedIdentity: the control cluster itself.
    let local_name = testenv::unique_name("injected");
    apply_object(&client, object(&local_name, "local", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"labels": {"example": "true"}}}), json!({}))).await;
    wait_ready(&client, &local_name).await;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&local_name)
            .await
            .unwrap()
            .is_some()
    );
    // Usage is recorded.
    wait(WAIT, "ProviderConfig local to count its user", || async {
        let pc = Api::<ProviderConfig>::all(client.clone())
            .get("local")
            .await
            .ok()?;
        (pc.status?.users? >= 1).then_some(())
    })
    .await;
    delete_and_wait_gone(&client, &local_name).await;
}

#[tokio::test]
async fn every_row_of_the_management_policy_table_is_honoured() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "policy").await;
    let pc = own_config(&client, "policy").await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    // (policy, deletionPolicy, may create/update, may delete)
    let rows = [
        ("Default", "Delete", true, true),
        ("ObserveCreateUpdate", "Delete", true, false),
        ("ObserveDelete", "Delete", false, true),
        ("Observe", "Delete", false, false),
        ("Default", "Orphan", true, false),
        ("ObserveDelete", "Orphan", false, false),
    ];
    for (policy, deletion, create_update, delete) in rows {
        let name = format!("{}-{}", policy.to_lowercase(), deletion.to_lowercase());
        let obj_name = format!("{ns}-{name}");
        if !create_update {
            // Observe-only policies need the object to exist already.
            let cm: ConfigMap =
                serde_json::from_value(configmap(&name, &ns, json!({"v": "theirs"}))).unwrap();
            cms.create(&PostParams::default(), &cm).await.unwrap();
        }
        let extra = json!({"managementPolicy": policy, "deletionPolicy": deletion});
        apply_object(
            &client,
            object(
                &obj_name,
                &pc,
                configmap(&name, &ns, json!({"v": "1"})),
                extra.clone(),
            ),
        )
        .await;
        wait_ready(&client, &obj_name).await;
        let live = remote_cm(&remote, &ns, &name).await.unwrap();
        let expected = if create_update { "1" } else { "theirs" };
        assert_eq!(
            live.data.as_ref().unwrap()["v"],
            expected,
            "{policy}/{deletion}: create"
        );
        // An update to the manifest reaches the target only when allowed.
        let writes = requests(&pc, &WRITES);
        apply_object(
            &client,
            object(
                &obj_name,
                &pc,
                configmap(&name, &ns, json!({"v": "2"})),
                extra,
            ),
        )
        .await;
        if create_update {
            wait(
                WAIT,
                &format!("{policy}: update to reach the target"),
                || async {
                    (remote_cm(&remote, &ns, &name).await?.data?.get("v")? == "2").then_some(())
                },
            )
            .await;
        } else {
            // Three polls of the changed Object, and not one write.
            wait_observations(&pc, observations(&pc), 3).await;
            assert_eq!(
                requests(&pc, &WRITES),
                writes,
                "{policy}: the provider wrote to the target"
            );
            assert_eq!(
                remote_cm(&remote, &ns, &name).await.unwrap().data.unwrap()["v"],
                "theirs",
                "{policy}: no update"
            );
        }
        delete_and_wait_gone(&client, &obj_name).await;
        let left = remote_cm(&remote, &ns, &name).await;
        assert_eq!(
            left.is_none(),
            delete,
            "{policy}/{deletion}: delete allowed = {delete}"
        );
    }
    // Observe with nothing to observe says so.
    apply_object(
        &client,
        object(
            &format!("{ns}-observe-missing"),
            "remote",
            configmap("missing", &ns, json!({})),
            json!({"managementPolicy": "Observe"}),
        ),
    )
    .await;
    wait_synced_false(
        &client,
        &format!("{ns}-observe-missing"),
        "does not exist and managementPolicy Observe does not allow creating it",
    )
    .await;
    assert!(remote_cm(&remote, &ns, "missing").await.is_none());
    delete_object(&client, &format!("{ns}-observe-missing")).await;
}

#[tokio::test]
async fn the_seed_subscription_csv_kong_chain_installs_in_order_and_uninstalls_in_reverse() {
    let (client, remote) = clients(&PROVIDER).await;
    let _dump = DumpOnPanic;
    let plane = testenv::control_plane();
    let _ = plane.remote.kubectl(&["create", "namespace", "operators"]);
    let ar = |group: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let subs: Api<DynamicObject> = Api::namespaced_with(
        remote.clone(),
        "operators",
        &ar("operators.coreos.com", "Subscription", "subscriptions"),
    );
    let csvs: Api<DynamicObject> = Api::namespaced_with(
        remote.clone(),
        "operators",
        &ar(
            "operators.coreos.com",
            "ClusterServiceVersion",
            "clusterserviceversions",
        ),
    );
    let kongs: Api<DynamicObject> = Api::namespaced_with(
        remote.clone(),
        "operators",
        &ar("charts.konghq.com", "Kong", "kongs"),
    );
    // Every Added and Deleted of the three kinds with the resourceVersion
    // the API server gave that change: order is proven by the server's own
    // revisions (one etcd, one sequence), compared strictly. The arrival
    // order is not: three watch streams may deliver changes milliseconds
    // apart in either order.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(&str, &str, u64)>();
    let watches = {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let watch = |kind: &'static str, api: &Api<DynamicObject>| {
            watcher(api.clone(), watcher::Config::default())
                .default_backoff()
                .map(move |e| (kind, e))
                .boxed()
        };
        let mut merged = futures::stream::select_all([
            watch("Subscription", &subs),
            watch("ClusterServiceVersion", &csvs),
            watch("Kong", &kongs),
        ]);
        tokio::spawn(async move {
            while let Some((kind, event)) = merged.next().await {
                let revision = |o: &DynamicObject| {
                    o.metadata
                        .resource_version
                        .as_deref()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                let (what, rv) = match event {
                    Ok(watcher::Event::InitDone) => ("ready", 0),
                    Ok(watcher::Event::Apply(o)) => ("Added", revision(&o)),
                    Ok(watcher::Event::InitApply(o)) => ("existed", revision(&o)),
                    Ok(watcher::Event::Delete(o)) => ("Deleted", revision(&o)),
                    _ => continue,
                };
                if tx.send((kind, what, rv)).is_err() {
                    break;
                }
            }
        })
    };
    let mut order: Vec<(&str, &str, u64)> = Vec::new();
    wait(WAIT, "the three watches to have listed", || {
        receive(&mut rx, &mut order);
        let listed = order.iter().filter(|(_, w, _)| *w == "ready").count();
        std::future::ready((listed == 3).then_some(()).ok_or(format!("{order:?}")))
    })
    .await;
    assert!(
        !order.iter().any(|(_, w, _)| *w == "existed"),
        "left over from an earlier run: {order:?}"
    );
    // The revision of the first `what` event of `kind`.
    let position = |order: &[(&str, &str, u64)], kind: &str, what: &str| {
        order
            .iter()
            .filter(|(k, w, _)| (*k, *w) == (kind, what))
            .map(|(_, _, rv)| *rv)
            .min()
    };
    // A small OLM: a Subscription gets status.currentCSV and its CSV.
    let olm = {
        let (subs, csvs) = (subs.clone(), csvs.clone());
        tokio::spawn(async move {
            loop {
                for sub in subs
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    if sub.data.pointer("/status/currentCSV").is_none()
                        && sub.metadata.deletion_timestamp.is_none()
                    {
                        let patch = json!({"status": {"currentCSV": "kong.v0.10.0"}});
                        let _ = subs
                            .patch_status(
                                &sub.name_any(),
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await;
                        let csv: DynamicObject = serde_json::from_value(json!({
                            "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                            "metadata": {"name": "kong.v0.10.0", "namespace": "operators"}, "spec": {"displayName": "Kong"},
                        }))
                        .unwrap();
                        let _ = csvs.create(&PostParams::default(), &csv).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    // Applied all at once: the seed's csv-kong verbatim, with the
    // Subscription and Kong Objects around it.
    let sub_kong = object(
        "sub-kong",
        "default",
        json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": "kong", "namespace": "operators"}, "spec": {"channel": "alpha", "name": "kong", "source": "operatorhubio-catalog"}}),
        json!({}),
    );
    let kong = object(
        "kong",
        "default",
        json!({"apiVersion": "charts.konghq.com/v1alpha1", "kind": "Kong", "metadata": {"name": "kong", "namespace": "operators"}, "spec": {"proxy": {"type": "NodePort"}}}),
        json!({"references": [{"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": "csv-kong"}}]}),
    );
    apply_object(&client, kong).await;
    let file = testenv::repo_root().join("examples/seeds/002-object-csv-kong-references.yaml");
    let out = plane
        .control
        .kubectl(&["apply", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    apply_object(&client, sub_kong).await;

    // Install order: the Kong is created only after the CSV exists. Both
    // creations are awaited (their events may arrive in either order), then
    // their revisions compared.
    wait(WAIT, "the Kong and its CSV to be created", || {
        receive(&mut rx, &mut order);
        let created = ["Kong", "ClusterServiceVersion"]
            .iter()
            .all(|k| position(&order, k, "Added").is_some());
        std::future::ready(created.then_some(()).ok_or(format!("{order:?}")))
    })
    .await;
    let (csv_added, kong_added) = (
        position(&order, "ClusterServiceVersion", "Added"),
        position(&order, "Kong", "Added"),
    );
    assert!(
        csv_added.is_some() && csv_added < kong_added,
        "Kong created before its CSV: {order:?}"
    );
    // The CSV's name came through the reference.
    let csv = wait_ready(&client, "csv-kong").await;
    assert_eq!(
        csv.status.unwrap().at_provider.unwrap().manifest.unwrap()["metadata"]["name"],
        "kong.v0.10.0"
    );
    wait_ready(&client, "kong").await;
    let sub = get_object(&client, "sub-kong").await.unwrap();
    assert!(
        sub.finalizers()
            .iter()
            .any(|f| f == "referred-by.kubernetes.crossplane.io/csv-kong"),
        "{:?}",
        sub.finalizers()
    );

    // Deleted all at once: they go in reverse order and nothing is left.
    for name in ["sub-kong", "csv-kong", "kong"] {
        delete_object(&client, name).await;
    }
    wait(
        WAIT,
        "the Kong, its CSV and Subscription to be deleted",
        || {
            receive(&mut rx, &mut order);
            let deleted = ["Kong", "ClusterServiceVersion", "Subscription"]
                .iter()
                .all(|k| position(&order, k, "Deleted").is_some());
            std::future::ready(deleted.then_some(()).ok_or(format!("{order:?}")))
        },
    )
    .await;
    olm.abort();
    watches.abort();
    let gone = [
        position(&order, "Kong", "Deleted"),
        position(&order, "ClusterServiceVersion", "Deleted"),
        position(&order, "Subscription", "Deleted"),
    ];
    assert!(
        gone[0] < gone[1] && gone[1] < gone[2],
        "uninstall order must be Kong, CSV, Subscription: {order:?}"
    );
    for name in ["kong", "csv-kong", "sub-kong"] {
        wait_object_gone(&client, name).await;
    }
}

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
async fn paused_objects_are_left_alone_and_drift_is_put_back() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "drift").await;
    let pc = own_config(&client, "paused").await;
    // A steady Object on the same ProviderConfig: its polls (reads) measure
    // time in poll intervals while the paused one must do nothing.
    let clock = format!("{ns}-clock");
    apply_object(
        &client,
        object(&clock, &pc, configmap("clock", &ns, json!({})), json!({})),
    )
    .await;
    let name = format!("{ns}-drift");
    apply_object(
        &client,
        object(
            &name,
            &pc,
            configmap("cm", &ns, json!({"k": "mine"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &clock).await;
    wait_ready(&client, &name).await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    // Someone edits a field the Object sets: put back, with an event.
    cms.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "theirs"}})),
    )
    .await
    .unwrap();
    wait(WAIT, "the drift to be put back", || async {
        (remote_cm(&remote, &ns, "cm").await?.data?.get("k")? == "mine").then_some(())
    })
    .await;
    // The event follows the write that put the field back.
    e2e::wait_event(&client, None, Some(&name), "DriftCorrected").await;

    // Paused: Synced=False ReconcilePaused, and nothing is done.
    Api::<Object>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"crossplane.io/paused": "true"}}})),
        )
        .await
        .unwrap();
    wait(WAIT, "ReconcilePaused", || async {
        let o = get_object(&client, &name).await?;
        (cond(&o, "Synced")?.1 == "ReconcilePaused").then_some(())
    })
    .await;
    cms.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "paused-edit"}})),
    )
    .await
    .unwrap();
    // Three polls of the clock later, not one write to the target.
    let writes = requests(&pc, &WRITES);
    wait_observations(&pc, observations(&pc), 3).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "a paused Object must not write"
    );
    assert_eq!(
        remote_cm(&remote, &ns, "cm").await.unwrap().data.unwrap()["k"],
        "paused-edit",
        "a paused Object must not act"
    );
    // Deleting while paused does nothing either.
    delete_object(&client, &name).await;
    wait_observations(&pc, observations(&pc), 3).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "a paused Object must not delete"
    );
    assert!(
        get_object(&client, &name).await.is_some(),
        "a paused Object is not finalized"
    );
    // Resuming: the deletion proceeds.
    Api::<Object>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"crossplane.io/paused": null}}})),
        )
        .await
        .unwrap();
    wait_object_gone(&client, &name).await;
    assert!(remote_cm(&remote, &ns, "cm").await.is_none());
    delete_object(&client, &clock).await;
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
async fn a_provider_config_in_use_cannot_be_deleted_until_it_is_not() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "inuse").await;
    let plane = testenv::control_plane();
    let pc = testenv::unique_name("pc");
    let out = plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&format!("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: {pc}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("{ns}-user");
    apply_object(
        &client,
        object(
            &name,
            &pc,
            configmap("cm", &ns, json!({"a": "b"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &name).await;
    let pcs = Api::<ProviderConfig>::all(client.clone());
    pcs.delete(&pc, &DeleteParams::default()).await.unwrap();
    let msg = wait(WAIT, "the ProviderConfig to say who uses it", || async {
        let p = pcs.get_opt(&pc).await.ok()??;
        p.status?
            .conditions
            .iter()
            .find(|c| c.type_ == "InUse")
            .and_then(|c| c.message.clone())
    })
    .await;
    assert!(
        msg.contains(&format!("in use by 1 Objects: Object {name}")),
        "{msg}"
    );
    assert!(
        pcs.get_opt(&pc).await.unwrap().is_some(),
        "deletion refused while in use"
    );
    delete_and_wait_gone(&client, &name).await;
    wait(WAIT, "the ProviderConfig to go once unused", || async {
        pcs.get_opt(&pc).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_input_gets_a_condition_that_says_what_to_fix() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "badobj").await;
    let plane = testenv::control_plane();
    let p = |s: &str| format!("{ns}-{s}");
    apply_object(
        &client,
        object(
            &p("no-kind"),
            "remote",
            json!({"apiVersion": "v1", "metadata": {"name": "x", "namespace": ns}}),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &p("no-apiversion"),
            "remote",
            json!({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}),
            json!({}),
        ),
    )
    .await;
    apply_object(&client, object(&p("unknown-kind"), "remote", json!({"apiVersion": "widgets.example.org/v1", "kind": "Widget", "metadata": {"name": "x", "namespace": ns}}), json!({}))).await;
    apply_object(
        &client,
        object(
            &p("no-config"),
            "does-not-exist",
            configmap("x", &ns, json!({})),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &p("bad-path"),
            "remote",
            configmap("y", &ns, json!({})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "Namespace", "name": "default", "fieldPath": "metadata.name"}, "toFieldPath": "spec..name"}]}),
        ),
    )
    .await;
    let cycle = |me: &str, other: &str| json!({"references": [{"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": other}}], "_": me});
    for (me, other) in [(p("cycle-a"), p("cycle-b")), (p("cycle-b"), p("cycle-a"))] {
        let mut extra = cycle(&me, &other);
        extra.as_object_mut().unwrap().remove("_");
        apply_object(
            &client,
            object(&me, "remote", configmap(&me, &ns, json!({})), extra),
        )
        .await;
    }
    // An unreadable kubeconfig and a target that does not answer: a
    // listener that accepts connections and never says a word (a closed
    // port would fail at once and prove nothing about waiting).
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stalled_addr = stalled.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in stalled.incoming().flatten() {
            held.push(conn);
        }
    });
    let dead = plane.remote.kubeconfig.replace(
        plane
            .remote
            .kubeconfig
            .lines()
            .find(|l| l.trim_start().starts_with("server:"))
            .unwrap(),
        &format!("    server: https://{stalled_addr}"),
    );
    for (secret, content) in [
        (p("garbage"), "not a kubeconfig".to_owned()),
        (p("dead"), dead),
    ] {
        let s: Secret = serde_json::from_value(json!({"metadata": {"name": secret, "namespace": "default"}, "stringData": {"kubeconfig": content}})).unwrap();
        Api::<Secret>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
        let out = plane.control.kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: {secret}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: {secret}, key: kubeconfig}}}}}}\n")),
        );
        assert!(out.status.success());
        apply_object(
            &client,
            object(
                &format!("{secret}-user"),
                &secret,
                configmap("z", &ns, json!({})),
                json!({}),
            ),
        )
        .await;
    }
    let cases = [
        (
            p("no-kind"),
            "spec.forProvider.manifest has no kind: set the kind",
        ),
        (
            p("no-apiversion"),
            "spec.forProvider.manifest has no apiVersion",
        ),
        (
            p("unknown-kind"),
            "does not serve kind Widget in apiVersion widgets.example.org/v1",
        ),
        (p("no-config"), "ProviderConfig does-not-exist not found"),
        (p("bad-path"), "invalid toFieldPath"),
        (p("cycle-a"), "reference cycle:"),
        (
            format!("{}-user", p("garbage")),
            "does not hold a valid kubeconfig",
        ),
        (format!("{}-user", p("dead")), "did not answer"),
    ];
    for (name, needle) in &cases {
        wait_synced_false(&client, name, needle).await;
    }
    // Backoff, not a hot loop: a failing Object is retried a few times.
    let count = |name: String| {
        let client = client.clone();
        async move {
            Api::<Event>::all(client)
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await
                .unwrap()
                .items
                .iter()
                .map(|e| {
                    e.count.unwrap_or(1) + e.series.as_ref().and_then(|s| s.count).unwrap_or(0)
                })
                .sum::<i32>()
        }
    };
    // Time is measured in polls of a healthy Object on a ProviderConfig of
    // its own: six of them (about 6s), where a hot loop would retry
    // hundreds of times.
    let pc = own_config(&client, "badclock").await;
    apply_object(
        &client,
        object(
            &p("clock"),
            &pc,
            configmap("clock", &ns, json!({})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &p("clock")).await;
    let before = count(p("no-kind")).await;
    wait_observations(&pc, observations(&pc), 6).await;
    let after = count(p("no-kind")).await;
    assert!(
        after - before <= 4,
        "retries must back off: {before} -> {after} in six polls of a healthy Object"
    );
    delete_object(&client, &p("clock")).await;
    // The provider is still alive and well.
    let (addr, metrics) = {
        let provider = provider().lock().unwrap();
        (provider.addr, provider.metrics())
    };
    assert!(matches!(e2e::http_get(addr, "/healthz"), Some((200, _))));
    assert!(
        metrics.contains("crossplane_rs_managed_objects{ready="),
        "{metrics}"
    );
    // Bad Objects delete cleanly, and the one whose target does not answer
    // is orphaned after the deletion timeout instead of hanging.
    let dead_user = format!("{}-user", p("dead"));
    let deleted_at = Api::<Object>::all(client.clone())
        .delete(&dead_user, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .and_then(|o| o.metadata.deletion_timestamp)
        .unwrap_or_else(|| panic!("{dead_user} went at once, without its finalizer"))
        .0;
    for (name, _) in &cases {
        delete_object(&client, name).await;
    }
    delete_object(&client, &p("cycle-b")).await;
    for (name, _) in &cases {
        wait_object_gone(&client, name).await;
    }
    let orphaned = events_of(&client, &dead_user)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("ManagedObjectOrphaned"))
        .unwrap_or_else(|| panic!("no ManagedObjectOrphaned event for {dead_user}"));
    let at = orphaned
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or(orphaned.first_timestamp.as_ref().map(|t| t.0))
        .unwrap();
    let after = at.as_millisecond() - deleted_at.as_millisecond();
    // The provider runs with --deletion-timeout 10s.
    assert!(
        after >= 10_000,
        "orphaned {after} ms after the deletion, before --deletion-timeout (10s): {orphaned:?}"
    );
}

#[tokio::test]
async fn external_name_is_honoured_and_a_deleted_usage_does_not_block_deletion() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "extname").await;
    let name = format!("{ns}-external");
    let mut body = object(
        &name,
        "remote",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns}, "data": {"a": "b"}}),
        json!({}),
    );
    body["metadata"]["annotations"] = json!({"crossplane.io/external-name": "called-this"});
    apply_object(&client, body).await;
    let o = wait_ready(&client, &name).await;
    assert!(
        remote_cm(&remote, &ns, "called-this").await.is_some(),
        "the managed object carries the external name"
    );
    assert!(remote_cm(&remote, &ns, &name).await.is_none());
    // The Object's use of its ProviderConfig is recorded on the Object
    // itself (a label, no usage record of its own to delete): the config
    // cannot be deleted while the Object uses it, says by whom, and does
    // not block the Object's deletion.
    assert_eq!(
        o.labels().get("kubernetes.crossplane.io/provider-config"),
        Some(&"remote".to_owned())
    );
    let pc = testenv::unique_name("extpc");
    remote_config(&pc);
    let mut moved = object(
        &name,
        &pc,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns}, "data": {"a": "b"}}),
        json!({}),
    );
    moved["metadata"]["annotations"] = json!({"crossplane.io/external-name": "called-this"});
    apply_object(&client, moved).await;
    let pcs = Api::<ProviderConfig>::all(client.clone());
    wait(WAIT, "the config to count its user", || async {
        (pcs.get_opt(&pc).await.ok()??.status?.users? == 1).then_some(())
    })
    .await;
    pcs.delete(&pc, &DeleteParams::default()).await.unwrap();
    let msg = wait(WAIT, "the config to say who uses it", || async {
        let p = pcs.get_opt(&pc).await.ok()??;
        p.status?
            .conditions
            .iter()
            .find(|c| c.type_ == "InUse")
            .and_then(|c| c.message.clone())
    })
    .await;
    assert!(msg.contains(&format!("Object {name}")), "{msg}");
    delete_and_wait_gone(&client, &name).await;
    assert!(remote_cm(&remote, &ns, "called-this").await.is_none());
    wait(WAIT, "the config to go once unused", || async {
        pcs.get_opt(&pc).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A ConfigMap in the control cluster's `default` namespace, named uniquely.
async fn local_cm(client: &Client, prefix: &str, data: Value) -> String {
    let name = testenv::unique_name(prefix);
    let cm: ConfigMap = serde_json::from_value(configmap(&name, "default", data)).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn a_string_written_over_the_manifest_metadata_is_refused_and_the_provider_keeps_working() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "metastr").await;
    let pid = provider().lock().unwrap().child.id();
    let source = local_cm(&client, "meta", json!({"meta": "not-an-object"})).await;
    let bad = format!("{ns}-bad");
    apply_object(
        &client,
        object(
            &bad,
            "remote",
            configmap("x", &ns, json!({})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": source, "namespace": "default", "fieldPath": "data.meta"}, "toFieldPath": "spec.forProvider.manifest.metadata"}]}),
        ),
    )
    .await;
    let msg = wait_synced_false(&client, &bad, "spec.forProvider.manifest.metadata").await;
    assert!(msg.contains("is not an object"), "{msg}");
    // Still the same, healthy process, and it keeps reconciling: an Object
    // created afterwards becomes Ready.
    let good = format!("{ns}-good");
    apply_object(
        &client,
        object(
            &good,
            "remote",
            configmap("y", &ns, json!({"a": "b"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &good).await;
    {
        let mut p = provider().lock().unwrap();
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "the provider exited: {}",
            p.log()
        );
        assert_eq!(p.child.id(), pid, "the provider was restarted");
        assert!(matches!(e2e::http_get(p.addr, "/healthz"), Some((200, _))));
        assert!(!p.log().contains("panicked"), "{}", p.log());
    }
    for name in [&bad, &good] {
        delete_and_wait_gone(&client, name).await;
    }
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

/// A ProviderConfig for the remote cluster (the shared kubeconfig Secret).
fn remote_config(name: &str) {
    let out = testenv::control_plane().control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&format!("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: {name}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_usage_follows_the_provider_config_ref_both_ways() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "switch").await;
    let (a, b) = (testenv::unique_name("pca"), testenv::unique_name("pcb"));
    remote_config(&a);
    remote_config(&b);
    let pcs = Api::<ProviderConfig>::all(client.clone());
    let name = format!("{ns}-user");
    let on = |config: &str| {
        object(
            &name,
            config,
            configmap("cm", &ns, json!({"a": "b"})),
            json!({}),
        )
    };
    let users = |config: String| {
        let pcs = pcs.clone();
        async move { pcs.get_opt(&config).await.ok()??.status?.users }
    };
    let refused = |config: String| {
        let pcs = pcs.clone();
        let name = name.clone();
        async move {
            let msg = wait(
                WAIT,
                &format!("{config} to refuse its deletion"),
                || async {
                    let p = pcs.get_opt(&config).await.ok()??;
                    p.status?
                        .conditions
                        .iter()
                        .find(|c| c.type_ == "InUse")
                        .and_then(|c| c.message.clone())
                },
            )
            .await;
            assert!(msg.contains(&format!("Object {name}")), "{msg}");
            assert!(pcs.get_opt(&config).await.unwrap().is_some());
        }
    };
    let gone = |config: String| {
        let pcs = pcs.clone();
        async move {
            wait(WAIT, &format!("{config} to go once unused"), || async {
                pcs.get_opt(&config).await.ok()?.is_none().then_some(())
            })
            .await;
        }
    };
    apply_object(&client, on(&a)).await;
    wait_ready(&client, &name).await;
    wait(WAIT, "A to count its user", || async {
        (users(a.clone()).await? == 1).then_some(())
    })
    .await;

    // A → B: B is protected, A is free to go.
    apply_object(&client, on(&b)).await;
    wait(WAIT, "B to count its user", || async {
        (users(b.clone()).await? == 1).then_some(())
    })
    .await;
    pcs.delete(&b, &DeleteParams::default()).await.unwrap();
    refused(b.clone()).await;
    pcs.delete(&a, &DeleteParams::default()).await.unwrap();
    gone(a.clone()).await;

    // B → A (made again): A is protected, B (deleting) goes.
    remote_config(&a);
    apply_object(&client, on(&a)).await;
    wait(WAIT, "A to count its user", || async {
        (users(a.clone()).await? == 1).then_some(())
    })
    .await;
    gone(b.clone()).await;
    pcs.delete(&a, &DeleteParams::default()).await.unwrap();
    refused(a.clone()).await;

    delete_and_wait_gone(&client, &name).await;
    gone(a.clone()).await;
}

#[tokio::test]
async fn normalised_values_are_not_drift_and_real_edits_are_put_back() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "normal").await;
    let pc = own_config(&client, "normal").await;
    let secret = format!("{ns}-secret");
    let deployment = format!("{ns}-deployment");
    apply_object(
        &client,
        object(
            &secret,
            &pc,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "stringData": {"password": "pa55word"}}),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &deployment,
            &pc,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "namespace": ns},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "d"}},
                    "template": {
                        "metadata": {"labels": {"app": "d"}},
                        "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1", "resources": {"requests": {"cpu": 0.5}}}]},
                    },
                },
            }),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &secret).await;
    wait_ready(&client, &deployment).await;
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(remote.clone(), &ns);
    let cpu = || async {
        deployments
            .get("d")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap()["cpu"]
            .0
            .clone()
    };
    assert_eq!(
        cpu().await,
        "500m",
        "the API server normalises the quantity"
    );

    // Three polls of each Object: reads, and not one write.
    let writes = requests(&pc, &WRITES);
    wait_observations(&pc, observations(&pc), 6).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "an unchanged managed object was written again"
    );
    for name in [&secret, &deployment] {
        assert!(
            !events_of(&client, name)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("DriftCorrected")),
            "{name}: DriftCorrected without drift"
        );
    }

    // A real edit by another field manager is put back, with an event.
    let intruder = PatchParams {
        field_manager: Some("intruder".to_owned()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "d",
            &intruder,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}}}})),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(remote.clone(), &ns)
        .patch(
            "s",
            &intruder,
            &Patch::Merge(json!({"data": {"password": "dGhlaXJz"}})),
        )
        .await
        .unwrap();
    wait(WAIT, "the cpu request to be put back", || async {
        (cpu().await == "500m").then_some(())
    })
    .await;
    wait(WAIT, "the Secret's value to be put back", || async {
        let s = Api::<Secret>::namespaced(remote.clone(), &ns)
            .get("s")
            .await
            .ok()?;
        (s.data?.get("password")?.0 == b"pa55word").then_some(())
    })
    .await;
    for name in [&secret, &deployment] {
        wait(WAIT, &format!("{name}: a DriftCorrected event"), || async {
            events_of(&client, name)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("DriftCorrected"))
                .then_some(())
        })
        .await;
    }
    for name in [&secret, &deployment] {
        delete_and_wait_gone(&client, name).await;
    }
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
