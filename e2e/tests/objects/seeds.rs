//! The seed's Objects as written: the sample namespace in both clusters, and the Subscription/CSV/Kong chain in order.

use super::*;

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
    // kubectl prefers v1alpha2 and shows upstream's columns; v1alpha1
    // shows the design's.
    let header = |resource: &str| {
        let out = plane
            .control
            .kubectl(&["get", resource, "sample-namespace"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = text.lines().next().unwrap_or_default().to_owned();
        first
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        header("object"),
        ["NAME", "KIND", "PROVIDERCONFIG", "SYNCED", "READY", "AGE"]
    );
    assert_eq!(
        header("objects.v1alpha1.kubernetes.crossplane.io"),
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
    let out = plane
        .control
        .kubectl(&["get", "object", "sample-namespace"]);
    let text = String::from_utf8_lossy(&out.stdout);
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
    // Nothing existed when the watches started (asserted above): an object
    // a watch lists again after a restart (`existed`) was created since,
    // and its revision still orders it.
    let created = |order: &[(&str, &str, u64)], kind: &str| {
        [
            position(order, kind, "Added"),
            position(order, kind, "existed"),
        ]
        .into_iter()
        .flatten()
        .min()
    };
    wait(WAIT, "the Kong and its CSV to be created", || {
        receive(&mut rx, &mut order);
        let both = ["Kong", "ClusterServiceVersion"]
            .iter()
            .all(|k| created(&order, k).is_some());
        std::future::ready(both.then_some(()).ok_or(format!("{order:?}")))
    })
    .await;
    let (csv_added, kong_added) = (
        created(&order, "ClusterServiceVersion"),
        created(&order, "Kong"),
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
