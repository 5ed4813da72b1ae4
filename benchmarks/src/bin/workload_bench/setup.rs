//! Setting up a run: a control plane with audit logs and the remote
//! clusters, a KubernetesCluster for each, the applications' namespaces,
//! the three binaries, and the watch the phases read.

use std::{collections::BTreeMap, time::Duration};

use benchmarks::Probe;
use kube::{Api, api::DynamicObject, discovery::ApiResource};
use serde_json::json;
use types::{compute::v1alpha1::KubernetesCluster, workload::v1alpha1::KubernetesApplication};

use crate::{Args, BINARIES, NS, REMOTE_USER, phase::Bench};

/// Everything the phases share.
pub struct Run {
    pub bench: Bench,
    /// The KubernetesApplications.
    pub apps: Api<DynamicObject>,
    /// Watches them.
    pub probe: Probe,
    /// Every application's name and remote cluster: "solo" first, then
    /// the many.
    pub placement: Vec<(String, usize)>,
    pub remote_count: usize,
}

/// Starts the plane, the clusters and the binaries.
pub async fn set_up(args: &Args) -> Run {
    let m = args.applications;
    eprintln!(
        "workload-bench: starting a control plane with {} remote clusters (audit logs on)",
        args.clusters
    );
    let (plane, _) = testenv::start_local_with(testenv::Options {
        audit: true,
        remotes: args.clusters,
        users: vec![REMOTE_USER.to_owned()],
        ..testenv::Options::default()
    })
    .unwrap();
    let control = plane.control.client().await;
    e2e::apply_deploy(&plane.control);
    plane.control.kubectl(&["create", "namespace", NS]);
    let remotes: Vec<&testenv::Cluster> = plane.remotes().collect();
    let remote_count = remotes.len();
    for (c, remote) in remotes.iter().enumerate() {
        benchmarks::grant_cluster_admin(remote, REMOTE_USER);
        let secret = format!("r{c}-kubeconfig");
        benchmarks::kubeconfig_secret(
            &plane.control,
            NS,
            &secret,
            remote.kubeconfig_for(REMOTE_USER).unwrap(),
        );
        let cluster = json!({
            "apiVersion": "compute.crossplane.io/v1alpha1", "kind": "KubernetesCluster",
            "metadata": {"name": format!("r{c}"), "namespace": NS, "labels": {"bench-cluster": format!("r{c}")}},
            "spec": {"connectionSecretRef": {"name": secret}},
        });
        e2e::workloads::apply_json(&control, NS, "kubernetesclusters", &cluster).await;
    }
    // The applications' namespaces in their remote clusters (created by an
    // operator, not by the application).
    let placement: Vec<(String, usize)> = std::iter::once(("solo".to_owned(), 0))
        .chain((0..m).map(|i| (format!("gl{i:03}"), i % remote_count)))
        .collect();
    for (c, remote) in remotes.iter().enumerate() {
        let namespaces: String = placement
            .iter()
            .filter(|(_, pc)| *pc == c)
            .map(|(n, _)| {
                format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: gl-{n}}}\n---\n")
            })
            .collect();
        if namespaces.is_empty() {
            continue;
        }
        let out = remote.kubectl_stdin(&["apply", "-f", "-"], Some(&namespaces));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let mut binaries = Vec::new();
    for b in BINARIES {
        let kubeconfig = e2e::impersonating_kubeconfig_for(&plane.control, b);
        let mut running = e2e::Running::start(
            b,
            &kubeconfig,
            &[
                "--watch-namespace",
                NS,
                "--poll-interval",
                &args.poll_interval,
            ],
        );
        running.wait_healthy(Duration::from_secs(30)).await;
        binaries.push(running);
    }
    let sa = |b: &str| format!("system:serviceaccount:crossplane-system:{b}");
    let mut users: BTreeMap<String, Vec<String>> = [(
        "control".to_owned(),
        BINARIES.iter().map(|b| sa(b)).collect(),
    )]
    .into();
    for r in remotes {
        users.insert(r.name.to_owned(), vec![REMOTE_USER.to_owned()]);
    }
    let bench = Bench {
        plane,
        binaries,
        users,
    };

    // The clusters must be Ready before anything can be scheduled to them.
    let clusters: Api<KubernetesCluster> = Api::namespaced(control.clone(), NS);
    let (ready, waited) = benchmarks::wait_until(Duration::from_secs(120), || async {
        clusters.list(&Default::default()).await.is_ok_and(|l| {
            l.items.len() == remote_count
                && l.items.iter().all(|c| {
                    c.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
        })
    })
    .await;
    eprintln!("workload-bench: clusters ready: {ready} after {waited:?}");

    let app_ar = ApiResource::erase::<KubernetesApplication>(&());
    let apps: Api<DynamicObject> = Api::namespaced_with(control.clone(), NS, &app_ar);
    let probe = Probe::watch(apps.clone());
    assert!(probe.synced(Duration::from_secs(30)).await);
    Run {
        bench,
        apps,
        probe,
        placement,
        remote_count,
    }
}
