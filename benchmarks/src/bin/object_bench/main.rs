//! `object-bench`: the object-provider benchmark (a command, not a timed
//! test). Starts a local control plane whose API servers write audit logs,
//! runs the object-provider as its shipped ServiceAccount (and, in the
//! remote cluster, as a user of its own), and measures, phase by phase:
//!
//! - null writer: N plain ConfigMaps applied to the control cluster at the
//!   same concurrency, the API server's own ceiling for this machine;
//! - null provider: the create phase's writes and nothing else (see
//!   `null.rs`), the create phase's ceiling on this machine;
//! - create: N Objects (default 1000) each managing a ConfigMap in the
//!   remote cluster: Objects/s (also as a fraction of both ceilings),
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
//! `--api v1alpha2` writes upstream's cluster Objects, `--namespaced`
//! upstream's namespaced ones (through a ClusterProviderConfig), each to
//! bench/object-provider-<api>.json unless `--out` says otherwise.
//!
//!     hack/bench-object-provider.sh [--objects N] [--changes K] ...

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod args;
mod null;
mod phases;
mod run;
mod setup;

use benchmarks::Usage;
use serde_json::{Map, Value, json};

use run::{CONTROL_USER, REMOTE_USER, report};
use setup::Run;

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut run = setup::set_up(args::args()).await;
    let mut phases = Map::new();
    record(&mut phases, "create", phases::create(&run).await);
    record(&mut phases, "idle", phases::idle(&run).await);
    record(&mut phases, "update", phases::update(&run).await);
    record(
        &mut phases,
        "remote_change",
        phases::remote_change(&run).await,
    );
    record(&mut phases, "drift", phases::drift(&run).await);
    let referenced = phases::referenced_change(&run).await;
    record(&mut phases, "referenced_change", referenced);
    record(&mut phases, "delete", phases::delete(&run).await);
    write_result(&mut run, phases);
}

/// Keeps a phase's JSON and reports it on one line.
fn record(phases: &mut Map<String, Value>, name: &str, value: Value) {
    report(name, &value);
    phases.insert(name.into(), value);
}

/// Writes the run's JSON (`--out`) and prints its summary.
fn write_result(run: &mut Run, phases: Map<String, Value>) {
    let Run {
        args,
        bench,
        null_writer,
        null_provider,
        provider_args,
        start: start_mark,
        ..
    } = run;
    let (n, k) = (args.objects, args.changes);
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
        "date": benchmarks::now(),
        "machine": benchmarks::machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "api": args.shape.name(),
        "objects": n,
        "changes": k,
        "concurrency": args.concurrency,
        "provider_args": provider_args,
        "users": {"control": CONTROL_USER, "remote": REMOTE_USER},
        "null_writer": null_writer,
        "null_provider": null_provider,
        "provider": {"peak_rss_mib": end.peak_rss_mib, "rss_mib": end.rss_mib, "cpu_s": end.cpu_s - start_mark.usage.cpu_s},
        "provider_exited": exited,
        // JSON objects have no order; this is the order the phases ran in.
        "phase_order": ["create", "idle", "update", "remote_change", "drift", "referenced_change", "delete"],
        "phases": phases,
    });
    benchmarks::write_json(&args.out, &result);
    println!(
        "object-provider: {n} Objects, peak RSS {:.1} MiB, {:.1} CPU s; written to {}",
        end.peak_rss_mib,
        end.cpu_s - start_mark.usage.cpu_s,
        args.out.display()
    );
}
