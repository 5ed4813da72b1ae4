//! Helpers for the Object tests (seeds 002 and 003): one object-provider per
//! test binary, running as its shipped ServiceAccount with the ProviderConfigs
//! the file asks for, and Objects applied, read, waited for and deleted.

use std::{
    sync::{Mutex, OnceLock},
    time::Duration,
};

use crate::{Running, wait, wait_blocking};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::{Object, ProviderConfig};

/// A fresh namespace in the remote cluster.
pub use crate::workloads::remote_ns;

/// How long an Object test waits for a state.
pub const WAIT: Duration = Duration::from_secs(60);

/// The verbs that change something.
pub const WRITES: [&str; 4] = ["create", "update", "patch", "delete"];

/// The verbs other than list and watch: what an Object costs beyond the
/// open watches.
pub const BEYOND_WATCHES: [&str; 5] = ["get", "create", "update", "patch", "delete"];

/// How a test binary's object-provider is started.
pub struct ProviderSetup {
    /// ProviderConfigs (YAML documents) applied to the control cluster
    /// before the provider starts, beside the Secret `remote-kubeconfig`
    /// (key `kubeconfig`: the remote cluster's kubeconfig) in `default`.
    pub configs: &'static str,
    /// Runs once after the ProviderConfigs are applied and before the
    /// provider starts: what else the file's tests need in place.
    pub prepare: fn(),
    /// The provider's flags (beside `--metrics-addr`).
    pub args: &'static [&'static str],
}

static PROVIDER: OnceLock<Mutex<Running>> = OnceLock::new();

/// The one object-provider of this test binary (Objects are cluster-scoped),
/// started as `setup` says by the first call, as its shipped ServiceAccount
/// (deploy/), and healthy.
pub fn start_provider(setup: &ProviderSetup) -> &'static Mutex<Running> {
    PROVIDER.get_or_init(|| {
        let plane = testenv::control_plane();
        let control = &plane.control;
        let secret = control.kubectl_stdin(
            &[
                "-n",
                "default",
                "create",
                "secret",
                "generic",
                "remote-kubeconfig",
                "--from-file=kubeconfig=/dev/stdin",
                "--dry-run=client",
                "-o",
                "yaml",
            ],
            Some(&plane.remote.kubeconfig),
        );
        let out = control.kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&String::from_utf8_lossy(&secret.stdout)),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(setup.configs));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (setup.prepare)();
        let as_its_service_account = crate::workloads::impersonating_kubeconfig("object-provider");
        let running = Running::start("object-provider", &as_its_service_account, setup.args);
        wait_blocking(
            Duration::from_secs(30),
            "the object-provider to be ready (its conversion webhook serving)",
            || match crate::http_get(running.addr, "/readyz") {
                Some((200, _)) => Ok(()),
                other => Err(format!("/readyz answered {other:?}")),
            },
            || format!("its log:\n{}", running.log()),
        );
        running.wait_converting(Duration::from_secs(30));
        Mutex::new(running)
    })
}

/// The object-provider of this test binary, once `start_provider` (or
/// `clients`) has started it.
pub fn provider() -> &'static Mutex<Running> {
    PROVIDER
        .get()
        .expect("the object-provider is started by clients() first")
}

/// Prints the provider's log when the test it lives in fails.
pub struct DumpOnPanic;

impl Drop for DumpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(Ok(p)) = PROVIDER.get().map(Mutex::lock)
        {
            eprintln!("----- object-provider log -----\n{}", p.log());
        }
    }
}

/// Starts the provider as `setup` says (once) and answers admin clients for
/// the control and the remote cluster.
pub async fn clients(setup: &ProviderSetup) -> (Client, Client) {
    start_provider(setup);
    let plane = testenv::control_plane();
    (plane.control.client().await, plane.remote.client().await)
}

/// The start of most Object tests: the provider started as `setup` says
/// (once), admin clients for the control and the remote cluster, a guard that
/// prints the provider's log if the test fails, and a fresh namespace in the
/// remote cluster named after `prefix`.
pub async fn begin(setup: &ProviderSetup, prefix: &str) -> (Client, Client, DumpOnPanic, String) {
    let (client, remote) = clients(setup).await;
    let dump = DumpOnPanic;
    let ns = remote_ns(&remote, prefix).await;
    (client, remote, dump, ns)
}

/// An Object `name` managing `manifest` through the ProviderConfig
/// `config`, with the fields of `extra` added to its spec.
pub fn object(name: &str, config: &str, manifest: Value, extra: Value) -> Value {
    let mut spec =
        json!({"forProvider": {"manifest": manifest}, "providerConfigRef": {"name": config}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "metadata": {"name": name}, "spec": spec})
}

