//! `object-bench`: the object-provider benchmark (a command, not a timed
//! test). Starts a local control plane whose API servers write audit logs,
//! runs the object-provider as its shipped ServiceAccount (and, in the
//! remote cluster, as a user of its own), and measures, phase by phase:
//!
//! - null writer: N plain ConfigMaps applied to the control cluster at the
//!   same concurrency, the API server's own ceiling for this machine;
//! - create: N Objects (default 1000) each managing a ConfigMap in the
//!   remote cluster: Objects/s (also as a fraction of the null writer),
//!   create→Ready p50/p99;
//! - idle: a window (default 2 minutes) with nothing to do, the provider
//!   polling every `--resync` (default 10m): requests per Object-hour;
//! - update: every Object's manifest data changes; time until the remote
//!   ConfigMap carries it;
//! - remote change: another field manager labels K remote ConfigMaps (K=50);
//!   time until the Object's status.atProvider.manifest shows the label;
//! - drift: another field manager changes a data value the Object sets on K
//!   remote ConfigMaps; time until the remote watch sees it put back;
//! - referenced change: K Objects copy a value from a control-cluster
//!   ConfigMap (`fromObject`); the ConfigMaps change; time until the remote
//!   objects carry the new value;
//! - delete: every Object; Objects/s.
//!
//! Each phase reports whether it reached its goal (`reached`, how many of
//! how many, the time waited) rather than failing, the requests per Object
//! counted by the provider's own client (/metrics) and by the API servers
//! (audit logs, the provider's users only), and the provider's CPU seconds
//! and memory. Writes JSON (`--out`, default bench/object-provider.json)
//! and prints a short table.
//!
//!     hack/bench-object-provider.sh [--objects N] [--changes K] ...

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use e2e::bench::{
    AuditMark, Probe, Reached, Usage, latency_json, metrics_delta, scaled_timeout, scrape,
};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::Object;

/// The provider's identity in the remote cluster (a bearer token of its own).
const REMOTE_USER: &str = "bench-object-provider";
/// The provider's identity in the control cluster (impersonated).
const CONTROL_USER: &str = "system:serviceaccount:crossplane-system:object-provider";
/// Where the managed ConfigMaps live in the remote cluster.
const REMOTE_NS: &str = "bench";
/// Where the referenced ConfigMaps live in the control cluster.
const REFS_NS: &str = "bench-refs";

const USAGE: &str = "usage: object-bench [--objects N] [--concurrency C] [--changes K] \
[--resync SECS] [--idle SECS] [--latency-timeout SECS] [--provider-arg ARG]... [--out FILE]";

struct Args {
    objects: usize,
    concurrency: usize,
    changes: usize,
    resync: Duration,
    idle: Duration,
    latency_timeout: Duration,
    provider_args: Vec<String>,
    out: std::path::PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        objects: 1000,
        concurrency: 32,
        changes: 50,
        resync: Duration::from_secs(600),
        idle: Duration::from_secs(120),
        latency_timeout: Duration::from_secs(60),
        provider_args: Vec::new(),
        out: testenv::repo_root().join("bench/object-provider.json"),
    };
    let mut it = std::env::args().skip(1);
    let secs = |v: Option<String>| {
        Duration::from_secs(
            v.unwrap_or_default()
                .trim_end_matches('s')
                .parse()
                .expect(USAGE),
        )
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--objects" => a.objects = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--concurrency" => a.concurrency = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--changes" => a.changes = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--resync" => a.resync = secs(it.next()),
            "--idle" => a.idle = secs(it.next()),
            "--latency-timeout" => a.latency_timeout = secs(it.next()),
            "--provider-arg" => a.provider_args.push(it.next().expect(USAGE)),
            "--out" => a.out = it.next().expect(USAGE).into(),
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    a.changes = a.changes.min(a.objects);
    a
}

fn name(i: usize) -> String {
    format!("bench-{i:05}")
}

