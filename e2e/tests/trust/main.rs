//! Credentials from Secrets are data: a kubeconfig in
//! a KubernetesCluster's or ProviderConfig's Secret never makes a controller
//! run a command, read a file, use a proxy or skip TLS verification, never
//! has its content repeated in a status, event or log, and two clusters that
//! read different keys of one Secret each get their own client.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod kubeconfigs;
mod secrets;

use e2e::{Running, wait, workloads::*};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Event, Namespace, Secret},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PostParams},
};
use serde_json::{Value, json};
use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use types::{
    compute::v1alpha1::KubernetesCluster, kubernetes::v1alpha1::Object,
    workload::v1alpha1::KubernetesApplicationResource,
};

// ---------------------------------------------------------------------------
// Controllers

/// Workload binaries watching one namespace; their logs are printed when the
/// test fails.
struct Binaries(Vec<Running>);

impl Binaries {
    /// Starts each of `names` (workload binaries, as their deploy/ service
    /// accounts) watching `ns`, with `extra` flags.
    async fn start(names: &[&str], ns: &str, extra: &[&str]) -> Self {
        let mut all = Vec::new();
        for name in names {
            let kubeconfig = impersonating_kubeconfig(name);
            let mut args = vec!["--watch-namespace", ns, "--poll-interval", "1s"];
            args.extend(extra);
            all.push(Running::start(name, &kubeconfig, &args));
        }
        for r in &mut all {
            r.wait_healthy(Duration::from_secs(30)).await;
        }
        Self(all)
    }

    fn get(&self, name: &str) -> &Running {
        self.0.iter().find(|r| r.name == name).unwrap()
    }

    fn logs(&self) -> String {
        self.0
            .iter()
            .map(Running::log)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Binaries {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for r in &self.0 {
                eprintln!("----- {} log -----\n{}", r.name, r.log());
            }
        }
    }
}

/// Waits until `controller` in `binary` has finished `n` more reconciles
/// than it had when called: proof that it looked again, not a sleep.
async fn more_reconciles(binary: &Running, controller: &str, n: u64) {
    let start = binary.reconciles(controller);
    wait(
        WAIT,
        &format!("{n} more {controller} reconciles in {}", binary.name),
        || async { (binary.reconciles(controller) >= start + n as f64).then_some(()) },
    )
    .await;
}

/// A kubeconfig with one cluster, one user and one context, as JSON (which
/// is YAML): `cluster` and `user` are the inner mappings.
fn kubeconfig(cluster: Value, user: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    })
    .to_string()
}

/// Creates a Secret whose keys hold `data`.
async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "stringData": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A KubernetesCluster reading `key` of Secret `secret`.
async fn kubernetes_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    secret: &str,
    key: &str,
    labels: Value,
) {
    let kc = json!({
        "apiVersion": "compute.crossplane.io/v1alpha1",
        "kind": "KubernetesCluster",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"connectionSecretRef": {"name": secret, "key": key}},
    });
    apply_json(client, ns, "kubernetesclusters", &kc).await;
}

/// A cluster `name` whose Secret `<name>-kubeconfig` holds `kubeconfig`.
async fn cluster_with(client: &Client, ns: &str, name: &str, kubeconfig: &str) {
    let secret_name = format!("{name}-kubeconfig");
    secret(client, ns, &secret_name, &[("kubeconfig", kubeconfig)]).await;
    kubernetes_cluster(client, ns, name, &secret_name, "kubeconfig", json!({})).await;
}

/// A KubernetesApplicationResource already scheduled to `cluster`, as the
/// application-controller would make it: the resource-controller connects to
/// the cluster for it.
async fn scheduled_resource(client: &Client, ns: &str, name: &str, cluster: &str) {
    let body = json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplicationResource",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "clusterRef": {"name": cluster},
            "template": {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default"}, "data": {"a": "b"}},
        },
    });
    apply_json(client, ns, "kubernetesapplicationresources", &body).await;
}

use e2e::workloads::cluster_ready;

/// What must never be seen while waiting, given a condition's status and
/// message: Some(why the test fails at once).
trait Never: Fn(&str, &str) -> Option<String> {}

impl<F: Fn(&str, &str) -> Option<String>> Never for F {}

/// Waits until the cluster is Ready=False saying `needle`, failing at once
/// when `never` sees a breach; returns the message.
async fn wait_cluster_refused(
    client: &Client,
    ns: &str,
    name: &str,
    needle: &str,
    never: impl Never,
) -> String {
    wait(
        WAIT,
        &format!("KubernetesCluster {ns}/{name} Ready=False saying {needle:?}"),
        || async {
            let (status, msg) = cluster_ready(client, ns, name).await.unwrap_or_default();
            if let Some(breach) = never(&status, &msg) {
                panic!("KubernetesCluster {ns}/{name}: {breach}");
            }
            (status == "False" && msg.contains(needle)).then_some(msg)
        },
    )
    .await
}

/// Waits until the resource is Synced=False saying `needle`, failing at once
/// when `never` sees a breach.
async fn wait_resource_refused(
    client: &Client,
    ns: &str,
    name: &str,
    needle: &str,
    never: impl Never,
) -> String {
    wait(
        WAIT,
        &format!("resource {ns}/{name} Synced=False saying {needle:?}"),
        || async {
            let synced = get_res(client, ns, name)
                .await
                .and_then(|r| condition(&r.status?.conditions, "Synced").cloned());
            let (status, msg) = synced
                .map(|c| (c.status, c.message.unwrap_or_default()))
                .unwrap_or_default();
            if let Some(breach) = never(&status, &msg) {
                panic!("resource {ns}/{name}: {breach}");
            }
            (status == "False" && msg.contains(needle)).then_some(msg)
        },
    )
    .await
}

fn temp_path(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(testenv::unique_name(prefix))
}