/// A ConfigMap manifest.
pub fn configmap(name: &str, ns: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

/// Server-side applies the Object `body` as the test's own field manager.
pub async fn apply_object(client: &Client, body: Value) {
    Api::<Object>::all(client.clone())
        .patch(
            body["metadata"]["name"].as_str().unwrap(),
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Object: {e}"));
}

/// Objects at `version` (`v1alpha1` or `v1alpha2`), for a dynamic Api.
pub fn at_version(version: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "kubernetes.crossplane.io".into(),
        version: version.into(),
        api_version: format!("kubernetes.crossplane.io/{version}"),
        kind: "Object".into(),
        plural: "objects".into(),
    }
}

/// Server-side applies the Object `body` (written at v1alpha1, as
/// [`object`] makes it, or at v1alpha2) at v1alpha2, the stored version:
/// no conversion webhook is called.
pub async fn apply_object_v1alpha2(client: &Client, body: Value) {
    let to = types::kubernetes::conversion::Version::V1alpha2.api_version();
    let body = types::kubernetes::conversion::convert(&body, to)
        .expect("a kubernetes.crossplane.io Object");
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Api::<types::kubernetes::v1alpha2::Object>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Object {name} at v1alpha2: {e}"));
}

/// Reads an Object.
pub async fn get_object(client: &Client, name: &str) -> Option<Object> {
    Api::<Object>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

/// The condition `t` of an Object: (status, reason, message).
pub fn cond(o: &Object, t: &str) -> Option<(String, String, String)> {
    condition_in(&o.status.as_ref()?.conditions, t)
}

/// The condition `t` among `conditions`: (status, reason, message).
pub fn condition_in(
    conditions: &[types::common::Condition],
    t: &str,
) -> Option<(String, String, String)> {
    conditions.iter().find(|c| c.type_ == t).map(|c| {
        (
            c.status.clone(),
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    })
}

/// Waits until the Object is Synced and Ready; fails with its last status.
pub async fn wait_ready(client: &Client, name: &str) -> Object {
    wait(
        WAIT,
        &format!("Object {name} to be Synced and Ready"),
        || async {
            let o = get_object(client, name)
                .await
                .ok_or_else(|| "no such Object".to_owned())?;
            if cond(&o, "Synced").is_some_and(|c| c.0 == "True")
                && cond(&o, "Ready").is_some_and(|c| c.0 == "True")
            {
                Ok(o)
            } else {
                Err(format!("status {:?}", o.status))
            }
        },
    )
    .await
}

/// Asks for the Object's deletion (whether or not it exists).
pub async fn delete_object(client: &Client, name: &str) {
    let _ = Api::<Object>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Waits until the Object is gone.
pub async fn wait_object_gone(client: &Client, name: &str) {
    wait(WAIT, &format!("Object {name} to be gone"), || async {
        get_object(client, name).await.is_none().then_some(())
    })
    .await;
}

/// Deletes the Object and waits until it is gone.
pub async fn delete_and_wait_gone(client: &Client, name: &str) {
    delete_object(client, name).await;
    wait_object_gone(client, name).await;
}

/// The sum of the provider's metric `name` over the series that carry every
/// label of `labels`.
pub fn metric(name: &str, labels: &[(&str, &str)]) -> u64 {
    let text = provider().lock().unwrap().metrics();
    crate::metric_sum(&text, name, labels) as u64
}

/// Requests the provider sent to `cluster` with one of `verbs`.
pub fn requests(cluster: &str, verbs: &[&str]) -> u64 {
    verbs
        .iter()
        .map(|v| {
            metric(
                "crossplane_rs_kube_api_requests_total",
                &[("cluster", cluster), ("verb", v)],
            )
        })
        .sum()
}

/// Observations of managed objects in `cluster` (from the watch cache or
/// the server): each poll or wake of an Object observes once.
pub fn observations(cluster: &str) -> u64 {
    metric(
        "crossplane_rs_remote_observations_total",
        &[("controller", "object"), ("cluster", cluster)],
    )
}

/// A ProviderConfig for the remote cluster whose kubeconfig Secret is its
/// own: the provider builds it a client of its own, so that the
/// `cluster="<its name>"` series (requests, observations) count exactly
/// those of the Objects that use it, whatever other tests do.
pub async fn own_config(client: &Client, prefix: &str) -> String {
    own_config_with(client, prefix, &testenv::control_plane().remote.kubeconfig).await
}

/// Like [`own_config`], with the Secret holding `kubeconfig` (the remote
/// cluster as a pod reaches it, say).
pub async fn own_config_with(client: &Client, prefix: &str, kubeconfig: &str) -> String {
    let name = testenv::unique_name(prefix);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "stringData": {"kubeconfig": kubeconfig},
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
