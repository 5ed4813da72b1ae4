//! The object-provider is event-driven: with no --poll-interval configured
//! (the 10-minute default safety resync), a remote change, a drift edit and
//! a change to a referenced ConfigMap reach the Object or its managed object
//! within 2 s, and an idle Object costs no request.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use e2e::{objects::*, wait};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::Object;

/// The latency target for every event this file exercises.
const TARGET: Duration = Duration::from_secs(2);

/// This file's object-provider: as its shipped ServiceAccount, with no
/// --poll-interval (the 10m default), and the ProviderConfig `remote` (the
/// remote cluster's kubeconfig).
const PROVIDER: ProviderSetup = ProviderSetup {
    configs: r#"
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: remote}
spec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}
"#,
    prepare: || {},
    args: &[],
};

/// A value of the managed object, as the Object's status shows it.
fn shown(o: &Object, pointer: &str) -> Option<Value> {
    let manifest = o.status.as_ref()?.at_provider.as_ref()?.manifest.as_ref()?;
    manifest.pointer(pointer).cloned()
}

/// Watches the object `name` of `api` and answers the instant its watch
/// first delivers a version for which `wanted` holds (timestamps from a
/// watch, not from polling). Returns once the watch has listed, so that
/// nothing done afterwards is missed.
async fn watch_until<K>(
    api: Api<K>,
    name: &str,
    mut wanted: impl FnMut(&K) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Instant>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let name = name.to_owned();
    let handle = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) if wanted(&o) => {
                    return Instant::now();
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(l) = listed.take() {
                        let _ = l.send(());
                    }
                }
                _ => {}
            }
        }
        panic!("the watch of {name} ended");
    });
    let _ = tokio::time::timeout(WAIT, is_listed).await;
    handle
}

fn data_is(cm: &ConfigMap, key: &str, value: &str) -> bool {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .is_some_and(|v| v == value)
}

/// Edits a remote ConfigMap as another field manager would.
async fn edit(remote: &Client, ns: &str, name: &str, patch: Value) {
    Api::<ConfigMap>::namespaced(remote.clone(), ns)
        .patch(
            name,
            &PatchParams {
                field_manager: Some("someone-else".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(patch),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_remote_label_change_reaches_the_objects_status_within_two_seconds() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "ev-status").await;
    let name = format!("{ns}-cm");
    let manifest = configmap("cm", &ns, json!({"k": "v"}));
    apply_object(&client, object(&name, "remote", manifest, json!({}))).await;
    wait_ready(&client, &name).await;

    let labelled =
        |o: &Object| shown(o, "/metadata/labels/seen-by").is_some_and(|v| v == "someone-else");
    let shown_at = watch_until(Api::<Object>::all(client.clone()), &name, labelled).await;
    let start = Instant::now();
    edit(
        &remote,
        &ns,
        "cm",
        json!({"metadata": {"labels": {"seen-by": "someone-else"}}}),
    )
    .await;
    let shown_at = tokio::time::timeout(WAIT, shown_at).await.unwrap().unwrap();
    let took = shown_at.duration_since(start);
    eprintln!("a remote label change reached status.atProvider.manifest after {took:?}");
    assert!(
        took < TARGET,
        "a remote label change reached status.atProvider.manifest after {took:?} (target {TARGET:?})"
    );
    let o = get_object(&client, &name).await.unwrap();
    assert_eq!(shown(&o, "/data/k"), Some(json!("v")));
    delete_and_wait_gone(&client, &name).await;
}

#[tokio::test]
async fn a_drift_edit_by_another_field_manager_is_put_back_within_two_seconds() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "ev-drift").await;
    let name = format!("{ns}-cm");
    let manifest = configmap("cm", &ns, json!({"k": "v"}));
    apply_object(&client, object(&name, "remote", manifest, json!({}))).await;
    wait_ready(&client, &name).await;

    // One watch, listed before the edit, sees the edit and then the
    // revert, however fast.
    let seen = std::sync::Arc::new(Mutex::new(None::<Instant>));
    let drift_seen = seen.clone();
    let back = watch_until(
        Api::namespaced(remote.clone(), &ns),
        "cm",
        move |cm: &ConfigMap| {
            let mut drifted = drift_seen.lock().unwrap();
            if data_is(cm, "k", "drift") && drifted.is_none() {
                *drifted = Some(Instant::now());
            }
            drifted.is_some() && data_is(cm, "k", "v")
        },
    )
    .await;
    edit(&remote, &ns, "cm", json!({"data": {"k": "drift"}})).await;
    let back = tokio::time::timeout(WAIT, back).await.unwrap().unwrap();
    let drifted = seen.lock().unwrap().expect("the drift edit was watched");
    let took = back.duration_since(drifted);
    eprintln!("a drift edit was put back after {took:?}");
    assert!(
        took < TARGET,
        "a drift edit was put back after {took:?} (target {TARGET:?})"
    );
    delete_and_wait_gone(&client, &name).await;
}

