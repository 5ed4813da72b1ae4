//! `mrd-bench`: what ManagedResourceDefinitions save the control API server
//! (a command, not a timed test). Starts a local control plane with a node
//! (for the registry the package is pushed to), runs the package-manager as
//! its shipped ServiceAccount with no default activation policy and no
//! runtime (`--package-runtime=External`), and installs one Provider
//! package of N managed-resource CRDs (default 100) in one group, each with
//! a schema the size of a generated (upjet) provider's, its meta declaring
//! SafeStart. Phase by phase, in one run:
//!
//! 0. baseline: the project's CRDs only (the package-manager running);
//! 1. inactive: the Provider installed, no policy: N Inactive MRDs, none of
//!    its CRDs;
//! 2. one activated: a policy naming `kind000s.bench-mrd.example.org`,
//!    until that CRD is Established;
//! 3. all activated: a policy `*.bench-mrd.example.org`, until all N CRDs
//!    are Established.
//!
//! Each phase records the time from its apply to its condition, the CRDs
//! and MRDs, and, after it has settled (30 s, then 5 samples 5 s apart,
//! the median kept), the control API server's RSS (/proc), its Go heap
//! in use and allocated and its resident bytes (its /metrics), etcd's and
//! the package-manager's RSS; and one more sample right after forcing the
//! API server to collect its garbage. The JSON compares phases 1 to 3
//! with the baseline: per CRD, and how many times one activated kind's
//! cost all N cost. Writes `--out` (default bench/mrds-100.json).
//!
//!     hack/bench-mrds.sh [--kinds N] [--properties P] [--settle SECS] [--out FILE]

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod measure;
mod package;

use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use benchmarks::Probe;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, api::DynamicObject, discovery::ApiResource};
use serde_json::{Value, json};
use types::apiextensions::v1alpha1::ManagedResourceDefinition;

use measure::{Processes, Sample, Sampling};
use package::{GROUP, PROVIDER, crd_name};

const USAGE: &str = "usage: mrd-bench [--kinds N] [--properties P] [--settle SECS] [--out FILE]";

/// What one run measures, and where it writes.
struct Args {
    kinds: usize,
    /// Described string fields per kind, half under spec.forProvider and
    /// half under status.atProvider.
    properties: usize,
    sampling: Sampling,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        kinds: 100,
        properties: 300,
        sampling: Sampling {
            settle: Duration::from_secs(30),
            samples: 5,
            every: Duration::from_secs(5),
        },
        out: testenv::repo_root().join("bench/mrds-100.json"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--kinds" => a.kinds = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--properties" => a.properties = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--settle" => {
                a.sampling.settle = it
                    .next()
                    .and_then(|v| v.trim_end_matches('s').parse().ok())
                    .map(Duration::from_secs)
                    .expect(USAGE)
            }
            "--out" => a.out = it.next().expect(USAGE).into(),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    assert!(a.kinds >= 2, "--kinds must be at least 2; {USAGE}");
    a
}

/// What the phases share.
struct Run {
    plane: testenv::ControlPlane,
    client: kube::Client,
    processes: Processes,
    sampling: Sampling,
    /// Watches CRDs: when each became Established.
    crds: Probe,
    /// Watches MRDs: when each was made Inactive.
    mrds: Probe,
}