fn ref_name(i: usize) -> String {
    format!("bench-ref-{i:05}")
}

/// An Object managing ConfigMap `bench/<name>` in the remote cluster with
/// `data`, and `references`.
fn object(name: &str, data: Value, references: Value) -> Value {
    json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": name},
        "spec": {
            "providerConfigRef": {"name": "bench"},
            "references": references,
            "forProvider": {"manifest": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": REMOTE_NS},
                "data": data,
            }},
        },
    })
}

fn ssa(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// Applies `bodies` (name, body) with `concurrency` at once, recording when
/// each request was sent; returns (sent-at by name, errors).
async fn apply_all<K>(
    api: &Api<K>,
    manager: &str,
    bodies: Vec<(String, Value)>,
    concurrency: usize,
) -> (HashMap<String, Instant>, usize)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let sent = Arc::new(Mutex::new(HashMap::new()));
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let params = ssa(manager);
    futures::stream::iter(bodies)
        .for_each_concurrent(concurrency, |(name, body)| {
            let (sent, errors, params) = (sent.clone(), errors.clone(), params.clone());
            async move {
                sent.lock().unwrap().insert(name.clone(), Instant::now());
                if api
                    .patch(&name, &params, &Patch::Apply(&body))
                    .await
                    .is_err()
                {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
        .await;
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    (sent, errors.load(std::sync::atomic::Ordering::Relaxed))
}

/// The counters at one moment.
struct Mark {
    metrics: BTreeMap<(String, String), f64>,
    audit: AuditMark,
    usage: Usage,
}

struct Bench {
    plane: testenv::ControlPlane,
    provider: e2e::Running,
    users: BTreeMap<String, Vec<String>>,
}

impl Bench {
    fn mark(&self) -> Mark {
        Mark {
            metrics: scrape(self.provider.addr),
            audit: AuditMark::now([&self.plane.control, &self.plane.remote]),
            usage: Usage::of(self.provider.child.id()),
        }
    }

    /// Waits for in-flight work to finish, then marks.
    async fn settle_and_mark(&self) -> Mark {
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.mark()
    }

    /// Requests (metrics and audit) per `per`, and the provider's usage,
    /// between two marks.
    fn between(&self, from: &Mark, to: &Mark, per: f64) -> Value {
        json!({
            "requests": {
                "per": per,
                "metrics": metrics_delta(&to.metrics, &from.metrics, per),
                "audit": from.audit.delta(&to.audit, &self.users, per),
            },
            "provider": to.usage.since_json(&from.usage),
        })
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

fn data_is(key: &'static str, want: String) -> e2e::bench::Predicate {
    Box::new(move |o: &Value| o["data"][key].as_str() == Some(want.as_str()))
}

#[tokio::main]
async fn main() {
    let args = args();
    let n = args.objects;
    let k = args.changes;
    let _ = rustls::crypto::ring::default_provider().install_default();
    eprintln!("object-bench: starting a local control plane (audit logs on)");
    let (plane, _) = testenv::start_local_with(testenv::Options {
        audit: true,
        remotes: 1,
        users: vec![REMOTE_USER.to_owned()],
        ..testenv::Options::default()
    })
    .unwrap();
    let control = plane.control.client().await;
    let remote = plane.remote.client().await;

    // The provider's identities: its ServiceAccount here, a user of its own
    // (cluster-admin) there, through the kubeconfig in the ProviderConfig's
    // Secret.
    e2e::apply_deploy(&plane.control);
    e2e::bench::grant_cluster_admin(&plane.remote, REMOTE_USER);
    e2e::bench::kubeconfig_secret(
        &plane.control,
        "default",
        "bench-kubeconfig",
        plane.remote.kubeconfig_for(REMOTE_USER).unwrap(),
    );
    plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {name: bench}\nspec: {credentials: {source: Secret, secretRef: {namespace: default, name: bench-kubeconfig, key: kubeconfig}}}\n"),
    );
    plane.remote.kubectl(&["create", "namespace", REMOTE_NS]);
    plane.control.kubectl(&["create", "namespace", REFS_NS]);
    plane
        .control
        .kubectl(&["create", "namespace", "bench-null"]);

    let null_writer = null_writer(&control, n, args.concurrency).await;
    eprintln!(
        "object-bench: null writer {:.1} ConfigMaps/s",
        null_writer["creates_per_s"].as_f64().unwrap_or(0.0)
    );

    let object_ar = ApiResource::erase::<Object>(&());
    let objects_dyn: Api<DynamicObject> = Api::all_with(control.clone(), &object_ar);
    let objects: Api<Object> = Api::all(control.clone());
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote.clone(), REMOTE_NS);
    let cm_ar = ApiResource::erase::<ConfigMap>(&());
    let object_probe = Probe::watch(objects_dyn);
    let remote_probe = Probe::watch(Api::namespaced_with(remote.clone(), REMOTE_NS, &cm_ar));
    assert!(object_probe.synced(Duration::from_secs(30)).await);
    assert!(remote_probe.synced(Duration::from_secs(30)).await);

    let kubeconfig = e2e::impersonating_kubeconfig_for(&plane.control, "object-provider");
    let resync = format!("{}s", args.resync.as_secs());
    let mut provider_args = vec![
        "--poll-interval",
        &resync,
        "--concurrency",
        "16",
        "--log-format",
        "json",
    ];
    provider_args.extend(args.provider_args.iter().map(String::as_str));
    let mut provider = e2e::Running::start("object-provider", &kubeconfig, &provider_args);
    provider.wait_healthy(Duration::from_secs(30)).await;
    let mut bench = Bench {
        plane,
        provider,
        users: [
            ("control".to_owned(), vec![CONTROL_USER.to_owned()]),
            ("remote".to_owned(), vec![REMOTE_USER.to_owned()]),
        ]
        .into(),
    };
    let start_mark = bench.mark();
    let mut phases = serde_json::Map::new();

    // create
    eprintln!("object-bench: creating {n} Objects");
    let names: Vec<String> = (0..n).map(name).collect();
    for nm in &names {
        object_probe.expect(
            nm,
            Box::new(|o: &Value| {
                o["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            }),
        );
    }
    let before = bench.mark();
    let started = Instant::now();
    let bodies = (0..n)
        .map(|i| {
            (
                name(i),
                object(&name(i), json!({"i": i.to_string()}), json!([])),
            )
        })
        .collect();
    let (sent, errors) = apply_all(&objects, "object-bench", bodies, args.concurrency).await;
    let reached = object_probe.wait(&names, scaled_timeout(n)).await;
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    let latencies = object_probe.latencies(&sent);
    let objects_per_s = reached.done as f64 / duration.as_secs_f64();
    let ceiling = null_writer["creates_per_s"].as_f64().unwrap_or(f64::NAN);
    phases.insert(
        "create".into(),
        merge(
            merge(reached.json(), bench.between(&before, &after, n as f64)),
            json!({
                "request_errors": errors,
                "duration_s": duration.as_secs_f64(),
                "objects_per_s": objects_per_s,
                "fraction_of_null_writer": objects_per_s / ceiling,
                "ready": latency_json(&latencies),
            }),
        ),
    );
    report("create", &phases["create"]);

    // idle
    eprintln!(
        "object-bench: idle for {:?} (provider --poll-interval {resync})",
        args.idle
    );
    let before = bench.mark();
    tokio::time::sleep(args.idle).await;
    let after = bench.mark();
    let hours = args.idle.as_secs_f64() / 3600.0;
    let idle = bench.between(&before, &after, n as f64);
    let per_object_hour = |v: &Value| v.as_f64().map(|x| x / hours);
    phases.insert(
        "idle".into(),
        merge(
            json!({
                "window_s": args.idle.as_secs_f64(),
                "poll_interval_s": args.resync.as_secs(),
                "metrics_requests_per_object_hour": per_object_hour(&idle["requests"]["metrics"]["per_unit_total"]),
                "audit_requests_per_object_hour": per_object_hour(&idle["requests"]["audit"]["per_unit_total"]),
            }),
            idle,
        ),
    );
    report("idle", &phases["idle"]);

    // update
    eprintln!("object-bench: updating {n} Objects");
    for (i, nm) in names.iter().enumerate() {
        remote_probe.expect(nm, data_is("i", format!("u{i}")));
    }
    let before = bench.mark();
    let started = Instant::now();
    let bodies = (0..n)
        .map(|i| {
            (
                name(i),
                object(&name(i), json!({"i": format!("u{i}")}), json!([])),
            )
        })
        .collect();
    let (sent, errors) = apply_all(&objects, "object-bench", bodies, args.concurrency).await;
    let reached = remote_probe.wait(&names, scaled_timeout(n)).await;
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    phases.insert(
        "update".into(),
        merge(
            merge(reached.json(), bench.between(&before, &after, n as f64)),
            json!({
                "request_errors": errors,
                "duration_s": duration.as_secs_f64(),
                "objects_per_s": reached.done as f64 / duration.as_secs_f64(),
                "remote_changed": latency_json(&remote_probe.latencies(&sent)),
            }),
        ),
    );
    report("update", &phases["update"]);

    let changed: Vec<String> = names.iter().take(k).cloned().collect();
    // A value no earlier run wrote.
    let stamp = format!("t{}", chrono::Utc::now().timestamp());

    // remote change -> status
    eprintln!("object-bench: another manager labels {k} remote ConfigMaps");
    for nm in &changed {
        let want = stamp.clone();
        object_probe.expect(
            nm,
            Box::new(move |o: &Value| {
                o["status"]["atProvider"]["manifest"]["metadata"]["labels"]["bench/changed"]
                    .as_str()
                    == Some(want.as_str())
            }),
        );
    }
    let before = bench.mark();
    let bodies = changed
        .iter()
        .map(|nm| {
            (nm.clone(), json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": nm, "namespace": REMOTE_NS, "labels": {"bench/changed": stamp}}}))
        })
        .collect();
    let (sent, errors) = apply_all(&remote_cms, "bench-labeller", bodies, args.concurrency).await;
    let reached = object_probe.wait(&changed, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    phases.insert(
        "remote_change".into(),
        latency_phase(
            &bench,
            reached,
            errors,
            &before,
            &after,
            k,
            "status_shows_it",
            object_probe.latencies(&sent),
        ),
    );
    report("remote_change", &phases["remote_change"]);

    // drift -> revert
    eprintln!("object-bench: another manager changes data.i on {k} remote ConfigMaps");
    let before = bench.mark();
    let mut sent = HashMap::new();
    let mut errors = 0;
    for (i, nm) in changed.iter().enumerate() {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": nm, "namespace": REMOTE_NS}, "data": {"i": "drifted"}});
        // Expected before the edit is sent: the provider may put the value
        // back before the edit's answer reaches this benchmark. Met by the
        // first event with our value after one with the drifted value.
        let want = format!("u{i}");
        let seen_drift = std::sync::atomic::AtomicBool::new(false);
        remote_probe.expect(
            nm,
            Box::new(move |o: &Value| {
                use std::sync::atomic::Ordering::SeqCst;
                match o["data"]["i"].as_str() {
                    Some("drifted") => {
                        seen_drift.store(true, SeqCst);
                        false
                    }
                    Some(v) => v == want && seen_drift.load(SeqCst),
                    None => false,
                }
            }),
        );
        sent.insert(nm.clone(), Instant::now());
        if remote_cms
            .patch(nm, &ssa("bench-drifter"), &Patch::Apply(&body))
            .await
            .is_err()
        {
            errors += 1;
        }
    }
    let reached = remote_probe.wait(&changed, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    phases.insert(
        "drift".into(),
        latency_phase(
            &bench,
            reached,
            errors,
            &before,
            &after,
            k,
            "reverted",
            remote_probe.latencies(&sent),
        ),
    );
    report("drift", &phases["drift"]);

    // referenced change
    eprintln!("object-bench: {k} Objects referencing control-cluster ConfigMaps");
    let refs: Vec<String> = (0..k).map(ref_name).collect();
    let control_cms: Api<ConfigMap> = Api::namespaced(control.clone(), REFS_NS);
    let cm = |nm: &str, v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": nm, "namespace": REFS_NS}, "data": {"v": v}});
    apply_all(
        &control_cms,
        "object-bench",
        refs.iter().map(|r| (r.clone(), cm(r, "a0"))).collect(),
        args.concurrency,
    )
    .await;
    for r in &refs {
        remote_probe.expect(r, data_is("v", "a0".to_owned()));
    }
    let bodies = refs
        .iter()
        .map(|r| {
            let references = json!([{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": r, "namespace": REFS_NS, "fieldPath": "data.v"},
                "toFieldPath": "spec.forProvider.manifest.data.v"}]);
            (r.clone(), object(r, json!({"i": "ref"}), references))
        })
        .collect();
    apply_all(&objects, "object-bench", bodies, args.concurrency).await;
    let setup = remote_probe.wait(&refs, scaled_timeout(k)).await;
    let new_value = format!("b-{stamp}");
    for r in &refs {
        remote_probe.expect(r, data_is("v", new_value.clone()));
    }
    let before = bench.settle_and_mark().await;
    let (sent, errors) = apply_all(
        &control_cms,
        "object-bench",
        refs.iter()
            .map(|r| (r.clone(), cm(r, &new_value)))
            .collect(),
        args.concurrency,
    )
    .await;
    let reached = remote_probe.wait(&refs, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    phases.insert(
        "referenced_change".into(),
        merge(
            latency_phase(
                &bench,
                reached,
                errors,
                &before,
                &after,
                k,
                "remote_carries_it",
                remote_probe.latencies(&sent),
            ),
            json!({"setup": setup.json()}),
        ),
    );
    report("referenced_change", &phases["referenced_change"]);

    // delete
    let all: Vec<String> = names.iter().chain(&refs).cloned().collect();
    eprintln!("object-bench: deleting {} Objects", all.len());
    let before = bench.mark();
    let started = Instant::now();
    futures::stream::iter(all.clone())
        .for_each_concurrent(args.concurrency, |nm| {
            let objects = objects.clone();
            async move {
                let _ = objects.delete(&nm, &DeleteParams::default()).await;
            }
        })
        .await;
    let (gone, waited) = e2e::bench::wait_until(scaled_timeout(all.len()), || async {
        objects
            .list_metadata(&ListParams::default().limit(1))
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let left = objects
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(all.len());
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    let deleted = Reached {
        done: all.len() - left.min(all.len()),
        of: all.len(),
        waited,
    };
    debug_assert_eq!(gone, deleted.all());
    phases.insert(
        "delete".into(),
        merge(
            merge(deleted.json(), bench.between(&before, &after, all.len() as f64)),
            json!({"duration_s": duration.as_secs_f64(), "objects_per_s": deleted.done as f64 / duration.as_secs_f64()}),
        ),
    );
    report("delete", &phases["delete"]);

    let end = Usage::of(bench.provider.child.id());
    // A provider that died part way explains phases that did not finish.
    let exited = bench
        .provider
        .child
        .try_wait()
        .ok()
        .flatten()
        .map(|status| status.to_string());
    let result = json!({
        "benchmark": "object-provider",
        "date": e2e::bench::now(),
        "machine": e2e::bench::machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "objects": n,
        "changes": k,
        "concurrency": args.concurrency,
        "provider_args": provider_args,
        "users": {"control": CONTROL_USER, "remote": REMOTE_USER},
        "null_writer": null_writer,
        "provider": {"peak_rss_mib": end.peak_rss_mib, "rss_mib": end.rss_mib, "cpu_s": end.cpu_s - start_mark.usage.cpu_s},
        "provider_exited": exited,
        // JSON objects have no order; this is the order the phases ran in.
        "phase_order": ["create", "idle", "update", "remote_change", "drift", "referenced_change", "delete"],
        "phases": phases,
    });
    e2e::bench::write_json(&args.out, &result);
    println!(
        "object-provider: {n} Objects, peak RSS {:.1} MiB, {:.1} CPU s; written to {}",
        end.peak_rss_mib,
        end.cpu_s - start_mark.usage.cpu_s,
        args.out.display()
    );
}

#[allow(clippy::too_many_arguments)]
fn latency_phase(
    bench: &Bench,
    reached: Reached,
    errors: usize,
    before: &Mark,
    after: &Mark,
    k: usize,
    what: &str,
    latencies: Vec<f64>,
) -> Value {
    let mut v = merge(reached.json(), bench.between(before, after, k as f64));
    v["request_errors"] = json!(errors);
    v[what] = latency_json(&latencies);
    v
}

/// One line per phase on stderr while the benchmark runs.
fn report(phase: &str, v: &Value) {
    let f = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_f64)
            .map(|x| format!("{x:.3}"))
            .unwrap_or_else(|| "-".into())
    };
    eprintln!(
        "  {phase:<18} reached {} ({}/{}) in {}s; requests/unit metrics {} audit {}; p50 {} p99 {}",
        v["reached"],
        v["done"],
        v["of"],
        f("/waited_s"),
        f("/requests/metrics/per_unit_total"),
        f("/requests/audit/per_unit_total"),
        [
            "/ready/p50_s",
            "/remote_changed/p50_s",
            "/status_shows_it/p50_s",
            "/reverted/p50_s",
            "/remote_carries_it/p50_s"
        ]
        .iter()
        .map(|p| f(p))
        .find(|s| s != "-")
        .unwrap_or_else(|| "-".into()),
        [
            "/ready/p99_s",
            "/remote_changed/p99_s",
            "/status_shows_it/p99_s",
            "/reverted/p99_s",
            "/remote_carries_it/p99_s"
        ]
        .iter()
        .map(|p| f(p))
        .find(|s| s != "-")
        .unwrap_or_else(|| "-".into()),
    );
}

/// The API server's own ceiling: `n` plain ConfigMaps applied to the
/// control cluster at `concurrency`, as the benchmark applies Objects; then
/// removed (one deletecollection) so they do not weigh on what follows.
async fn null_writer(control: &Client, n: usize, concurrency: usize) -> Value {
    let api: Api<ConfigMap> = Api::namespaced(control.clone(), "bench-null");
    let bodies = (0..n)
        .map(|i| {
            let nm = name(i);
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": nm, "namespace": "bench-null", "labels": {"bench": "null"}},
                "data": {"i": i.to_string()}});
            (nm, body)
        })
        .collect();
    let started = Instant::now();
    let (_, errors) = apply_all(&api, "object-bench", bodies, concurrency).await;
    let duration = started.elapsed();
    // Only ours: the namespace also holds kube-root-ca.crt.
    let ours = ListParams::default().labels("bench=null");
    let cleared = match api.delete_collection(&DeleteParams::default(), &ours).await {
        Ok(_) => {
            e2e::bench::wait_until(scaled_timeout(n), || async {
                api.list_metadata(&ours.clone().limit(1))
                    .await
                    .is_ok_and(|l| l.items.is_empty())
            })
            .await
            .0
        }
        Err(e) => {
            eprintln!("object-bench: removing the null writer's ConfigMaps: {e}");
            false
        }
    };
    json!({
        "configmaps": n,
        "concurrency": concurrency,
        "request_errors": errors,
        "duration_s": duration.as_secs_f64(),
        "creates_per_s": (n - errors) as f64 / duration.as_secs_f64(),
        "cleared": cleared,
    })
}