#[tokio::test]
async fn a_referenced_configmaps_change_reaches_the_managed_object_within_two_seconds() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "ev-ref").await;
    let source = testenv::unique_name("ev-source");
    let sources: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let body: ConfigMap =
        serde_json::from_value(configmap(&source, "default", json!({"v": "1"}))).unwrap();
    sources.create(&PostParams::default(), &body).await.unwrap();
    let name = format!("{ns}-copy");
    let reference = json!({"references": [{
        "fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": source, "namespace": "default", "fieldPath": "data.v"},
        "toFieldPath": "spec.forProvider.manifest.data.v",
    }]});
    let manifest = configmap("copy", &ns, json!({}));
    apply_object(&client, object(&name, "remote", manifest, reference)).await;
    wait_ready(&client, &name).await;

    let followed = watch_until(
        Api::namespaced(remote.clone(), &ns),
        "copy",
        |cm: &ConfigMap| data_is(cm, "v", "2"),
    )
    .await;
    let start = Instant::now();
    sources
        .patch(
            &source,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    let followed = tokio::time::timeout(WAIT, followed).await.unwrap().unwrap();
    let took = followed.duration_since(start);
    eprintln!("a referenced ConfigMap's change reached the managed object after {took:?}");
    assert!(
        took < TARGET,
        "a referenced ConfigMap's change reached the managed object after {took:?} (target {TARGET:?})"
    );
    delete_and_wait_gone(&client, &name).await;
    sources
        .delete(&source, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_idle_object_costs_no_request_even_when_woken() {
    let (client, remote) = clients(&PROVIDER).await;
    let _dump = DumpOnPanic;
    let pc = own_config(&client, "ev-idle").await;
    let ns = remote_ns(&remote, "ev-idle").await;
    let names: Vec<String> = (0..5).map(|i| format!("{ns}-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let manifest = configmap(&format!("cm-{i}"), &ns, json!({"k": "v"}));
        apply_object(&client, object(name, &pc, manifest, json!({}))).await;
    }
    for name in &names {
        wait_ready(&client, name).await;
    }
    let requests_before = requests(&pc, &BEYOND_WATCHES);
    let observed_before = observations(&pc);

    // Wake every Object without changing what it manages: an annotation of
    // no meaning to the provider. Each wake observes the managed object once
    // (the clock), and must cost no request: no read of the target (served
    // from the watch), no apply, no status write, no finalizer patch.
    let objects: Api<Object> = Api::all(client.clone());
    let mut poked = Vec::new();
    for name in &names {
        let patch = json!({"metadata": {"annotations": {"e2e.crossplane.io/poke": "1"}}});
        let o = objects
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        poked.push(o.resource_version());
    }
    let n = names.len() as u64;
    wait(
        WAIT,
        &format!("{n} observations of cluster {pc}"),
        || async { (observations(&pc) >= observed_before + n).then_some(()) },
    )
    .await;
    assert_eq!(
        requests(&pc, &BEYOND_WATCHES),
        requests_before,
        "woken idle Objects sent requests to their target"
    );
    for (name, rv) in names.iter().zip(&poked) {
        let o = get_object(&client, name).await.unwrap();
        assert_eq!(
            &o.resource_version(),
            rv,
            "Object {name} was written by a wake that changed nothing"
        );
    }
    for name in &names {
        delete_and_wait_gone(&client, name).await;
    }
}
