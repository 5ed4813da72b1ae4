//! `object-bench`: the object-provider benchmark. Starts a local control
//! plane and the object-provider, creates N Objects (default 1000) each
//! managing a ConfigMap in the remote cluster, and measures create→Ready
//! latency, Objects/s, API requests per Object by cluster and verb (counted
//! by the provider's own client), a no-op resync pass, a delete pass, and the
//! provider's peak RSS. Writes JSON (`--out`, default
//! bench/object-provider.json) and prints a short table.
//!
//!     hack/bench-object-provider.sh [--objects N]

// A benchmark reports and exits; failing loudly is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::Object;

type Counts = BTreeMap<(String, String), f64>;

fn scrape(addr: std::net::SocketAddr) -> Counts {
    let (_, body) = e2e::http_get(addr, "/metrics").expect("metrics");
    let mut out = Counts::new();
    for line in body
        .lines()
        .filter(|l| l.starts_with("crossplane_rs_kube_api_requests_total{"))
    {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let get = |k: &str| {
            labels
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_owned()
        };
        out.insert((get("cluster"), get("verb")), value.parse().unwrap_or(0.0));
    }
    // Reconciles of Objects, so requests can be read per reconcile too.
    for line in body
        .lines()
        .filter(|l| l.starts_with("crossplane_rs_reconcile_total{controller=\"object\""))
    {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let result = labels
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_owned();
        out.insert(
            ("reconciles".to_owned(), result),
            value.parse().unwrap_or(0.0),
        );
    }
    out
}

