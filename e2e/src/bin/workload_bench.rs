//! `workload-bench`: the workload controllers at the size seed 000 names as
//! the limit (a command, not a timed test). Starts a local control plane
//! with three remote clusters whose API servers write audit logs, runs the
//! scheduler, application-controller and resource-controller as their
//! shipped ServiceAccounts (and, in the remote clusters, as a user of their
//! own through the KubernetesClusters' Secrets), and applies GitLab-sized
//! KubernetesApplications: 14 Deployments, 1 StatefulSet, 3 Jobs, 9
//! Services and 16 ConfigMaps each (43 templates), with several containers,
//! env, probes and resources, and ConfigMaps of a few KiB.
//!
//! - one: a single application alone; time from apply to Submitted;
//! - many: N applications (default 100) at once, spread over the remote
//!   clusters; apply→Submitted p50/p99 and the time until all are.
//!
//! For each: requests per template (KubernetesApplicationResource) by
//! cluster and verb, from each binary's /metrics and from the audit logs
//! (by each binary's user), and each binary's CPU seconds and memory. A
//! phase that does not reach its goal says how far it got. Writes JSON
//! (`--out`, default bench/workloads.json).
//!
//!     hack/bench-workloads.sh [--applications N]

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use e2e::bench::{AuditMark, Probe, Reached, Usage, latency_json, metrics_delta, scrape};
use futures::StreamExt as _;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{KubernetesApplication, KubernetesApplicationResource},
};

/// The workload binaries' identity in the remote clusters (the kubeconfig
/// in each KubernetesCluster's Secret; the scheduler probes clusters with
/// it too).
const REMOTE_USER: &str = "bench-workloads";
/// Where applications, clusters and their Secrets live.
const NS: &str = "bench";
const BINARIES: [&str; 3] = ["scheduler", "application-controller", "resource-controller"];
/// Templates per application.
const TEMPLATES: usize = 14 + 1 + 3 + 9 + 16;

const USAGE: &str = "usage: workload-bench [--applications N] [--clusters C] [--concurrency C] \
[--poll-interval DURATION] [--timeout SECS] [--out FILE]";

struct Args {
    applications: usize,
    clusters: usize,
    concurrency: usize,
    poll_interval: String,
    timeout: Option<Duration>,
    out: std::path::PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        applications: 100,
        clusters: 3,
        concurrency: 16,
        poll_interval: "10m".to_owned(),
        timeout: None,
        out: testenv::repo_root().join("bench/workloads.json"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--applications" => {
                a.applications = it.next().and_then(|v| v.parse().ok()).expect(USAGE)
            }
            "--clusters" => a.clusters = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--concurrency" => a.concurrency = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--poll-interval" => a.poll_interval = it.next().expect(USAGE),
            "--timeout" => {
                a.timeout = it
                    .next()
                    .and_then(|v| v.trim_end_matches('s').parse().ok())
                    .map(Duration::from_secs)
            }
            "--out" => a.out = it.next().expect(USAGE).into(),
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    a
}

/// Text of about `bytes` bytes that reads like a configuration file.
fn config_text(seed: &str, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 80);
    let mut i = 0;
    while out.len() < bytes {
        out.push_str(&format!(
            "{seed}_setting_{i:03}: \"value-{i}-of-{seed}-with-some-length\"  # tuned for production\n"
        ));
        i += 1;
    }
    out
}

fn env(component: &str, n: usize) -> Value {
    let mut vars: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("{}_OPTION_{i}", component.to_uppercase().replace('-', "_")), "value": format!("{component}-value-{i}")}))
        .collect();
    vars.push(json!({"name": "GITLAB_HOST", "value": "https://gitlab.example.com"}));
    vars.push(
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    );
    Value::Array(vars)
}

