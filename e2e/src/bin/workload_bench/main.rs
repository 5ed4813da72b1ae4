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
//!
//! With `WORKLOAD_BENCH_PPROF=FILE`, CPU profiles (Go pprof, 60 s from 30 s
//! into the phase) of the control API server and of the first remote one are
//! written for the many phase and for the null writer: FILE.control,
//! FILE.remote, FILE.null.control, FILE.null.remote. Where the machine's
//! ceiling goes, ours against the null writer's (`go tool pprof -top F`).

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod gitlab;
mod null;
mod phase;
mod setup;

use std::{collections::BTreeMap, time::Duration};

use serde_json::{Value, json};

use gitlab::TEMPLATES;
use phase::{Mark, phase};
use setup::Run;

/// The workload binaries' identity in the remote clusters (the kubeconfig
/// in each KubernetesCluster's Secret; the scheduler probes clusters with
/// it too).
pub const REMOTE_USER: &str = "bench-workloads";
/// Where applications, clusters and their Secrets live.
pub const NS: &str = "bench";
/// The binaries under test.
pub const BINARIES: [&str; 3] = ["scheduler", "application-controller", "resource-controller"];

const USAGE: &str = "usage: workload-bench [--applications N] [--clusters C] [--concurrency C] \
[--poll-interval DURATION] [--timeout SECS] [--out FILE]";

/// What one run measures, and where it writes.
pub struct Args {
    pub applications: usize,
    pub clusters: usize,
    pub concurrency: usize,
    pub poll_interval: String,
    pub timeout: Option<Duration>,
    pub out: std::path::PathBuf,
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
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    a
}

#[tokio::main]
async fn main() {
    let args = args();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut run = setup::set_up(&args).await;
    // The ceiling first, while the binaries hold no remote watch yet.
    let profiles = profile(&run, "null.");
    let null_writer = null::null_writer(&run.bench, &run.placement[1..], args.concurrency).await;
    profiles.into_iter().for_each(|p| drop(p.join()));
    let start = run.bench.mark();
    let one = one(&run, &args).await;
    let mut many = many(&run, &args).await;
    compare(&mut many, &null_writer);
    write_result(&mut run, &args, &start, one, many, null_writer);
}

/// A single application alone: time from apply to Submitted.
async fn one(run: &Run, args: &Args) -> Value {
    eprintln!("workload-bench: one application ({TEMPLATES} templates)");
    let one = phase(
        &run.bench,
        &run.probe,
        &run.apps,
        run.placement[..1].to_vec(),
        1,
        args.timeout.unwrap_or(Duration::from_secs(120)),
    )
    .await;
    eprintln!(
        "  one: reached {} in {}s",
        one["reached"], one["duration_s"]
    );
    one
}

/// N applications at once, spread over the remote clusters.
async fn many(run: &Run, args: &Args) -> Value {
    let m = args.applications;
    eprintln!(
        "workload-bench: {m} applications at once ({} templates)",
        m * TEMPLATES
    );
    let profiles = profile(run, "");
    let timeout = args
        .timeout
        .unwrap_or(Duration::from_secs(120) + Duration::from_millis(50) * (m * TEMPLATES) as u32);
    let many = phase(
        &run.bench,
        &run.probe,
        &run.apps,
        run.placement[1..].to_vec(),
        args.concurrency,
        timeout,
    )
    .await;
    profiles.into_iter().for_each(|p| drop(p.join()));
    eprintln!(
        "  many: reached {} ({}/{}) in {}s; submitted p50 {} p99 {}",
        many["reached"],
        many["done"],
        many["of"],
        many["duration_s"],
        many["submitted"]["p50_s"],
        many["submitted"]["p99_s"]
    );
    many
}

/// With `WORKLOAD_BENCH_PPROF`, starts profiling the control and the first
/// remote API server for the phase about to begin.
fn profile(run: &Run, phase: &str) -> Vec<std::thread::JoinHandle<()>> {
    let Some(base) = std::env::var_os("WORKLOAD_BENCH_PPROF") else {
        return Vec::new();
    };
    let plane = &run.bench.plane;
    let servers = std::iter::once(("control", plane.control.kubectl_command())).chain(
        plane
            .remotes()
            .next()
            .map(|r| ("remote", r.kubectl_command())),
    );
    servers
        .map(|(server, kubectl)| {
            let mut out = base.clone();
            out.push(format!(".{phase}{server}"));
            std::thread::spawn(move || server_profile(kubectl, out.into()))
        })
        .collect()
}

/// 60 s of an API server's CPU profile, from 30 s into the phase.
fn server_profile(mut kubectl: std::process::Command, out: std::path::PathBuf) {
    std::thread::sleep(Duration::from_secs(30));
    let got = kubectl
        .args(["get", "--raw", "/debug/pprof/profile?seconds=60"])
        .output()
        .expect("kubectl runs");
    std::fs::write(&out, &got.stdout).expect("the profile is written");
    eprintln!(
        "  profile of an API server: {} ({} bytes) {}",
        out.display(),
        got.stdout.len(),
        String::from_utf8_lossy(&got.stderr).trim()
    );
}

/// Ours against the null writer's ceiling: templates per second as a
/// fraction of its, and the API servers' (and etcd's) CPU seconds per
/// template, ours and its.
fn compare(many: &mut Value, null: &Value) {
    let per_s = |v: &Value| {
        v["templates"].as_f64().unwrap_or(f64::NAN) / v["duration_s"].as_f64().unwrap_or(f64::NAN)
    };
    let cpu = |v: &Value| v["servers"]["api_servers_and_etcd_cpu_s_per_template"].clone();
    let figures = json!({
        "templates_per_s": per_s(many),
        "null_writer_templates_per_s": per_s(null),
        "fraction_of_null_writer": per_s(many) / per_s(null),
        "api_servers_and_etcd_cpu_s_per_template": {"ours": cpu(many), "null_writer": cpu(null)},
    });
    eprintln!(
        "  many: {:.1} templates/s, {:.0}% of the null writer's {:.1}; API servers and etcd {:.3} CPU s per template (null writer {:.3})",
        per_s(many),
        100.0 * per_s(many) / per_s(null),
        per_s(null),
        cpu(many).as_f64().unwrap_or(f64::NAN),
        cpu(null).as_f64().unwrap_or(f64::NAN),
    );
    if let Some(m) = many.as_object_mut() {
        m.insert("ceiling".to_owned(), figures);
    }
}

/// Writes the run's JSON (`--out`).
fn write_result(
    run: &mut Run,
    args: &Args,
    start: &Mark,
    one: Value,
    many: Value,
    null_writer: Value,
) {
    let (bench, m, remote_count) = (&mut run.bench, args.applications, run.remote_count);
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
        "null_writer": null_writer,
    });
    e2e::bench::write_json(&args.out, &result);
    println!("workloads: written to {}", args.out.display());
}