fn delta(after: &Counts, before: &Counts, per: f64) -> Value {
    let mut by: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut total = 0.0;
    let mut writes = 0.0;
    for ((cluster, verb), v) in after {
        let d = v - before
            .get(&(cluster.clone(), verb.clone()))
            .copied()
            .unwrap_or(0.0);
        if d > 0.0 {
            let side = match cluster.as_str() {
                "control" => "control",
                "reconciles" => "reconciles",
                _ => "target",
            };
            *by.entry(side.to_owned())
                .or_default()
                .entry(verb.clone())
                .or_default() += d / per;
            if side == "reconciles" {
                continue;
            }
            total += d;
            if matches!(verb.as_str(), "create" | "update" | "patch" | "delete") {
                writes += d;
            }
        }
    }
    json!({"per_object_total": total / per, "per_object_writes": writes / per, "total_writes": writes, "per_object_by_verb": by})
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut n, mut concurrency, mut out) = (
        1000usize,
        32usize,
        testenv::repo_root().join("bench/object-provider.json"),
    );
    let mut resync = Duration::from_secs(20);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--objects" => n = args.next().unwrap().parse().unwrap(),
            "--concurrency" => concurrency = args.next().unwrap().parse().unwrap(),
            "--out" => out = args.next().unwrap().into(),
            "--resync" => resync = humantime_secs(&args.next().unwrap()),
            other => panic!(
                "unknown argument {other}; usage: object-bench [--objects N] [--concurrency C] [--resync SECS] [--out FILE]"
            ),
        }
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    eprintln!("object-bench: starting a local control plane");
    let (plane, _) = testenv::start_local().unwrap();
    let control = plane.control.client().await;
    let remote = plane.remote.client().await;
    let secret = plane.control.kubectl_stdin(
        &[
            "-n",
            "default",
            "create",
            "secret",
            "generic",
            "bench-kubeconfig",
            "--from-file=kubeconfig=/dev/stdin",
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        Some(&plane.remote.kubeconfig),
    );
    plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&String::from_utf8_lossy(&secret.stdout)),
    );
    plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {name: bench}\nspec: {credentials: {source: Secret, secretRef: {namespace: default, name: bench-kubeconfig, key: kubeconfig}}}\n"),
    );
    plane.remote.kubectl(&["create", "namespace", "bench"]);
    let provider = e2e::Running::start(
        "object-provider",
        &plane.control.kubeconfig_path,
        &[
            "--poll-interval",
            &format!("{}s", resync.as_secs()),
            "--concurrency",
            "16",
            "--log-format",
            "json",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(e2e::http_get(provider.addr, "/healthz"), Some((200, _))) {
        assert!(
            Instant::now() < deadline,
            "object-provider not healthy: {}",
            provider.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = provider.child.id();
    let objects: Api<Object> = Api::all(control.clone());

    // Watch for Ready=True, recording when each Object first gets there.
    let ready_at = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, Instant>::new()));
    let watcher_task = {
        let ready_at = ready_at.clone();
        let objects = objects.clone();
        tokio::spawn(async move {
            let mut stream = watcher(objects, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Ok(Some(o)) = stream.try_next().await {
                let ready = o.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                if ready {
                    ready_at
                        .lock()
                        .unwrap()
                        .entry(o.name_any())
                        .or_insert_with(Instant::now);
                }
            }
        })
    };

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = scrape(provider.addr);
    eprintln!("object-bench: creating {n} Objects");
    let started = Instant::now();
    let created_at = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, Instant>::new()));
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let objects = objects.clone();
            let created_at = created_at.clone();
            async move {
                let name = format!("bench-{i:05}");
                let body = json!({
                    "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "metadata": {"name": name},
                    "spec": {"providerConfigRef": {"name": "bench"}, "forProvider": {"manifest": {
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "bench"}, "data": {"i": i.to_string()}}}},
                });
                created_at.lock().unwrap().insert(name.clone(), Instant::now());
                objects.patch(&name, &PatchParams::apply("object-bench"), &Patch::Apply(&body)).await.unwrap();
            }
        })
        .await;
    while ready_at.lock().unwrap().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "not all Objects became Ready: {}",
            ready_at.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let create_duration = started.elapsed();
    // Let trailing reconciles (woken by their own finalizer) finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_create = scrape(provider.addr);
    let mut latencies: Vec<f64> = {
        let created = created_at.lock().unwrap();
        let ready = ready_at.lock().unwrap();
        created
            .iter()
            .filter_map(|(k, c)| ready.get(k).map(|r| r.duration_since(*c).as_secs_f64()))
            .collect()
    };
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let remote_cms =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(remote.clone(), "bench")
            .list(&Default::default())
            .await
            .unwrap();
    assert!(
        remote_cms.items.len() >= n,
        "only {} ConfigMaps in the remote cluster",
        remote_cms.items.len()
    );

    eprintln!("object-bench: waiting one resync period ({resync:?} ±10%) for a no-op resync pass");
    tokio::time::sleep(resync.mul_f64(1.15)).await;
    let after_resync = scrape(provider.addr);

    eprintln!("object-bench: deleting {n} Objects");
    let delete_started = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let objects = objects.clone();
            async move {
                let _ = objects
                    .delete(&format!("bench-{i:05}"), &DeleteParams::default())
                    .await;
            }
        })
        .await;
    loop {
        let left = objects
            .list_metadata(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        if left == 0 {
            break;
        }
        assert!(
            delete_started.elapsed() < Duration::from_secs(900),
            "{left} Objects not deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let delete_duration = delete_started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_delete = scrape(provider.addr);
    let peak = peak_rss_mib(pid);
    watcher_task.abort();

    let per = n as f64;
    let result = json!({
        "benchmark": "object-provider",
        "objects": n,
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "create": {
            "duration_s": create_duration.as_secs_f64(),
            "objects_per_s": per / create_duration.as_secs_f64(),
            "ready_p50_s": percentile(&latencies, 0.5),
            "ready_p99_s": percentile(&latencies, 0.99),
            "requests": delta(&after_create, &before, per),
        },
        "noop_resync": {"period_s": resync.as_secs(), "requests": delta(&after_resync, &after_create, per)},
        "delete": {"duration_s": delete_duration.as_secs_f64(), "objects_per_s": per / delete_duration.as_secs_f64(), "requests": delta(&after_delete, &after_resync, per)},
        "peak_rss_mib": peak,
    });
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&result).unwrap()).unwrap();
    println!(
        "object-provider benchmark, {n} Objects ({} build)",
        result["profile"].as_str().unwrap()
    );
    println!(
        "  create       {:>8.1} Objects/s   ready p50 {:.3}s  p99 {:.3}s   {:.2} requests/Object ({:.2} writes)",
        result["create"]["objects_per_s"].as_f64().unwrap(),
        result["create"]["ready_p50_s"].as_f64().unwrap(),
        result["create"]["ready_p99_s"].as_f64().unwrap(),
        result["create"]["requests"]["per_object_total"]
            .as_f64()
            .unwrap(),
        result["create"]["requests"]["per_object_writes"]
            .as_f64()
            .unwrap()
    );
    println!(
        "  no-op resync {:>8.2} requests/Object, {} writes in total",
        result["noop_resync"]["requests"]["per_object_total"]
            .as_f64()
            .unwrap(),
        result["noop_resync"]["requests"]["total_writes"]
    );
    println!(
        "  delete       {:>8.1} Objects/s   {:.2} requests/Object",
        result["delete"]["objects_per_s"].as_f64().unwrap(),
        result["delete"]["requests"]["per_object_total"]
            .as_f64()
            .unwrap()
    );
    println!("  peak RSS     {peak:.1} MiB");
    println!(
        "  by verb on create: {}",
        result["create"]["requests"]["per_object_by_verb"]
    );
    println!("written to {}", out.display());
}

fn humantime_secs(s: &str) -> Duration {
    Duration::from_secs(s.trim_end_matches('s').parse().unwrap())
}
