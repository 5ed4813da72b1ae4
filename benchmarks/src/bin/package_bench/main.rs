//! `package-bench`: crossplane-rs's package manager side by side with
//! upstream Crossplane's (a command, not a timed test). One local control
//! plane with a node and a registry, its API server writing an audit log;
//! the same packages built by upstream's CLI and pushed once
//! ([`packages`]); then for each side in turn, on the same API server,
//! node and registry ([`side`]):
//!
//! 1. one Provider (provider-kubernetes at its newest pinned release):
//!    the seconds from its apply to its revision, first CRD, ClusterRole,
//!    runtime Deployment, Installed, every CRD Established, the runtime pod
//!    Ready and Healthy, as watches saw them; then it is deleted;
//! 2. N generated Providers of M CRDs at once: time to all Healthy, each
//!    one's, requests per revision (audit log), CPU and peak memory of the
//!    two binaries, CPU of the API server and etcd;
//! 3. idle: requests per Provider per minute;
//! 4. all N upgraded to v2 at once (a new storage version for every CRD),
//!    a reader getting one object of each at v1alpha1 throughout;
//! 5. all deleted: time until their CRDs are gone, and what is left.
//!
//! crossplane-rs runs first, as `deploy/` ships it (e2e::shipped: the six
//! controllers as pods; its Object provider removed, whose CRDs are
//! provider-kubernetes'); then its package-manager and rbac-manager are
//! scaled to 0, the CRDs both projects define are deleted, and upstream is
//! installed ([`upstream`]). Before either, every package image is pulled
//! onto the node, and the null writer ([`null`]) applies what the
//! Providers end with, for the ceiling, once without and once with
//! Crossplane v2's MRDs (crossplane-rs's package-manager and
//! rbac-manager scaled to 0 meanwhile). Once crossplane-rs has deleted
//! all it installed, the null writer runs again without MRDs: each side's
//! `fraction_of_null_writer` is of the mean of the two runs
//! (`null_writer`, `null_writer_after`), since one run of it moves by a
//! half from run to run on this machine. Writes `--out` (default
//! bench/packages.json).
//!
//!     hack/bench-packages.sh [--providers N] [--crds M] [--properties P]
//!         [--idle SECS] [--delete-wait SECS] [--only crossplane-rs|upstream]
//!         [--install-only] [--out FILE]
//!
//! `--install-only` stops each side after its install (no idle, upgrade or
//! delete phase): for looking into the install, whose `timeline` (from the
//! audit log, per 10 s) says when CRDs were written and when the API
//! server established them, as the null writers' does.
//!
//! `--delete-wait` bounds how long the delete phase waits for the CRDs to
//! go (default: fifteen minutes and a quarter second per CRD); the JSON
//! says the bound each side had.
//!
//! With `PACKAGE_BENCH_PPROF=FILE`, the API server's CPU profile (Go pprof)
//! of the first `PACKAGE_BENCH_PPROF_SECONDS` (15) of the null writer's
//! install and of each side's N Providers is written to FILE.null,
//! FILE.crossplane-rs and FILE.upstream (`go tool pprof -top FILE.null`).

// A benchmark reports and exits; failing loudly on a broken setup is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod compare;
mod null;
mod packages;
mod phases;
mod side;
mod upstream;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use null::Ceiling;
use phases::{Run, Servers};
use side::Side;

const USAGE: &str = "usage: package-bench [--providers N] [--crds M] [--properties P] [--idle SECS] [--delete-wait SECS] [--only crossplane-rs|upstream] [--install-only] [--out FILE]";

struct Args {
    providers: usize,
    crds: usize,
    properties: usize,
    idle: u64,
    delete_wait: Option<Duration>,
    only: Option<String>,
    install_only: bool,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        providers: 50,
        crds: 100,
        properties: 30,
        idle: 120,
        delete_wait: None,
        only: None,
        install_only: false,
        out: testenv::repo_root().join("bench/packages.json"),
    };
    let mut it = std::env::args().skip(1);
    let number = |v: Option<String>| v.and_then(|v| v.parse().ok()).expect(USAGE);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--providers" => a.providers = number(it.next()),
            "--crds" => a.crds = number(it.next()),
            "--properties" => a.properties = number(it.next()),
            "--idle" => a.idle = number(it.next()) as u64,
            "--delete-wait" => {
                a.delete_wait = Some(Duration::from_secs(number(it.next()) as u64));
            }
            "--only" => a.only = Some(it.next().expect(USAGE)),
            "--install-only" => a.install_only = true,
            "--out" => a.out = it.next().expect(USAGE).into(),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    assert!(a.providers >= 1 && a.crds >= 1, "{USAGE}");
    a
}