fn container(component: &str, image: &str, port: u16, env_vars: usize) -> Value {
    json!({
        "name": component,
        "image": format!("registry.gitlab.com/gitlab-org/build/cng/{image}:v17.0.0"),
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": format!("p{port}"), "containerPort": port, "protocol": "TCP"}],
        "env": env(component, env_vars),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "livenessProbe": {"httpGet": {"path": "/-/liveness", "port": port}, "initialDelaySeconds": 20, "periodSeconds": 60, "timeoutSeconds": 30},
        "readinessProbe": {"httpGet": {"path": "/-/readiness", "port": port}, "periodSeconds": 10, "timeoutSeconds": 2},
        "volumeMounts": [
            {"name": "config", "mountPath": format!("/etc/gitlab/{component}"), "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
    })
}

/// A pod template with a main container, a sidecar and an init container.
fn pod(component: &str, port: u16) -> Value {
    let mut init = container(
        &format!("{component}-certificates"),
        "certificates",
        8000,
        3,
    );
    // Init containers have no probes and serve nothing.
    for field in ["livenessProbe", "readinessProbe", "ports"] {
        if let Some(o) = init.as_object_mut() {
            o.remove(field);
        }
    }
    json!({
        "metadata": {"labels": {"app": component, "release": "gitlab"}, "annotations": {"checksum/config": format!("{:064x}", component.len())}},
        "spec": {
            "serviceAccountName": "default",
            "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "initContainers": [init],
            "containers": [
                container(component, &format!("gitlab-{component}-ee"), port, 16),
                container(&format!("{component}-exporter"), "gitlab-exporter", 9168, 6),
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": component}},
                {"name": "tmp", "emptyDir": {"medium": "Memory"}},
            ],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": component}}}}]}},
        },
    })
}

const DEPLOYMENTS: [&str; 14] = [
    "webservice",
    "sidekiq",
    "gitlab-shell",
    "gitlab-exporter",
    "registry",
    "kas",
    "toolbox",
    "gitlab-pages",
    "spamcheck",
    "nginx-controller",
    "nginx-backend",
    "certmanager",
    "certmanager-cainjector",
    "prometheus",
];
const JOBS: [&str; 3] = ["migrations", "shared-secrets", "minio-buckets"];
const SERVICES: [&str; 9] = [
    "webservice",
    "gitlab-shell",
    "registry",
    "kas",
    "gitaly",
    "gitlab-exporter",
    "gitlab-pages",
    "nginx-controller",
    "prometheus",
];
const CONFIGMAPS: [&str; 16] = [
    "webservice",
    "sidekiq",
    "gitlab-shell",
    "gitlab-exporter",
    "registry",
    "kas",
    "toolbox",
    "gitlab-pages",
    "spamcheck",
    "nginx-controller",
    "nginx-backend",
    "certmanager",
    "certmanager-cainjector",
    "prometheus",
    "gitaly",
    "migrations",
];

fn template(app: &str, kind: &str, name: &str, body: Value) -> Value {
    let (api_version, spec_key) = match kind {
        "Deployment" | "StatefulSet" => ("apps/v1", "spec"),
        "Job" => ("batch/v1", "spec"),
        "ConfigMap" => ("v1", "data"),
        _ => ("v1", "spec"),
    };
    json!({
        "metadata": {"name": format!("{app}-{}-{name}", kind.to_lowercase()), "labels": {"app": app}},
        "spec": {"template": {
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "labels": {"app": name, "release": "gitlab"}},
            spec_key: body,
        }},
    })
}

/// A GitLab-sized application's 43 resource templates, for the remote
/// namespace `remote_ns`.
fn gitlab(app: &str, remote_ns: &str) -> Vec<Value> {
    let mut t = Vec::with_capacity(TEMPLATES);
    for (i, d) in DEPLOYMENTS.iter().enumerate() {
        t.push(template(
            app,
            "Deployment",
            d,
            json!({
                "replicas": 1,
                "selector": {"matchLabels": {"app": d, "release": "gitlab"}},
                "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": pod(d, 8080 + i as u16),
            }),
        ));
    }
    t.push(template(app, "StatefulSet", "gitaly", json!({
        "replicas": 1,
        "serviceName": "gitaly",
        "selector": {"matchLabels": {"app": "gitaly", "release": "gitlab"}},
        "template": pod("gitaly", 8075),
        "volumeClaimTemplates": [{"metadata": {"name": "repo-data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}}],
    })));
    for j in JOBS {
        let mut p = pod(j, 8000);
        p["spec"]["restartPolicy"] = json!("OnFailure");
        t.push(template(
            app,
            "Job",
            j,
            json!({"backoffLimit": 6, "activeDeadlineSeconds": 3600, "template": p}),
        ));
    }
    for (i, s) in SERVICES.iter().enumerate() {
        t.push(template(app, "Service", s, json!({
            "type": "ClusterIP",
            "selector": {"app": s, "release": "gitlab"},
            "ports": [
                {"name": "http", "port": 8080 + i as u16, "targetPort": 8080 + i as u16, "protocol": "TCP"},
                {"name": "metrics", "port": 9168, "targetPort": 9168, "protocol": "TCP"},
            ],
        })));
    }
    for (i, c) in CONFIGMAPS.iter().enumerate() {
        t.push(template(
            app,
            "ConfigMap",
            c,
            json!({
                "config.yml": config_text(c, 2048 + 256 * (i % 4)),
                "configure": config_text(&format!("{c}_script"), 1024),
                "installation_type": "gitlab-helm-chart",
            }),
        ));
    }
    for r in &mut t {
        r["spec"]["template"]["metadata"]["namespace"] = json!(remote_ns);
    }
    t
}

fn application(name: &str, cluster: &str, remote_ns: &str) -> Value {
    json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplication",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "clusterSelector": {"matchLabels": {"bench-cluster": cluster}},
            "resourceTemplates": gitlab(name, remote_ns),
        },
    })
}

struct Bench {
    plane: testenv::ControlPlane,
    binaries: Vec<e2e::Running>,
    users: BTreeMap<String, Vec<String>>,
}

struct Mark {
    metrics: Vec<BTreeMap<(String, String), f64>>,
    audit: AuditMark,
    usage: Vec<Usage>,
}

impl Bench {
    fn mark(&self) -> Mark {
        Mark {
            metrics: self.binaries.iter().map(|b| scrape(b.addr)).collect(),
            audit: AuditMark::now(std::iter::once(&self.plane.control).chain(self.plane.remotes())),
            usage: self
                .binaries
                .iter()
                .map(|b| Usage::of(b.child.id()))
                .collect(),
        }
    }

    fn between(&self, from: &Mark, to: &Mark, templates: f64) -> Value {
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
        })
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Applies the applications `(name, cluster index)` and waits until each is
/// Submitted; returns the phase's figures.
async fn phase(
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

#[tokio::main]
async fn main() {
    let args = args();
    let m = args.applications;
    let _ = rustls::crypto::ring::default_provider().install_default();
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
        e2e::bench::grant_cluster_admin(remote, REMOTE_USER);
        let secret = format!("r{c}-kubeconfig");
        e2e::bench::kubeconfig_secret(
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
    let mut bench = Bench {
        plane,
        binaries,
        users,
    };

    // The clusters must be Ready before anything can be scheduled to them.
    let clusters: Api<KubernetesCluster> = Api::namespaced(control.clone(), NS);
    let (ready, waited) = e2e::bench::wait_until(Duration::from_secs(120), || async {
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
    let start = bench.mark();

    eprintln!("workload-bench: one application ({TEMPLATES} templates)");
    let one = phase(
        &bench,
        &probe,
        &apps,
        placement[..1].to_vec(),
        1,
        args.timeout.unwrap_or(Duration::from_secs(120)),
    )
    .await;
    eprintln!(
        "  one: reached {} in {}s",
        one["reached"], one["duration_s"]
    );

    eprintln!(
        "workload-bench: {m} applications at once ({} templates)",
        m * TEMPLATES
    );
    let timeout = args
        .timeout
        .unwrap_or(Duration::from_secs(120) + Duration::from_millis(50) * (m * TEMPLATES) as u32);
    let many = phase(
        &bench,
        &probe,
        &apps,
        placement[1..].to_vec(),
        args.concurrency,
        timeout,
    )
    .await;
    eprintln!(
        "  many: reached {} ({}/{}) in {}s; submitted p50 {} p99 {}",
        many["reached"],
        many["done"],
        many["of"],
        many["duration_s"],
        many["submitted"]["p50_s"],
        many["submitted"]["p99_s"]
    );

    let end = bench.mark();
    // A binary that died part way explains phases that did not finish.
    let exited: BTreeMap<String, String> = bench
        .binaries
        .iter_mut()
        .filter_map(|b| Some((b.name.clone(), b.child.try_wait().ok()??.to_string())))
        .collect();
    let binaries: serde_json::Map<String, Value> = bench
        .binaries
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                b.name.clone(),
                json!({
                    "peak_rss_mib": end.usage[i].peak_rss_mib,
                    "rss_mib": end.usage[i].rss_mib,
                    "cpu_s": end.usage[i].cpu_s - start.usage[i].cpu_s,
                }),
            )
        })
        .collect();
    let result = json!({
        "benchmark": "workloads",
        "date": e2e::bench::now(),
        "machine": e2e::bench::machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "applications": m,
        "templates_per_application": TEMPLATES,
        "remote_clusters": remote_count,
        "poll_interval": args.poll_interval,
        "users": bench.users,
        "binaries": binaries,
        "exited": exited,
        "phase_order": ["one", "many"],
        "phases": {"one": one, "many": many},
    });
    e2e::bench::write_json(&args.out, &result);
    println!("workloads: written to {}", args.out.display());
}