#[tokio::main]
async fn main() {
    let args = args();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (begun, started) = (Instant::now(), benchmarks::now());
    eprintln!("mrd-bench: starting a local control plane with a node (for the registry)");
    // Audit logs on: testenv serves the API servers' /debug/pprof (which
    // forces a collection) only then.
    let (plane, _) = testenv::start_local_with(testenv::Options {
        node: true,
        audit: true,
        ..testenv::Options::default()
    })
    .unwrap();
    let node = plane.node.as_ref().expect("the node");
    let registry =
        testenv::registry::Registry::start(&plane, node, "bench-registry.crossplane-rs.test", None)
            .unwrap();
    let work = std::env::temp_dir().join(testenv::unique_name("mrd-bench"));
    std::fs::create_dir_all(&work).unwrap();
    let ca_file = work.join("registry-ca.pem");
    std::fs::write(&ca_file, &registry.ca_pem).unwrap();
    let pushed = package::push(&registry, &work, args.kinds, args.properties).await;
    eprintln!(
        "mrd-bench: pushed {} ({} kinds, {:.0} bytes per CRD on average)",
        pushed.reference, args.kinds, pushed.crd_bytes_average
    );

    identity(&plane.control);
    let kubeconfig = e2e::impersonating_kubeconfig_for(&plane.control, "package-manager");
    let pm_args = vec![
        format!("--ca-bundle-path={}", ca_file.display()),
        "--package-runtime=External".to_owned(),
        format!("--package-cache-dir={}", work.join("cache").display()),
    ];
    let refs: Vec<&str> = pm_args.iter().map(String::as_str).collect();
    let mut pm = e2e::Running::start("package-manager", &kubeconfig, &refs);
    pm.wait_healthy_on(&plane.control, Duration::from_secs(60))
        .await;

    let client = plane.control.client().await;
    let erase = |ar: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &ar);
    let crds = Probe::watch(erase(ApiResource::erase::<CustomResourceDefinition>(&())));
    let mrds = Probe::watch(erase(ApiResource::erase::<ManagedResourceDefinition>(&())));
    assert!(crds.synced(Duration::from_secs(30)).await);
    assert!(mrds.synced(Duration::from_secs(30)).await);
    let run = Run {
        processes: Processes::of(&plane, pm.child.id()),
        plane,
        client,
        sampling: args.sampling,
        crds,
        mrds,
    };

    let n = args.kinds;
    let all: Vec<String> = (0..n).map(crd_name).collect();
    let baseline = phase(&run, "baseline", None, Value::Null).await;

    eprintln!("mrd-bench: phase 1, the Provider with no policy");
    for name in &all {
        run.mrds
            .expect(name, Box::new(|v| v["spec"]["state"] == "Inactive"));
    }
    let t = Instant::now();
    apply(
        &run.plane.control,
        &package::provider_yaml(&pushed.reference),
    );
    let (mrds_reached, healthy) = tokio::join!(
        run.mrds.wait(&all, phase_timeout(n)),
        provider_healthy(&run, t, phase_timeout(n)),
    );
    let at = HashMap::from_iter(all.iter().map(|m| (m.clone(), t)));
    let took = run.mrds.latencies(&at).last().copied().unwrap_or(f64::NAN);
    let timing = json!({
        "mrds_inactive": mrds_reached.json(),
        "provider_healthy": {"reached": healthy.0, "apply_to_healthy_s": healthy.1.as_secs_f64()},
        "apply_to_last_mrd_s": took,
        "apply_to_condition_s": took.max(healthy.1.as_secs_f64()),
    });
    let inactive = phase(&run, "inactive", Some(PROVIDER), timing).await;

    eprintln!("mrd-bench: phase 2, a policy activating {}", all[0]);
    let one = activate(&run, "bench-one", &[&all[0]], &all[..1]).await;
    eprintln!("mrd-bench: phase 3, a policy activating *.{GROUP}");
    let every = activate(&run, "bench-all", &[&format!("*.{GROUP}")], &all[1..]).await;

    let exited = pm.child.try_wait().ok().flatten().map(|s| s.to_string());
    let phases = [&baseline, &inactive, &one, &every];
    let figures = |key: &str| phases.map(|p| sample_of(&p[key]));
    let [m0, m1, m2, m3] = figures("median");
    let [g0, g1, g2, g3] = figures("after_forced_gc");
    let comparison = json!({
        "median": measure::compare([&m0, &m1, &m2, &m3], n),
        "after_forced_gc": measure::compare([&g0, &g1, &g2, &g3], n),
    });
    let sampling = args.sampling;
    let result = json!({
        "benchmark": "mrds",
        "command": std::iter::once("hack/bench-mrds.sh".to_owned()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" "),
        "started": started,
        "date": benchmarks::now(),
        "duration_s": begun.elapsed().as_secs_f64(),
        "machine": benchmarks::machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "api_server_version": server_version(&run.plane.control),
        "kinds": n,
        "properties_per_kind": {"spec_for_provider": args.properties / 2, "status_at_provider": args.properties - args.properties / 2},
        "package": {
            "reference": pushed.reference, "digest": pushed.digest,
            "crd_bytes_average": pushed.crd_bytes_average, "crd_bytes_total": pushed.crd_bytes_total,
            "layer_bytes": pushed.layer_bytes, "layer_uncompressed_bytes": pushed.layer_uncompressed_bytes,
            "capabilities": ["SafeStart"],
        },
        "package_manager_args": pm_args,
        "package_manager_exited": exited,
        "sampling": {"settle_s": sampling.settle.as_secs_f64(), "samples": sampling.samples, "every_s": sampling.every.as_secs_f64(), "statistic": "median"},
        "phase_order": ["baseline", "inactive", "one_activated", "all_activated"],
        "phases": {"baseline": baseline, "inactive": inactive, "one_activated": one, "all_activated": every},
        "comparison": comparison,
        "notes": notes(&sampling),
    });
    benchmarks::write_json(&args.out, &result);
    summary(&result, &args.out);
    drop(pm);
    let _ = std::fs::remove_dir_all(&work);
}

