//! The object-provider is event-driven: with no --poll-interval configured
//! (the 10-minute default safety resync), a remote change, a drift edit and
//! a change to a referenced ConfigMap reach the Object or its managed object
//! within 2 s, and an idle Object costs no request.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use e2e::{Running, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::{Object, ProviderConfig};

const WAIT: Duration = Duration::from_secs(60);
/// The latency target of issue 8 for every event this file exercises.
const TARGET: Duration = Duration::from_secs(2);

/// One object-provider for this test binary, as its shipped ServiceAccount,
/// with no --poll-interval (the 10m default), and the ProviderConfig
/// `remote` (the remote cluster's kubeconfig).
fn provider() -> &'static Mutex<Running> {
    static PROVIDER: OnceLock<Mutex<Running>> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        let plane = testenv::control_plane();
        let control = &plane.control;
        let secret = control.kubectl_stdin(
            &["-n", "default", "create", "secret", "generic", "remote-kubeconfig", "--from-file=kubeconfig=/dev/stdin", "--dry-run=client", "-o", "yaml"],
            Some(&plane.remote.kubeconfig),
        );
        let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&String::from_utf8_lossy(&secret.stdout)));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let config = r#"
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: remote}
spec: {credentials: {source: Secret, secretRef: {namespace: default, name: remote-kubeconfig, key: kubeconfig}}}
"#;
        let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(config));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let as_its_service_account = e2e::workloads::impersonating_kubeconfig("object-provider");
        let running = Running::start("object-provider", &as_its_service_account, &[]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(e2e::http_get(running.addr, "/healthz"), Some((200, _))) {
            assert!(Instant::now() < deadline, "object-provider not healthy: {}", running.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        Mutex::new(running)
    })
}

/// Prints the provider's log when the test it lives in fails.
struct DumpOnPanic;

impl Drop for DumpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(p) = provider().lock()
        {
            eprintln!("----- object-provider log -----\n{}", p.log());
        }
    }
}

async fn clients() -> (Client, Client) {
    provider();
    let plane = testenv::control_plane();
    (plane.control.client().await, plane.remote.client().await)
}

fn object(name: &str, config: &str, manifest: Value, extra: Value) -> Value {
    let mut spec =
        json!({"forProvider": {"manifest": manifest}, "providerConfigRef": {"name": config}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "metadata": {"name": name}, "spec": spec})
}

fn configmap(name: &str, ns: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

async fn apply_object(client: &Client, body: Value) {
    Api::<Object>::all(client.clone())
        .patch(
            body["metadata"]["name"].as_str().unwrap(),
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Object: {e}"));
}

async fn get_object(client: &Client, name: &str) -> Option<Object> {
    Api::<Object>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

fn condition_true(o: &Object, t: &str) -> bool {
    o.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    })
}

async fn wait_ready(client: &Client, name: &str) -> Object {
    wait_for(WAIT, &format!("Object {name} Synced and Ready"), || async {
        let o = get_object(client, name).await?;
        (condition_true(&o, "Synced") && condition_true(&o, "Ready")).then_some(o)
    })
    .await
}

async fn delete_and_wait_gone(client: &Client, name: &str) {
    let _ = Api::<Object>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    wait_for(WAIT, &format!("Object {name} to be gone"), || async {
        get_object(client, name).await.is_none().then_some(())
    })
    .await;
}

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

async fn remote_ns(remote: &Client, prefix: &str) -> String {
    testenv::control_plane()
        .remote
        .namespace(remote, prefix)
        .await
}

/// The sum of the provider's metric `name` over the series that carry every
/// label of `labels`.
fn metric(name: &str, labels: &[(&str, &str)]) -> u64 {
    let text = provider().lock().unwrap().metrics();
    e2e::metric_sum(&text, name, labels) as u64
}

/// Requests the provider sent to `cluster` other than its watches (list and
/// watch): what an Object costs beyond the open watches.
fn requests(cluster: &str) -> u64 {
    ["get", "create", "update", "patch", "delete"]
        .iter()
        .map(|v| {
            metric(
                "crossplane_rs_kube_api_requests_total",
                &[("cluster", cluster), ("verb", v)],
            )
        })
        .sum()
}

/// Observations of managed objects in `cluster` (cache or server).
fn observations(cluster: &str) -> u64 {
    metric(
        "crossplane_rs_remote_observations_total",
        &[("controller", "object"), ("cluster", cluster)],
    )
}

#[tokio::test]
async fn a_remote_label_change_reaches_the_objects_status_within_two_seconds() {
    let (client, remote) = clients().await;
    let _dump = DumpOnPanic;
    let ns = remote_ns(&remote, "ev-status").await;
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
    let (client, remote) = clients().await;
    let _dump = DumpOnPanic;
    let ns = remote_ns(&remote, "ev-drift").await;
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
    let (client, remote) = clients().await;
    let _dump = DumpOnPanic;
    let ns = remote_ns(&remote, "ev-ref").await;
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

/// A ProviderConfig for the remote cluster whose kubeconfig Secret is its
/// own: the provider builds it a client of its own, so that the
/// `cluster="<its name>"` series count exactly the requests and
/// observations of the Objects that use it.
async fn own_config(client: &Client, prefix: &str) -> String {
    let name = testenv::unique_name(prefix);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "stringData": {"kubeconfig": testenv::control_plane().remote.kubeconfig},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let pc: ProviderConfig = serde_json::from_value(json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": name},
        "spec": {"credentials": {"source": "Secret", "secretRef": {"namespace": "default", "name": name, "key": "kubeconfig"}}},
    }))
    .unwrap();
    Api::<ProviderConfig>::all(client.clone())
        .create(&PostParams::default(), &pc)
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn an_idle_object_costs_no_request_even_when_woken() {
    let (client, remote) = clients().await;
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
    let requests_before = requests(&pc);
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
    wait_for(
        WAIT,
        &format!("{n} observations of cluster {pc}"),
        || async { (observations(&pc) >= observed_before + n).then_some(()) },
    )
    .await;
    assert_eq!(
        requests(&pc),
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
