//! Seed 000 end to end: KubernetesApplications applied to the control cluster
//! are scheduled, split into KubernetesApplicationResources and delivered to
//! the remote cluster; their state is visible from the control cluster.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conflicts;
mod deletion;
mod delivery;
mod health;
mod scheduling;

use e2e::{wait, workloads::*};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, Namespace, Secret, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use std::time::Duration;
use types::workload::v1alpha1::{
    ANNOTATION_RESOURCE_UID, KubernetesApplication, KubernetesApplicationResource,
};

/// What most tests start from: their own control and remote namespaces
/// (named after a prefix), the controllers for the control one, and a
/// KubernetesCluster `target` labelled `c: 1` that reaches the remote
/// cluster.
struct Setup {
    plane: &'static testenv::ControlPlane,
    client: Client,
    remote: Client,
    ns: String,
    rns: String,
    controllers: Controllers,
}

/// [`Setup`] for namespaces named after `prefix`.
async fn with_target(prefix: &str) -> Setup {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, prefix).await;
    let rns = remote_ns(&remote, prefix).await;
    let controllers = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    Setup {
        plane,
        client,
        remote,
        ns,
        rns,
        controllers,
    }
}

/// Application `app`, selecting `c: 1`, delivering ConfigMap `cm` (`x: 1`)
/// into the remote namespace; returned once Submitted.
async fn deliver_one_configmap(client: &Client, ns: &str, rns: &str) -> KubernetesApplication {
    apply_app(
        client,
        ns,
        app(
            "app",
            ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([configmap_template("cm", rns, "cm", json!({"x": "1"}))]),
        ),
    )
    .await;
    wait_app_state(client, ns, "app", "Submitted").await
}