/// How long phase 1 or 3 may take for `n` kinds: 2 minutes, and 3 s a kind.
fn phase_timeout(n: usize) -> Duration {
    Duration::from_secs(120) + Duration::from_secs(3) * n as u32
}

/// The package-manager's namespace, ServiceAccount and RBAC from deploy/
/// (no Deployment: it runs here, impersonating that ServiceAccount).
fn identity(control: &testenv::Cluster) {
    for file in [
        "deploy/base/namespace.yaml",
        "deploy/base/package-manager/serviceaccount.yaml",
        "deploy/base/package-manager/rbac.yaml",
    ] {
        let path = testenv::repo_root().join(file);
        control
            .kubectl_ok(&["apply", "--server-side", "-f", &path.to_string_lossy()])
            .unwrap();
    }
}

fn apply(control: &testenv::Cluster, yaml: &str) {
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "applying {yaml}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the Provider is Installed and Healthy: whether it was, and
/// how long after `applied` (to the poll, every 250 ms).
async fn provider_healthy(run: &Run, applied: Instant, timeout: Duration) -> (bool, Duration) {
    let ar = ApiResource::erase::<types::pkg::v1::Provider>(&());
    let providers = Api::<DynamicObject>::all_with(run.client.clone(), &ar);
    let (healthy, _) = benchmarks::wait_until(timeout, || async {
        providers
            .get_opt(PROVIDER)
            .await
            .ok()
            .flatten()
            .is_some_and(|p| {
                let v = serde_json::to_value(&p).unwrap_or_default();
                ["Installed", "Healthy"]
                    .iter()
                    .all(|c| e2e::packages::condition(&v, c).is_some_and(|(s, _)| s == "True"))
            })
    })
    .await;
    (healthy, applied.elapsed())
}

/// Applies policy `name` activating `patterns`, waits until each of
/// `crds` is Established, and measures.
async fn activate(run: &Run, name: &str, patterns: &[&str], crds: &[String]) -> Value {
    for crd in crds {
        run.crds.expect(crd, Box::new(measure::established));
    }
    let t = Instant::now();
    apply(&run.plane.control, &package::policy_yaml(name, patterns));
    let reached = run.crds.wait(crds, phase_timeout(crds.len())).await;
    let at = HashMap::from_iter(crds.iter().map(|c| (c.clone(), t)));
    let latencies = run.crds.latencies(&at);
    let timing = json!({
        "crds_established": reached.json(),
        "apply_to_first_established_s": latencies.first(),
        "apply_to_condition_s": latencies.last(),
    });
    let applied = format!("ManagedResourceActivationPolicy {name}: {patterns:?}");
    phase(run, name, Some(&applied), timing).await
}

/// Measures a phase whose condition holds (or has timed out: `timing`
/// says): its CRDs and MRDs, and its settled samples.
async fn phase(run: &Run, name: &str, applied: Option<&str>, timing: Value) -> Value {
    eprintln!(
        "mrd-bench: {name}: condition after {} s; settling {:?}, then {} samples {:?} apart",
        timing["apply_to_condition_s"].as_f64().unwrap_or(0.0),
        run.sampling.settle,
        run.sampling.samples,
        run.sampling.every
    );
    let (samples, median, after_gc) =
        measure::settled(&run.plane.control, &run.processes, run.sampling).await;
    let counts = measure::counts(&run.client).await;
    eprintln!("  {name}: {counts}; median {median:?}");
    json!({
        "applied": applied,
        "timing": timing,
        "counts": counts,
        "median": median,
        "after_forced_gc": after_gc,
        "samples": samples,
    })
}

/// A sample back from its JSON.
fn sample_of(v: &Value) -> Sample {
    const KEYS: [&str; 6] = [
        "api_server_rss_mib",
        "api_server_go_heap_inuse_mib",
        "api_server_go_heap_alloc_mib",
        "api_server_process_resident_mib",
        "etcd_rss_mib",
        "package_manager_rss_mib",
    ];
    KEYS.iter()
        .filter_map(|k| Some((*k, v.get(*k)?.as_f64()?)))
        .collect()
}

fn server_version(control: &testenv::Cluster) -> Value {
    control
        .kubectl_ok(&["version", "-o", "json"])
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .map(|v| v["serverVersion"]["gitVersion"].clone())
        .unwrap_or(Value::Null)
}

fn notes(s: &Sampling) -> Vec<String> {
    vec![
        format!(
            "Memory in MiB. Each phase's figures are the median of {} samples {} s apart, taken {} s after its condition held. The Go heap grows between collections (the samples of a phase rise), so a median heap depends on where the collector was; after_forced_gc, one more sample right after a heap profile with gc=1 made the API server collect, is its live heap: compare heaps there.",
            s.samples,
            s.every.as_secs(),
            s.settle.as_secs()
        ),
        "A Go process's RSS seldom shrinks, so a phase's RSS keeps what earlier phases freed; but the forced collection ending each phase lets the runtime return memory, so a phase's RSS can be below the one before it.".to_owned(),
        "The package-manager runs before the baseline (no --activation, --package-runtime=External, as its ServiceAccount): the baseline includes its watches. The Inactive MRDs of phase 1 are stored objects too, each holding its CRD's schema; phase 2 includes them.".to_owned(),
        "Properties per kind are split between spec.forProvider and status.atProvider: 300 (about 48 KB per CRD) keeps 100 kinds under the package-manager's 8 MiB bound on package.yaml, which 300 under each would exceed.".to_owned(),
        "Audit logs are on (testenv serves /debug/pprof only then), as in the other benchmarks.".to_owned(),
    ]
}

/// One line per phase and the comparison's headline.
fn summary(result: &Value, out: &std::path::Path) {
    for p in ["baseline", "inactive", "one_activated", "all_activated"] {
        let ph = &result["phases"][p];
        println!(
            "{p:14} condition {:>6.1} s  api-server RSS {:>8.1}  heap in use {:>8.1} (after GC {:>8.1})  etcd {:>6.1}  package-manager {:>6.1}  CRDs {} Inactive MRDs {}",
            ph["timing"]["apply_to_condition_s"].as_f64().unwrap_or(0.0),
            ph["median"]["api_server_rss_mib"]
                .as_f64()
                .unwrap_or(f64::NAN),
            ph["median"]["api_server_go_heap_inuse_mib"]
                .as_f64()
                .unwrap_or(f64::NAN),
            ph["after_forced_gc"]["api_server_go_heap_inuse_mib"]
                .as_f64()
                .unwrap_or(f64::NAN),
            ph["median"]["etcd_rss_mib"].as_f64().unwrap_or(f64::NAN),
            ph["median"]["package_manager_rss_mib"]
                .as_f64()
                .unwrap_or(f64::NAN),
            ph["counts"]["bench_crds"],
            ph["counts"]["bench_mrds_inactive"],
        );
    }
    let live = &result["comparison"]["after_forced_gc"]["api_server_go_heap_alloc_mib"];
    println!(
        "api-server live heap (after a collection) over the baseline: one activated {:.1} MiB, all {:.1} MiB ({:.2} MiB per CRD, {:.1} times one)",
        live["one_activated_minus_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
        live["all_installed_minus_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
        live["all_installed_per_crd"].as_f64().unwrap_or(f64::NAN),
        live["ratio_all_to_one"].as_f64().unwrap_or(f64::NAN),
    );
    let c = &result["comparison"]["median"]["api_server_rss_mib"];
    println!(
        "api-server RSS over the baseline: one activated {:.1} MiB, all {} {:.1} MiB ({:.2} MiB per CRD, {:.1} times one); written to {}",
        c["one_activated_minus_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
        result["kinds"],
        c["all_installed_minus_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
        c["all_installed_per_crd"].as_f64().unwrap_or(f64::NAN),
        c["ratio_all_to_one"].as_f64().unwrap_or(f64::NAN),
        out.display()
    );
}