/// Every phase, for the side now installed.
async fn measure(
    run: &Run<'_>,
    servers: &Servers,
    one: &(String, Vec<String>),
    gens: &[packages::Generated],
    args: &Args,
) -> Value {
    eprintln!("package-bench: {}: one Provider", run.side.name);
    let single = phases::one(run, "provider-kubernetes", &one.0, &one.1).await;
    eprintln!(
        "package-bench: {}: {} Providers at once",
        run.side.name,
        gens.len()
    );
    let many = profiled(
        run.control,
        run.side.name,
        phases::install_many(run, gens, servers),
    )
    .await;
    if args.install_only {
        return json!({"side": run.side.json(), "one_provider": single, "install": many});
    }
    eprintln!("package-bench: {}: idle {} s", run.side.name, args.idle);
    let quiet = phases::idle(run, gens.len(), args.idle).await;
    eprintln!("package-bench: {}: upgrading all", run.side.name);
    let upgraded = phases::upgrade(run, gens).await;
    eprintln!("package-bench: {}: deleting all", run.side.name);
    let deleted = phases::delete_all(run, gens, args.delete_wait).await;
    json!({
        "side": run.side.json(),
        "one_provider": single,
        "install": many,
        "idle": quiet,
        "upgrade": upgraded,
        "delete": deleted,
    })
}

/// Runs an install; with `PACKAGE_BENCH_PPROF`, under the control API
/// server's CPU profile from its start, written as FILE.`suffix`.
async fn profiled<T>(
    control: &testenv::Cluster,
    suffix: &str,
    install: impl std::future::Future<Output = T>,
) -> T {
    let seconds = std::env::var("PACKAGE_BENCH_PPROF_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let profile = benchmarks::profile_server(
        "PACKAGE_BENCH_PPROF",
        &format!(".{suffix}"),
        control.kubectl_command(),
        Duration::ZERO,
        seconds,
    );
    let done = install.await;
    if let Some(p) = profile {
        p.join().expect("the profile is taken");
    }
    done
}

/// Scales crossplane-rs's package-manager and rbac-manager to `replicas`;
/// at 0 waits until their pods are gone, at 1 until each leads.
fn scale_ours(control: &testenv::Cluster, replicas: u8) {
    const OURS: [&str; 2] = ["package-manager", "rbac-manager"];
    for d in OURS {
        let replicas_flag = format!("--replicas={replicas}");
        control
            .kubectl_ok(&[
                "scale",
                "deployment",
                d,
                "-n",
                e2e::shipped::NS,
                &replicas_flag,
            ])
            .unwrap();
        if replicas == 0 {
            let selector = format!("app.kubernetes.io/name={d}");
            control
                .kubectl_ok(&[
                    "wait",
                    "--for=delete",
                    "pod",
                    "-l",
                    &selector,
                    "-n",
                    e2e::shipped::NS,
                    "--timeout=120s",
                ])
                .unwrap();
        }
    }
    if replicas > 0 {
        e2e::shipped::wait_leading(&OURS);
    }
}

/// Takes crossplane-rs's package side out of the cluster: its
/// package-manager and rbac-manager scaled to 0, and the CRDs upstream
/// defines too deleted (upstream's init installs its own).
fn remove_ours(control: &testenv::Cluster, upstream_crds: &std::path::Path) {
    scale_ours(control, 0);
    let names: Vec<String> = std::fs::read_dir(upstream_crds)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            // <group>_<plural>.yaml
            let (group, plural) = file.strip_suffix(".yaml")?.split_once('_')?;
            Some(format!("{plural}.{group}"))
        })
        .collect();
    let mut args = vec!["delete", "crd", "--ignore-not-found", "--wait=true"];
    args.extend(names.iter().map(String::as_str));
    let out = control.kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::main]
