//! The benchmark's flags.

use std::time::Duration;

const USAGE: &str = "usage: object-bench [--objects N] [--concurrency C] [--changes K] \
[--resync SECS] [--idle SECS] [--latency-timeout SECS] [--provider-arg ARG]... [--no-null-provider] [--out FILE]";

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
            "--no-null-provider" => a.no_null_provider = true,
            "--out" => a.out = it.next().expect(USAGE).into(),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    a.changes = a.changes.min(a.objects);
    a
}
