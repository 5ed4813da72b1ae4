//! Seeds 002 and 003: Objects manage any manifest in the remote or the
//! control cluster, with management policies, references, ordered install
//! and uninstall, pause, drift correction and connection details.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bad_input;
mod collections;
mod namespaced;
mod policies;
mod provider_configs;
mod references;
mod seeds;
mod upstream_fields;
mod versions;

use e2e::{objects::*, wait};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};
use std::time::Duration;
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