async fn main() {
    let args = args();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (begun, started) = (Instant::now(), benchmarks::now());
    let wants = |side: &str| args.only.as_deref().is_none_or(|o| o == side);
    let bin_dir = testenv::bin_dir().expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)");
    if wants("upstream") {
        assert!(
            bin_dir.join("crossplane").exists(),
            "upstream's crossplane is not built: run CROSSPLANE_RS_CORE=1 hack/build-binaries.sh (hack/bench-packages.sh does)"
        );
    }
    eprintln!(
        "package-bench: a local control plane with a node, audit log on; crossplane-rs from deploy/"
    );
    let plane = testenv::control_plane_with(testenv::Options {
        node: true,
        audit: true,
        ..testenv::Options::default()
    });
    let shipped = tokio::task::spawn_blocking(e2e::shipped::shipped)
        .await
        .unwrap();
    tokio::task::spawn_blocking(e2e::shipped::remove_object_provider)
        .await
        .unwrap();
    let work = shipped.work.join("package-bench");
    std::fs::create_dir_all(&work).unwrap();
    eprintln!(
        "package-bench: building and pushing provider-kubernetes and {} generated Providers of {} CRDs (v1 and v2) with upstream's CLI",
        args.providers, args.crds
    );
    let (registry, ca_file) = (&shipped.registry, shipped.ca_file.clone());
    let one = packages::provider_kubernetes(registry, &ca_file, &work);
    let gens = packages::generated(
        registry,
        &ca_file,
        &work,
        args.providers,
        args.crds,
        args.properties,
    );
    let control = &plane.control;
    let client = control.client().await;
    let servers = Servers::of(plane);
    let mut images: Vec<String> = gens
        .iter()
        .flat_map(|g| [g.v1.clone(), g.v2.clone()])
        .collect();
    images.push(one.0.clone());
    eprintln!(
        "package-bench: pulling the {} package images onto the node",
        images.len()
    );
    tokio::task::spawn_blocking(move || null::prepull(&plane.control, &images))
        .await
        .unwrap();
    // No package manager while the null writers run: an Active MRD is
    // theirs to serve.
    tokio::task::block_in_place(|| scale_ours(control, 0));
    eprintln!("package-bench: the null writer");
    let ceiling = profiled(
        control,
        "null",
        null::run(control, &client, &gens, &servers, Ceiling::Listed),
    )
    .await;
    eprintln!("package-bench: the null writer with MRDs");
    let ceiling_mrds = null::run(control, &client, &gens, &servers, Ceiling::WithMrds).await;
    if wants("crossplane-rs") {
        tokio::task::block_in_place(|| scale_ours(control, 1));
    }
    let mut sides = serde_json::Map::new();
    let mut upstream_json = Value::Null;
    // Written after each side as well as at the end: a side that fails
    // (at 50 x 100 the API server's memory is the machine's limit) keeps
    // what the one before it measured.
    let mut ceiling_after = Value::Null;
    let write = |sides: &serde_json::Map<String, Value>, after: &Value, upstream_json: &Value| {
        let out = json!({
            "benchmark": "package-bench",
            "started": started,
            "took_s": begun.elapsed().as_secs_f64(),
            "machine": benchmarks::machine(),
            "providers": args.providers,
            "crds_each": args.crds,
            "properties_each": args.properties,
            "packages": "built by upstream's crossplane CLI (xpkg build --embed-runtime-image-tarball, xpkg push)",
            // The Go runtime's soft memory limit the control plane's
            // processes ran with (hack/bench-packages.sh), if any.
            "go_memory_limit": std::env::var("GOMEMLIMIT").ok(),
            "upstream": upstream_json,
            "verdicts": compare::verdicts(&[&ceiling, after], &ceiling_mrds, sides),
            "null_writer": ceiling,
            "null_writer_after": after,
            "null_writer_with_mrds": ceiling_mrds,
            "sides": sides,
        });
        benchmarks::write_json(&args.out, &out);
    };
    if wants("crossplane-rs") {
        let run = Run {
            control,
            client: client.clone(),
            side: Side::ours(),
        };
        sides.insert(
            "crossplane-rs".to_owned(),
            measure(&run, &servers, &one, &gens, &args).await,
        );
        write(&sides, &ceiling_after, &upstream_json);
        // The null writer again once ours has deleted all it installed:
        // on this machine one run of it took from 116 s to 200 s, so each
        // side is judged against the mean of the two runs.
        if !args.install_only {
            tokio::task::block_in_place(|| scale_ours(control, 0));
            eprintln!("package-bench: the null writer again");
            // Ours stays scaled to 0: all that follows is upstream's side,
            // which takes ours out first (as with `--only upstream`).
            ceiling_after = null::run(control, &client, &gens, &servers, Ceiling::Listed).await;
            write(&sides, &ceiling_after, &upstream_json);
        }
    }
    if wants("upstream") {
        eprintln!("package-bench: replacing crossplane-rs's package side by upstream's");
        // Blocking work (a push on a runtime of its own, kubectl waits).
        let image = tokio::task::block_in_place(|| {
            let image = upstream::push_image(registry, &bin_dir);
            remove_ours(control, &bin_dir.join("crossplane-crds"));
            upstream::install(control, &image, &registry.ca_pem);
            image
        });
        upstream_json = upstream::described(&upstream::version(), &image);
        let run = Run {
            control,
            client: client.clone(),
            side: Side::upstream(),
        };
        sides.insert(
            "upstream".to_owned(),
            measure(&run, &servers, &one, &gens, &args).await,
        );
    }
    write(&sides, &ceiling_after, &upstream_json);
    eprintln!("package-bench: wrote {}", args.out.display());
}
