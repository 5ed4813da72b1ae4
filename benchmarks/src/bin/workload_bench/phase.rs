//! A phase: apply applications, wait until each is Submitted, and count
//! the requests, CPU and memory it took.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use benchmarks::{
    AuditMark, MachineCpu, Probe, Reached, Usage, latency_json, metrics_delta, scrape,
};
use futures::StreamExt as _;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use types::workload::v1alpha1::KubernetesApplicationResource;

use crate::{
    NS,
    gitlab::{TEMPLATES, application},
};

/// The plane, the binaries under test, and whose requests count.
pub struct Bench {
    pub plane: testenv::ControlPlane,
    pub binaries: Vec<e2e::Running>,
    pub users: BTreeMap<String, Vec<String>>,
}

/// The counters at one moment.
pub struct Mark {
    pub metrics: Vec<BTreeMap<(String, String), f64>>,
    pub audit: AuditMark,
    pub usage: Vec<Usage>,
    /// The plane's servers (API servers, etcd, controller managers).
    pub servers: Vec<(String, Usage)>,
    /// The whole machine's CPU time.
    pub machine: MachineCpu,
}

impl Bench {
    pub fn mark(&self) -> Mark {
        Mark {
            metrics: self.binaries.iter().map(|b| scrape(b.addr)).collect(),
            audit: AuditMark::now(std::iter::once(&self.plane.control).chain(self.plane.remotes())),
            usage: self
                .binaries
                .iter()
                .map(|b| Usage::of(b.child.id()))
                .collect(),
            servers: self
                .plane
                .processes()
                .into_iter()
                .map(|(name, pid)| (name, Usage::of(pid)))
                .collect(),
            machine: MachineCpu::now(),
        }
    }

    pub fn between(&self, from: &Mark, to: &Mark, templates: f64) -> Value {
        let mut metrics = serde_json::Map::new();
        let mut usage = serde_json::Map::new();
        for (i, b) in self.binaries.iter().enumerate() {
            metrics.insert(
                b.name.clone(),
                metrics_delta(&to.metrics[i], &from.metrics[i], templates),
            );
            usage.insert(b.name.clone(), to.usage[i].since_json(&from.usage[i]));
        }
        let metrics_total: f64 = metrics
            .values()
            .filter_map(|m| m["per_unit_total"].as_f64())
            .sum();
        json!({
            "requests_per_template": {
                "templates": templates,
                "metrics_total": metrics_total,
                "metrics": metrics,
                "audit": from.audit.delta(&to.audit, &self.users, templates),
            },
            "binaries": usage,
            "servers": servers_between(from, to, templates),
        })
    }
}

/// The CPU seconds each of the plane's servers spent from `from` to `to`,
/// and those of the API servers and etcd (the machine's bottleneck) in all
/// and per template.
pub fn servers_between(from: &Mark, to: &Mark, templates: f64) -> Value {
    let mut by = serde_json::Map::new();
    let mut api = 0.0;
    for (name, usage) in &to.servers {
        let before = from
            .servers
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, u)| u.cpu_s);
        let cpu = usage.cpu_s - before;
        if name.starts_with("kube-apiserver") || name == "etcd" {
            api += cpu;
        }
        by.insert(name.clone(), json!(cpu));
    }
    json!({
        "cpu_s": by,
        "api_servers_and_etcd_cpu_s": api,
        "api_servers_and_etcd_cpu_s_per_template": api / templates,
        "machine": to.machine.since_json(&from.machine),
    })
}

