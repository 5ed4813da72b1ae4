//! The benchmark's flags.

use std::time::Duration;

const USAGE: &str = "usage: object-bench [--objects N] [--concurrency C] [--changes K] \
[--resync SECS] [--idle SECS] [--latency-timeout SECS] [--provider-arg ARG]... [--no-null-provider] \
[--api v1alpha1|v1alpha2] [--namespaced] [--out FILE]";

/// Which Objects the benchmark writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `kubernetes.crossplane.io/v1alpha1`: the design's shape.
    V1alpha1,
    /// `kubernetes.crossplane.io/v1alpha2`: upstream's cluster Object.
    V1alpha2,
    /// `kubernetes.m.crossplane.io/v1alpha1`: upstream's namespaced Object,
    /// through a ClusterProviderConfig.
    Namespaced,
}

impl Shape {
    /// How the JSON and the default file name call it.
    pub fn name(self) -> &'static str {
        match self {
            Shape::V1alpha1 => "v1alpha1",
            Shape::V1alpha2 => "v1alpha2",
            Shape::Namespaced => "namespaced",
        }
    }
}

/// What one run measures, and where it writes.
pub struct Args {
    pub objects: usize,
    pub concurrency: usize,
    pub changes: usize,
    pub resync: Duration,
    pub idle: Duration,
    pub latency_timeout: Duration,
    pub provider_args: Vec<String>,
    /// Skip the create phase's like-for-like ceiling (as long as the create
    /// phase itself): for projection runs that measure growth, not the
    /// fraction of the ceiling.
    pub no_null_provider: bool,
    pub shape: Shape,
    pub out: std::path::PathBuf,
}

/// The flags given, over the defaults.
pub fn args() -> Args {
    let mut a = Args {
        objects: 1000,
        concurrency: 32,
        changes: 50,
        resync: Duration::from_secs(600),
        idle: Duration::from_secs(120),
        latency_timeout: Duration::from_secs(60),
        provider_args: Vec::new(),
        no_null_provider: false,
        shape: Shape::V1alpha1,
        out: std::path::PathBuf::new(),
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
            "--no-null-provider" => a.no_null_provider = true,
            "--api" => {
                a.shape = match it.next().as_deref() {
                    Some("v1alpha1") => Shape::V1alpha1,
                    Some("v1alpha2") => Shape::V1alpha2,
                    _ => panic!("{USAGE}"),
                }
            }
            "--namespaced" => a.shape = Shape::Namespaced,
            "--out" => a.out = it.next().expect(USAGE).into(),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    a.changes = a.changes.min(a.objects);
    if a.out.as_os_str().is_empty() {
        // bench/object-provider.json for the design's shape, as before.
        let file = match a.shape {
            Shape::V1alpha1 => "object-provider.json".to_owned(),
            other => format!("object-provider-{}.json", other.name()),
        };
        a.out = testenv::repo_root().join("bench").join(file);
    }
    a
}
