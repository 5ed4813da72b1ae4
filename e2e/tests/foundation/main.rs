//! The foundation against real API servers: CRDs, the seeds' examples,
//! API-server validation, kubectl explain and printer columns, every binary's
//! health and metrics, leader election, and the kustomize deployment.

mod api;
mod deployment;
mod health;
mod leader_election;
mod service_accounts;

use e2e::{
    Running, http_get, metric_sum,
    proxy::Proxy,
    wait,
    wait::poll,
    workloads::{self, impersonating_kubeconfig},
    yaml_documents,
};
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{Api, Client, api::PostParams};
use oci::project::BINARIES;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Whether a /metrics body says this replica leads (the sample line, not
/// the HELP text, which also starts with "1").
fn leads(metrics: &str) -> bool {
    metrics
        .lines()
        .any(|l| l.trim() == "crossplane_rs_leader 1")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether the binary serving /metrics on `addr` says it leads now; false
/// when it does not answer (it has stopped).
fn leads_now(addr: std::net::SocketAddr) -> bool {
    matches!(http_get(addr, "/metrics"), Some((200, body)) if leads(&body))
}

/// Waits until the binary serving /metrics on `addr` leads.
async fn wait_leads(addr: std::net::SocketAddr, who: &str, timeout: Duration) {
    wait(timeout, &format!("{who} to lead"), || async move {
        leads_now(addr).then_some(())
    })
    .await;
}

/// Waits until a KubernetesCluster's Ready condition is `want`.
async fn wait_cluster_ready(client: &Client, ns: &str, name: &str, want: &str) {
    wait(
        Duration::from_secs(30),
        &format!("KubernetesCluster {ns}/{name} to be Ready={want}"),
        || async {
            let ready = workloads::cluster_ready(client, ns, name).await;
            ready
                .is_some_and(|(status, _)| status == want)
                .then_some(())
        },
    )
    .await;
}
