//! What a phase measures once its condition holds: the control API
//! server's memory (its RSS from /proc, and its Go heap and resident bytes
//! from its own /metrics), etcd's and the package-manager's RSS, and how
//! many CRDs and MRDs there are. Memory is sampled after the phase has
//! settled, several times, and the median kept: the Go heap moves with
//! every collection.

use std::{collections::BTreeMap, time::Duration};

use benchmarks::Usage;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, ResourceExt as _, api::ListParams};
use serde_json::{Value, json};
use types::apiextensions::v1alpha1::{ManagedResourceDefinition, ManagedResourceDefinitionState};

use crate::package::GROUP;

const MIB: f64 = 1024.0 * 1024.0;

/// The figures of one sample, by name (MiB).
pub type Sample = BTreeMap<&'static str, f64>;

/// The processes a sample reads.
pub struct Processes {
    pub api_server: u32,
    pub etcd: u32,
    pub package_manager: u32,
}

impl Processes {
    /// The control API server and etcd of `plane`, and the package-manager.
    pub fn of(plane: &testenv::ControlPlane, package_manager: u32) -> Self {
        let pid = |name: &str| benchmarks::plane_pid(plane, name);
        Self {
            api_server: pid("kube-apiserver-control"),
            etcd: pid("etcd"),
            package_manager,
        }
    }
}

/// How a phase is sampled.
#[derive(Clone, Copy)]
pub struct Sampling {
    /// Wait after the condition holds, before the first sample.
    pub settle: Duration,
    /// How many samples.
    pub samples: usize,
    /// Apart by.
    pub every: Duration,
}

/// One sample, now.
pub fn sample(control: &testenv::Cluster, p: &Processes) -> Sample {
    let metrics = control
        .kubectl_ok(&["get", "--raw", "/metrics"])
        .unwrap_or_default();
    let metric = |name: &str| e2e::metric_sum(&metrics, name, &[]) / MIB;
    Sample::from([
        ("api_server_rss_mib", Usage::of(p.api_server).rss_mib),
        (
            "api_server_go_heap_inuse_mib",
            metric("go_memstats_heap_inuse_bytes"),
        ),
        (
            "api_server_go_heap_alloc_mib",
            metric("go_memstats_heap_alloc_bytes"),
        ),
        (
            "api_server_process_resident_mib",
            metric("process_resident_memory_bytes"),
        ),
        ("etcd_rss_mib", Usage::of(p.etcd).rss_mib),
        (
            "package_manager_rss_mib",
            Usage::of(p.package_manager).rss_mib,
        ),
    ])
}

/// The median of each figure of `samples`.
pub fn median(samples: &[Sample]) -> Sample {
    let mut out = Sample::new();
    for key in samples.first().map(|s| s.keys()).into_iter().flatten() {
        let mut values: Vec<f64> = samples.iter().filter_map(|s| s.get(key).copied()).collect();
        values.sort_by(f64::total_cmp);
        if let Some(m) = benchmarks::percentile(&values, 0.5) {
            out.insert(key, m);
        }
    }
    out
}

/// Waits `settle`, takes the samples, then one more right after forcing
/// the API server to collect its garbage (a heap profile with `gc=1`): its
/// live heap, steadier than any sample between collections. Returns the
/// samples, their median, and the one after the collection.
pub async fn settled(
    control: &testenv::Cluster,
    p: &Processes,
    s: Sampling,
) -> (Vec<Sample>, Sample, Sample) {
    tokio::time::sleep(s.settle).await;
    let mut samples = Vec::new();
    for i in 0..s.samples {
        if i > 0 {
            tokio::time::sleep(s.every).await;
        }
        samples.push(sample(control, p));
    }
    let median = median(&samples);
    let gc = control.kubectl(&["get", "--raw", "/debug/pprof/heap?gc=1"]);
    let after_gc = if gc.status.success() {
        sample(control, p)
    } else {
        eprintln!(
            "  no forced collection: {}",
            String::from_utf8_lossy(&gc.stderr).trim()
        );
        Sample::new()
    };
    (samples, median, after_gc)
}

/// The CRDs and MRDs now: all of them, and the benchmark group's (how many
/// are Established; how many MRDs Active and Inactive).
pub async fn counts(client: &Client) -> Value {
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list CRDs")
        .items;
    let ours: Vec<&CustomResourceDefinition> =
        crds.iter().filter(|c| c.spec.group == GROUP).collect();
    let established = ours
        .iter()
        .filter(|c| runtime::crds::established(c))
        .count();
    let mrds = Api::<ManagedResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list MRDs")
        .items;
    let state = |s: ManagedResourceDefinitionState| {
        mrds.iter()
            .filter(|m| m.name_any().ends_with(GROUP) && m.spec.state == s)
            .count()
    };
    json!({
        "crds": crds.len(),
        "bench_crds": ours.len(),
        "bench_crds_established": established,
        "mrds": mrds.len(),
        "bench_mrds_active": state(ManagedResourceDefinitionState::Active),
        "bench_mrds_inactive": state(ManagedResourceDefinitionState::Inactive),
    })
}

/// Whether a CRD, as JSON, is Established.
pub fn established(v: &Value) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// Phases 1 to 3 against the baseline (phase 0), for each figure: what the
/// Inactive MRDs, one activated kind and all N kinds add; per CRD with all
/// installed, and per CRD beyond the first (the marginal one); and how
/// many times one activated kind's cost all N cost.
pub fn compare(phases: [&Sample; 4], kinds: usize) -> Value {
    let [p0, p1, p2, p3] = phases;
    let mut out = serde_json::Map::new();
    for (key, base) in p0 {
        let at = |p: &Sample| p.get(key).copied().unwrap_or(f64::NAN) - base;
        let (inactive, one, all) = (at(p1), at(p2), at(p3));
        out.insert(
            (*key).to_owned(),
            json!({
                "inactive_mrds_minus_baseline": inactive,
                "one_activated_minus_baseline": one,
                "all_installed_minus_baseline": all,
                "all_installed_per_crd": all / kinds as f64,
                "all_installed_per_crd_beyond_one": (all - one) / (kinds as f64 - 1.0).max(1.0),
                "all_installed_per_crd_beyond_inactive": (all - inactive) / kinds as f64,
                "ratio_all_to_one": all / one,
            }),
        );
    }
    Value::Object(out)
}
