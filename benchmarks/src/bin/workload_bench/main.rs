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
//! The ceiling is the null writer (`null.rs`): the same writes and nothing
//! else. It runs before the phases (for the many and for the one), and
//! again after them, once their applications are deleted (with the time
//! that took) and the binaries stopped: the machine's speed moves over a
//! run, so the many is compared with each run of it and with their mean.
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
[--poll-interval DURATION] [--timeout SECS] [--out FILE] | --print-application NAME";

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
            // One application as the phases apply it, for trying a server
            // by hand.
            "--print-application" => {
                let name = it.next().expect(USAGE);
                println!(
                    "{}",
                    gitlab::application(&name, "r0", &format!("gl-{name}"))
                );
                std::process::exit(0);
            }
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
    let null_before =
        null::null_writer(&run.bench, &run.placement[1..], args.concurrency, true).await;
    profiles.into_iter().for_each(|p| drop(p.join()));
    let null_one = null::null_writer(&run.bench, &run.placement[..1], 1, true).await;
    let start = run.bench.mark();
    let mut one = one(&run, &args).await;
    compare(&mut one, &[&null_one]);
    let mut many = many(&run, &args).await;
    let end = run.bench.mark();
    // A binary that died part way explains phases that did not finish.
    let exited: BTreeMap<String, String> = run
        .bench
        .binaries
        .iter_mut()
        .filter_map(|b| Some((b.name.clone(), b.child.try_wait().ok()??.to_string())))
        .collect();
    // The ceiling again, on clusters as the phases met them (their objects
    // deleted, the binaries stopped so that no watch of theirs sees it):
    // the machine's speed moves over a run, and ours is compared with the
    // null writer before it and after it.
    let deleted = phase::delete_all(&run.bench, &run.apps, burst_timeout(args.applications)).await;
    run.bench.binaries.iter_mut().for_each(e2e::Running::kill);
    let null_after = if deleted["deleted"] == true && deleted["remote_pods_gone"] == true {
        null::null_writer(&run.bench, &run.placement[1..], args.concurrency, false).await
    } else {
        Value::Null
    };
    compare(&mut many, &[&null_before, &null_after]);
    let result = Outcome {
        start,
        end,
        exited,
        one,
        many,
        deleted,
        null_writer: json!({"before": null_before, "after": null_after, "one": null_one}),
    };
    write_result(&run, &args, result);
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

/// How long a burst of `applications` may take by default (to be
/// Submitted, or to be deleted): 2 minutes and 50 ms per template.
fn burst_timeout(applications: usize) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(50) * (applications * TEMPLATES) as u32
}

/// N applications at once, spread over the remote clusters.
async fn many(run: &Run, args: &Args) -> Value {
    let m = args.applications;
    eprintln!(
        "workload-bench: {m} applications at once ({} templates)",
        m * TEMPLATES
    );
    let profiles = profile(run, "");
    let timeout = args.timeout.unwrap_or(burst_timeout(m));
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
/// remote API server for the phase about to begin (60 s from 30 s in).
fn profile(run: &Run, phase: &str) -> Vec<std::thread::JoinHandle<()>> {
    let plane = &run.bench.plane;
    let servers = std::iter::once(("control", plane.control.kubectl_command())).chain(
        plane
            .remotes()
            .next()
            .map(|r| ("remote", r.kubectl_command())),
    );
    servers
        .filter_map(|(server, kubectl)| {
            benchmarks::profile_server(
                "WORKLOAD_BENCH_PPROF",
                &format!(".{phase}{server}"),
                kubectl,
                Duration::from_secs(30),
                60,
            )
        })
        .collect()
}

/// Ours against the null writer's ceiling: templates per second as a
/// fraction of its (of each run of it given, and of their mean pace), and
/// the API servers' (and etcd's) CPU seconds per template, ours and its.
fn compare(phase: &mut Value, nulls: &[&Value]) {
    let per_s = |v: &Value| {
        v["templates"].as_f64().unwrap_or(f64::NAN) / v["duration_s"].as_f64().unwrap_or(f64::NAN)
    };
    let cpu = |v: &Value| v["servers"]["api_servers_and_etcd_cpu_s_per_template"].clone();
    let ran: Vec<&&Value> = nulls.iter().filter(|n| !n.is_null()).collect();
    let paces: Vec<f64> = ran.iter().map(|n| per_s(n)).collect();
    let mean = paces.iter().sum::<f64>() / paces.len() as f64;
    let ours = per_s(phase);
    let figures = json!({
        "templates_per_s": ours,
        "null_writer_templates_per_s": mean,
        "null_writer_runs_templates_per_s": paces,
        "fraction_of_null_writer": ours / mean,
        "fraction_of_each_null_writer_run": paces.iter().map(|p| ours / p).collect::<Vec<_>>(),
        "api_servers_and_etcd_cpu_s_per_template": {
            "ours": cpu(phase),
            "null_writer": ran.iter().map(|n| cpu(n)).collect::<Vec<_>>(),
        },
    });
    eprintln!("  against the null writer: {figures}");
    if let Some(m) = phase.as_object_mut() {
        m.insert("ceiling".to_owned(), figures);
    }
}

/// What a run found.
struct Outcome {
    start: Mark,
    end: Mark,
    exited: BTreeMap<String, String>,
    one: Value,
    many: Value,
    deleted: Value,
    null_writer: Value,
}

/// Writes the run's JSON (`--out`).
fn write_result(run: &Run, args: &Args, o: Outcome) {
    let (bench, m, remote_count) = (&run.bench, args.applications, run.remote_count);
    let (start, end) = (&o.start, &o.end);
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
        "date": benchmarks::now(),
        "machine": benchmarks::machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "applications": m,
        "templates_per_application": TEMPLATES,
        "remote_clusters": remote_count,
        "poll_interval": args.poll_interval,
        "users": bench.users,
        "binaries": binaries,
        "exited": o.exited,
        "order": ["null_writer.before", "null_writer.one", "one", "many", "deleted", "null_writer.after"],
        "phases": {"one": o.one, "many": o.many, "deleted": o.deleted},
        "null_writer": o.null_writer,
    });
    benchmarks::write_json(&args.out, &result);
    println!("workloads: written to {}", args.out.display());
}
