//! How a KubernetesApplicationResource delivers its object, as users run
//! it: the controllers are pods of `deploy/` on the test node, and the
//! target is the control cluster itself (reached from the pods through the
//! node), so Deployments and Jobs really run. Each test's
//! KubernetesCluster authenticates as a user of its own, so the API
//! server's audit log says what the resource-controller wrote there and
//! what it did not.
//!
//! - feedback: feedback rules bring back a Deployment's readyReplicas and a
//!   LoadBalancer Service's ingress, and nothing else; a Job is healthy once
//!   Complete, and a failed one says why.
//! - strategies: ignoreFields leave replicas to an autoscaler (no write, no
//!   event); without them the drift report and DriftLoop name it;
//!   CreateOnly, ReadOnly and Orphan do what they say.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod feedback;
mod strategies;

use std::time::Duration;

use chrono::{DateTime, Utc};
use e2e::{
    shipped::{log_tail, shipped},
    wait,
    workloads::{app, apply_app, cluster, condition, get_res, state_of_res},
};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use types::workload::v1alpha1::KubernetesApplicationResource;

/// How long a delivery test waits for a state.
const WAIT: Duration = Duration::from_secs(120);

/// The users the tests' KubernetesClusters authenticate as.
const USERS: [&str; 4] = [
    "delivery-ignore",
    "delivery-fight",
    "delivery-create-only",
    "delivery-read-only",
];

/// The image of a Job that completes: upstream's kubectl (a static
/// binary), imported on the node, run as `kubectl version --client`.
const KUBECTL_IMAGE: &str = "localhost/crossplane-rs-test/kubectl:1";

/// This binary's control plane: audit log, node, the users.
fn plane() -> &'static testenv::ControlPlane {
    testenv::control_plane_with(testenv::Options {
        audit: true,
        node: true,
        users: USERS.iter().map(|u| u.to_string()).collect(),
        ..testenv::Options::default()
    })
}

/// A blocking look (kubectl, a scrape through the node) from async code.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Prints the resource-controller's log when a test fails.
struct DumpLog;

impl Drop for DumpLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- resource-controller log (last 200 lines) -----");
            eprintln!("{}", log_tail("resource-controller", 200));
        }
    }
}

/// What a test starts from: its namespace for applications, a namespace
/// for the objects they deliver, and KubernetesCluster `target` (labelled
/// `c: 1`) reaching the control cluster as `user` (admin when None).
struct Setup {
    client: Client,
    ns: String,
    tns: String,
    _dump: DumpLog,
}

async fn setup(prefix: &str, user: Option<&str>) -> Setup {
    let plane = plane();
    blocking(shipped);
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, prefix).await;
    let tns = plane
        .control
        .namespace(&client, &format!("{prefix}-objects"))
        .await;
    let kubeconfig = match user {
        Some(u) => {
            let binding = format!("e2e-{u}");
            let yaml = format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {binding}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {u}}}]\n"
            );
            let out = plane
                .control
                .kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&yaml));
            assert!(out.status.success(), "{out:?}");
            plane.control.kubeconfig_for(u).unwrap().to_owned()
        }
        None => plane.control.kubeconfig.clone(),
    };
    let node = plane.node.as_ref().expect("the test node");
    let for_pods = kubeconfig.replace("https://127.0.0.1:", &format!("https://{}:", node.host_ip));
    assert_ne!(for_pods, kubeconfig, "the kubeconfig names 127.0.0.1");
    cluster(&client, &ns, "target", json!({"c": "1"}), Some(&for_pods)).await;
    Setup {
        client,
        ns,
        tns,
        _dump: DumpLog,
    }
}

impl Setup {
    /// Applies application `name` of `templates`, selecting `c: 1`.
    async fn apply(&self, name: &str, templates: Value) {
        apply_app(
            &self.client,
            &self.ns,
            app(
                name,
                &self.ns,
                json!({"matchLabels": {"c": "1"}}),
                templates,
            ),
        )
        .await;
    }

    /// Waits until resource `name` is what `check` looks for.
    async fn wait_res<T>(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&KubernetesApplicationResource) -> Option<T>,
    ) -> T {
        wait::wait(WAIT, &format!("resource {name}: {what}"), || async {
            let res = get_res(&self.client, &self.ns, name).await?;
            check(&res)
        })
        .await
    }

    /// Waits until resource `name` is Submitted and Ready has `status`.
    async fn wait_ready(&self, name: &str, status: &str) -> KubernetesApplicationResource {
        self.wait_res(name, &format!("Submitted, Ready={status}"), |r| {
            let ready = condition(&r.status.as_ref()?.conditions, "Ready")?;
            (state_of_res(r) == "Submitted" && ready.status == status).then(|| r.clone())
        })
        .await
    }

    /// The events about `name` in the application namespace.
    async fn events(&self, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items
    }
}

/// The feedback value `name` of `res`, as text.
fn feedback(res: &KubernetesApplicationResource, name: &str) -> Option<String> {
    let values = res.status.as_ref()?.feedback.as_ref()?;
    let v = &values.iter().find(|v| v.name == name)?.field_value;
    v.integer
        .map(|i| i.to_string())
        .or_else(|| v.string.clone())
        .or_else(|| v.boolean.map(|b| b.to_string()))
        .or_else(|| v.json_raw.clone())
}

/// Writes (create, update, patch, delete) `user` made since `since`, by
/// verb and resource, from the control cluster's audit log.
fn writes_by(user: &str, since: DateTime<Utc>) -> Vec<(String, u64)> {
    let log = plane().control.audit_log.clone().expect("the audit log");
    let until = Utc::now() + chrono::Duration::seconds(5);
    let counts = testenv::audit::count_between(&log, since, until).unwrap();
    counts
        .by_verb_and_resource(user)
        .into_iter()
        .filter(|(k, _)| {
            ["create", "update", "patch", "delete", "deletecollection"]
                .iter()
                .any(|v| k.starts_with(&format!("{v} ")))
        })
        .collect()
}

/// Requests `user` made since `since`, any verb.
fn requests_by(user: &str, since: DateTime<Utc>) -> u64 {
    let log = plane().control.audit_log.clone().expect("the audit log");
    let until = Utc::now() + chrono::Duration::seconds(5);
    testenv::audit::count_between(&log, since, until)
        .unwrap()
        .total(user)
}

/// A Deployment of `replicas` pause containers (the node's sandbox image,
/// never pulled) named `name` in `ns`.
fn deployment(name: &str, ns: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "pause", "image": testenv::image::PAUSE_IMAGE, "imagePullPolicy": "Never"}],
                },
            },
        },
    })
}

/// Sets a Deployment's replicas as an autoscaler does: an update by a
/// field manager of its own.
async fn scale(client: &Client, ns: &str, name: &str, replicas: i64) {
    let params = PatchParams {
        field_manager: Some("e2e-autoscaler".to_owned()),
        ..PatchParams::default()
    };
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &params,
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}