/// `a` with `b`'s fields added.
fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Applies the applications `(name, cluster index)` and waits until each is
/// Submitted; returns the phase's figures.
pub async fn phase(
    bench: &Bench,
    probe: &Probe,
    apps: &Api<DynamicObject>,
    which: Vec<(String, usize)>,
    concurrency: usize,
    timeout: Duration,
) -> Value {
    let names: Vec<String> = which.iter().map(|(n, _)| n.clone()).collect();
    for n in &names {
        probe.expect(n, Box::new(|o: &Value| o["status"]["state"] == "Submitted"));
    }
    let before = bench.mark();
    let started = Instant::now();
    let sent = std::sync::Mutex::new(HashMap::new());
    let errors = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(which)
        .for_each_concurrent(concurrency, |(name, c)| {
            let (sent, errors) = (&sent, &errors);
            async move {
                let body = application(&name, &format!("r{c}"), &format!("gl-{name}"));
                sent.lock().unwrap().insert(name.clone(), Instant::now());
                let params = PatchParams::apply("workload-bench").force();
                if apps
                    .patch(&name, &params, &Patch::Apply(&body))
                    .await
                    .is_err()
                {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
        .await;
    let reached: Reached = probe.wait(&names, timeout).await;
    let duration = started.elapsed();
    let stuck = if reached.all() {
        Value::Null
    } else {
        stuck_resources(apps).await
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = bench.mark();
    let sent = sent.into_inner().unwrap();
    merge(
        merge(
            reached.json(),
            bench.between(&before, &after, (names.len() * TEMPLATES) as f64),
        ),
        json!({
            "applications": names.len(),
            "templates": names.len() * TEMPLATES,
            "request_errors": errors.into_inner(),
            "duration_s": duration.as_secs_f64(),
            "submitted": latency_json(&probe.latencies(&sent)),
            "not_submitted_sample": stuck,
        }),
    )
}

/// Up to five KubernetesApplicationResources that are not Submitted, with
/// their state and Synced message: why a phase did not reach its goal.
async fn stuck_resources(apps: &Api<DynamicObject>) -> Value {
    let resources: Api<KubernetesApplicationResource> =
        Api::namespaced(apps.clone().into_client(), NS);
    let Ok(list) = resources.list(&Default::default()).await else {
        return Value::Null;
    };
    list.items
        .iter()
        .filter(|r| e2e::workloads::state_of_res(r) != "Submitted")
        .take(5)
        .map(|r| {
            json!({
                "name": r.metadata.name,
                "state": e2e::workloads::state_of_res(r),
                "synced": e2e::workloads::synced_message(r),
            })
        })
        .collect()
}

/// Deletes every application and waits until they, their resources and
/// (in the remote clusters) the pods of their remote objects are gone, so
/// that what follows meets the clusters as the phases did. Answers how
/// long each took and whether it finished.
pub async fn delete_all(bench: &Bench, apps: &Api<DynamicObject>, timeout: Duration) -> Value {
    use k8s_openapi::api::core::v1::Pod;
    let all = kube::api::ListParams::default();
    let resources: Api<KubernetesApplicationResource> =
        Api::namespaced(apps.clone().into_client(), NS);
    let started = Instant::now();
    let _ = apps
        .delete_collection(&kube::api::DeleteParams::default(), &all)
        .await;
    let first = kube::api::ListParams::default().limit(1);
    let (deleted, _) = benchmarks::wait_until(timeout, || async {
        apps.list_metadata(&first)
            .await
            .is_ok_and(|l| l.items.is_empty())
            && resources
                .list_metadata(&first)
                .await
                .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let applications_s = started.elapsed().as_secs_f64();
    let remotes: Vec<kube::Client> =
        futures::future::join_all(bench.plane.remotes().map(|r| r.client())).await;
    let (pods_gone, _) = benchmarks::wait_until(timeout, || async {
        let mut left = 0;
        for c in &remotes {
            let pods: Api<Pod> = Api::all(c.clone());
            left += pods
                .list_metadata(&Default::default())
                .await
                .map_or(1, |l| {
                    l.items
                        .iter()
                        .filter(|p| {
                            p.metadata
                                .namespace
                                .as_deref()
                                .is_some_and(|n| n.starts_with("gl-"))
                        })
                        .count()
                });
        }
        left == 0
    })
    .await;
    let out = json!({
        "deleted": deleted,
        "applications_and_resources_gone_s": applications_s,
        "remote_pods_gone": pods_gone,
        "remote_pods_gone_s": started.elapsed().as_secs_f64(),
    });
    eprintln!("  deleted: {out}");
    out
}
