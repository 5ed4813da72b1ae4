//! What every phase uses: the names and bodies the benchmark writes, the
//! provider under test and the counters marked around each phase, and the
//! one-line report of a phase.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use benchmarks::{AuditMark, Reached, Usage, latency_json, metrics_delta, scrape};
use futures::StreamExt as _;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::args::Shape;

/// The provider's identity in the remote cluster (a bearer token of its own).
pub const REMOTE_USER: &str = "bench-object-provider";
/// The provider's identity in the control cluster (impersonated).
pub const CONTROL_USER: &str = "system:serviceaccount:crossplane-system:object-provider";
/// Where the managed ConfigMaps live in the remote cluster.
pub const REMOTE_NS: &str = "bench";
/// Where the referenced ConfigMaps live in the control cluster.
pub const REFS_NS: &str = "bench-refs";

/// The name of Object `i`.
pub fn name(i: usize) -> String {
    format!("bench-{i:05}")
}

/// The name of referencing Object `i`.
pub fn ref_name(i: usize) -> String {
    format!("bench-ref-{i:05}")
}

/// Where namespaced Objects live: beside the ConfigMaps they reference,
/// as a tenant's do (a namespaced Object reads only its own namespace).
pub const OBJECTS_NS: &str = REFS_NS;

/// An Object of `shape` managing ConfigMap `bench/<name>` in the remote
/// cluster with `data`, copying `data.v` of ConfigMap `bench-refs/<from>`
/// into its `data.v` when `from` is given.
pub fn object(shape: Shape, name: &str, data: Value, from: Option<&str>) -> Value {
    let manifest = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": REMOTE_NS},
        "data": data,
    });
    let source = |r: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": r, "namespace": REFS_NS, "fieldPath": "data.v"});
    match shape {
        Shape::V1alpha1 => json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": name},
            "spec": {
                "providerConfigRef": {"name": "bench"},
                "references": from.map(|r| vec![json!({"fromObject": source(r),
                    "toFieldPath": "spec.forProvider.manifest.data.v"})]).unwrap_or_default(),
                "forProvider": {"manifest": manifest},
            },
        }),
        Shape::V1alpha2 | Shape::Namespaced => {
            let references: Vec<Value> = from
                .map(|r| vec![json!({"patchesFrom": source(r), "toFieldPath": "data.v"})])
                .unwrap_or_default();
            let (api_version, metadata, config) = if shape == Shape::Namespaced {
                (
                    "kubernetes.m.crossplane.io/v1alpha1",
                    json!({"name": name, "namespace": OBJECTS_NS}),
                    json!({"kind": "ClusterProviderConfig", "name": "bench"}),
                )
            } else {
                (
                    "kubernetes.crossplane.io/v1alpha2",
                    json!({"name": name}),
                    json!({"name": "bench"}),
                )
            };
            json!({
                "apiVersion": api_version, "kind": "Object", "metadata": metadata,
                "spec": {
                    "managementPolicies": ["*"],
                    "providerConfigRef": config,
                    "references": references,
                    "forProvider": {"manifest": manifest},
                },
            })
        }
    }
}

/// The kind of `shape`'s Objects.
pub fn object_resource(shape: Shape) -> kube::discovery::ApiResource {
    use kube::discovery::ApiResource;
    match shape {
        Shape::V1alpha1 => ApiResource::erase::<types::kubernetes::v1alpha1::Object>(&()),
        Shape::V1alpha2 => ApiResource::erase::<types::kubernetes::v1alpha2::Object>(&()),
        Shape::Namespaced => ApiResource::erase::<types::kubernetes_m::v1alpha1::Object>(&()),
    }
}

/// `shape`'s Objects, as `client` reads and writes them.
pub fn objects_api(shape: Shape, client: kube::Client) -> Api<kube::api::DynamicObject> {
    let kind = object_resource(shape);
    match shape {
        Shape::Namespaced => Api::namespaced_with(client, OBJECTS_NS, &kind),
        _ => Api::all_with(client, &kind),
    }
}

/// Server-side apply as `manager`, taking over conflicting fields.
pub fn ssa(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// Applies `bodies` (name, body) with `concurrency` at once, recording when
/// each request was sent; returns (sent-at by name, errors).
pub async fn apply_all<K>(
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
pub struct Mark {
    pub metrics: BTreeMap<(String, String), f64>,
    pub audit: AuditMark,
    pub usage: Usage,
}

/// The plane, the provider under test, and whose requests count.
pub struct Bench {
    pub plane: testenv::ControlPlane,
    pub provider: e2e::Running,
    pub users: BTreeMap<String, Vec<String>>,
}

impl Bench {
    pub fn mark(&self) -> Mark {
        Mark {
            metrics: scrape(self.provider.addr),
            audit: AuditMark::now([&self.plane.control, &self.plane.remote]),
            usage: Usage::of(self.provider.child.id()),
        }
    }

    /// Waits for in-flight work to finish, then marks.
    pub async fn settle_and_mark(&self) -> Mark {
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.mark()
    }

    /// Requests (metrics and audit) per `per`, and the provider's usage,
    /// between two marks.
    pub fn between(&self, from: &Mark, to: &Mark, per: f64) -> Value {
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

/// `a` with `b`'s fields added.
pub fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Met when the object's `data.<key>` is `want`.
pub fn data_is(key: &'static str, want: String) -> benchmarks::Predicate {
    Box::new(move |o: &Value| o["data"][key].as_str() == Some(want.as_str()))
}

/// A latency phase's JSON: reached, requests, errors, and the latencies
/// under `what`.
#[allow(clippy::too_many_arguments)] // each is one field of the JSON
pub fn latency_phase(
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
pub fn report(phase: &str, v: &Value) {
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
