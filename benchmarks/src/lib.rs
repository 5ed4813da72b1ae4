//! The benchmark commands (`object-bench`, `workload-bench`, `mrd-bench`, `package-bench`; run by
//! `hack/bench-*.sh`, not by the tests) and what they share: watching for the moment each object
//! reaches a state, counting requests (a binary's /metrics and the API
//! servers' audit logs) between two marks, a process's CPU time and memory,
//! latency percentiles, and phases that report how far they got instead of
//! failing.

// Benchmark commands, not product code: a broken measurement fails loudly.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use kube::{
    Api, ResourceExt as _,
    api::DynamicObject,
    runtime::watcher::{self, Event},
};
use serde_json::{Value, json};

/// A condition on an object, as its JSON.
pub type Predicate = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// How often a probe looks whether a phase is over: the moments it reports
/// are the watch's, exact; looking often keeps a phase from ending late.
const PROBE_EVERY: Duration = Duration::from_millis(50);

#[derive(Default)]
struct ProbeState {
    pending: HashMap<String, Predicate>,
    met: HashMap<String, Instant>,
    synced: bool,
}

/// Records, from a watch, the first moment each named object satisfies the
/// condition expected of it: exact to the watch event, whatever the polling
/// of the benchmark. Objects are keyed by name (a probe watches one
/// namespace, or a cluster-scoped kind).
#[derive(Clone, Default)]
pub struct Probe(Arc<Mutex<ProbeState>>);

impl Probe {
    /// Starts watching `api`; the task ends with the process.
    pub fn watch(api: Api<DynamicObject>) -> Self {
        let probe = Self::default();
        let state = probe.0.clone();
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(Event::Apply(o) | Event::InitApply(o))) => {
                        let now = Instant::now();
                        let name = o.name_any();
                        let mut s = state.lock().expect("probe lock");
                        if s.pending
                            .get(&name)
                            .is_some_and(|p| serde_json::to_value(&o).is_ok_and(|v| p(&v)))
                        {
                            s.pending.remove(&name);
                            s.met.insert(name, now);
                        }
                    }
                    Ok(Some(Event::InitDone)) => state.lock().expect("probe lock").synced = true,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    // The watcher retries by itself; slow down a little.
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        probe
    }

    /// Waits (up to `timeout`) for the watch's first list to finish.
    pub async fn synced(&self, timeout: Duration) -> bool {
        e2e::wait::poll(timeout, PROBE_EVERY, "the probe's first list", || {
            std::future::ready(self.0.lock().expect("probe lock").synced)
        })
        .await
        .is_ok()
    }

    /// From now on, records when `name` first satisfies `condition`
    /// (forgetting an earlier record of it).
    pub fn expect(&self, name: &str, condition: Predicate) {
        let mut s = self.0.lock().expect("probe lock");
        s.met.remove(name);
        s.pending.insert(name.to_owned(), condition);
    }

    /// When `name` met its condition, if it has.
    pub fn met(&self, name: &str) -> Option<Instant> {
        self.0.lock().expect("probe lock").met.get(name).copied()
    }

    /// Waits until every one of `names` has met its condition, or `timeout`.
    pub async fn wait(&self, names: &[String], timeout: Duration) -> Reached {
        let done = || {
            let s = self.0.lock().expect("probe lock");
            names.iter().filter(|n| s.met.contains_key(*n)).count()
        };
        let all = e2e::wait::poll(timeout, PROBE_EVERY, "every object to be met", || {
            std::future::ready(done() == names.len())
        })
        .await;
        let (done, waited) = match all {
            Ok(((), waited)) => (names.len(), waited),
            Err(out) => (done(), out.waited),
        };
        Reached {
            done,
            of: names.len(),
            waited,
        }
    }

    /// Seconds from each name's start to when it met its condition, sorted
    /// (names that have not met it are left out).
    pub fn latencies(&self, started: &HashMap<String, Instant>) -> Vec<f64> {
        let s = self.0.lock().expect("probe lock");
        let mut out: Vec<f64> = started
            .iter()
            .filter_map(|(n, t)| {
                s.met
                    .get(n)
                    .map(|m| m.saturating_duration_since(*t).as_secs_f64())
            })
            .collect();
        out.sort_by(f64::total_cmp);
        out
    }
}

/// How far a phase got.
#[derive(Clone, Copy, Debug)]
pub struct Reached {
    /// How many reached the goal.
    pub done: usize,
    /// Of how many.
    pub of: usize,
    /// How long the phase waited.
    pub waited: Duration,
}

impl Reached {
    /// Whether all did.
    pub fn all(&self) -> bool {
        self.done == self.of
    }

    /// As JSON: `reached`, `done`, `of`, `waited_s`.
    pub fn json(&self) -> Value {
        json!({"reached": self.all(), "done": self.done, "of": self.of, "waited_s": self.waited.as_secs_f64()})
    }
}

/// Polls `check` every 250 ms until it is true or `timeout` passes:
/// whether it became true, and when.
pub async fn wait_until<F, Fut>(timeout: Duration, check: F) -> (bool, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    match e2e::wait::poll(timeout, e2e::wait::EVERY, "a benchmark phase", check).await {
        Ok(((), took)) => (true, took),
        Err(out) => (false, out.waited),
    }
}

/// The value at quantile `p` (0..=1) of sorted `values`; None when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied()
}

/// p50, p99 and max of sorted latencies, in seconds, as JSON.
pub fn latency_json(sorted: &[f64]) -> Value {
    json!({
        "p50_s": percentile(sorted, 0.5),
        "p99_s": percentile(sorted, 0.99),
        "max_s": sorted.last(),
        "samples": sorted.len(),
    })
}

/// CPU time and memory of a process, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// User plus system CPU seconds so far.
    pub cpu_s: f64,
    /// Resident memory now, MiB.
    pub rss_mib: f64,
    /// Peak resident memory (VmHWM), MiB.
    pub peak_rss_mib: f64,
}

impl Usage {
    /// Reads the usage of `pid` (zeros when it has gone).
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .map(|k| k / 1024.0)
                .unwrap_or(0.0)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command (which may hold spaces) end with ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // utime and stime are fields 14 and 15; the rest starts at field 3.
        let ticks = |i: usize| {
            fields
                .get(i - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Self {
            cpu_s: (ticks(14) + ticks(15)) / clock_ticks(),
            rss_mib: kib("VmRSS:"),
            peak_rss_mib: kib("VmHWM:"),
        }
    }

    /// CPU seconds since `before`, memory now, as JSON.
    pub fn since_json(&self, before: &Usage) -> Value {
        json!({
            "cpu_s": self.cpu_s - before.cpu_s,
            "rss_mib": self.rss_mib,
            "peak_rss_mib": self.peak_rss_mib,
        })
    }
}

/// The whole machine's CPU seconds so far (/proc/stat's first line): busy
/// (user, nice, system, irq, softirq), idle (idle, iowait), and stolen by
/// the hypervisor for other guests: how much of the machine a phase had.
#[derive(Clone, Copy, Debug, Default)]
pub struct MachineCpu {
    pub busy_s: f64,
    pub idle_s: f64,
    pub steal_s: f64,
}

impl MachineCpu {
    pub fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0) / clock_ticks();
        Self {
            busy_s: at(0) + at(1) + at(2) + at(5) + at(6),
            idle_s: at(3) + at(4),
            steal_s: at(7),
        }
    }

    /// From `earlier` to `self`: the busy fraction of the time the guest had,
    /// the seconds stolen, and the fraction of all CPU time they were.
    pub fn since_json(&self, earlier: &Self) -> Value {
        let busy = self.busy_s - earlier.busy_s;
        let idle = self.idle_s - earlier.idle_s;
        let steal = self.steal_s - earlier.steal_s;
        let all = busy + idle + steal;
        json!({
            "busy_fraction": busy / (busy + idle),
            "steal_s": steal,
            "steal_fraction": steal / all,
        })
    }
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// `crossplane_rs_kube_api_requests_total` by (cluster, verb), and
/// `crossplane_rs_reconcile_total` by ("reconciles", result), and
/// `crossplane_rs_watch_wakeups_total` as ("reconciles", "woken_by_watch")
/// (reconciles a shared watch asked for: a watched object changed), of
/// the binary serving /metrics at `addr` (empty when it does not answer).
pub fn scrape(addr: SocketAddr) -> BTreeMap<(String, String), f64> {
    let body = e2e::http_get(addr, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for s in e2e::samples(&body) {
        let key = match s.name.as_str() {
            "crossplane_rs_kube_api_requests_total" => {
                (s.label("cluster").to_owned(), s.label("verb").to_owned())
            }
            "crossplane_rs_reconcile_total" => {
                ("reconciles".to_owned(), s.label("result").to_owned())
            }
            "crossplane_rs_watch_wakeups_total" => {
                ("reconciles".to_owned(), "woken_by_watch".to_owned())
            }
            _ => continue,
        };
        *out.entry(key).or_default() += s.value;
    }
    out
}

/// What a binary's own client counted between two scrapes, divided by
/// `per` (Objects, templates): totals, writes, and by cluster and verb.
/// Reconciles are reported apart, not as requests.
pub fn metrics_delta(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
    per: f64,
) -> Value {
    let mut by: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut reconciles: BTreeMap<String, f64> = BTreeMap::new();
    let (mut total, mut writes) = (0.0, 0.0);
    for ((cluster, verb), v) in after {
        let d = v - before
            .get(&(cluster.clone(), verb.clone()))
            .copied()
            .unwrap_or(0.0);
        if d <= 0.0 {
            continue;
        }
        if cluster == "reconciles" {
            reconciles.insert(verb.clone(), d);
            continue;
        }
        *by.entry(cluster.clone())
            .or_default()
            .entry(verb.clone())
            .or_default() += d / per;
        total += d;
        if is_write(verb) {
            writes += d;
        }
    }
    json!({
        "per_unit_total": total / per,
        "per_unit_writes": writes / per,
        "total": total,
        "per_unit_by_cluster_and_verb": by,
        "reconciles": reconciles,
    })
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "apply" | "delete" | "deletecollection"
    )
}

/// Byte offsets of the audit logs of several clusters, taken at one moment.
#[derive(Clone, Debug)]
pub struct AuditMark(Vec<(String, PathBuf, u64)>);

impl AuditMark {
    /// The current end of each cluster's audit log (clusters without one
    /// are left out).
    pub fn now<'a>(clusters: impl IntoIterator<Item = &'a testenv::Cluster>) -> Self {
        Self(
            clusters
                .into_iter()
                .filter_map(|c| {
                    let path = c.audit_log.clone()?;
                    let end = testenv::audit::end(&path).unwrap_or(0);
                    Some((c.name.to_owned(), path, end))
                })
                .collect(),
        )
    }

    /// The requests each of `users` made on each cluster from `self` to
    /// `to`, divided by `per`: by cluster, the user's total, by verb, and by
    /// verb and resource (counts, not divided); and the grand total per unit.
    /// `users` maps a cluster name to the users counted there (a key "*"
    /// applies to every cluster).
    pub fn delta(&self, to: &AuditMark, users: &BTreeMap<String, Vec<String>>, per: f64) -> Value {
        let mut clusters = serde_json::Map::new();
        let mut grand = 0u64;
        for (name, path, from) in &self.0 {
            let end = to.end_of(name, *from);
            let counts = match testenv::audit::count(path, *from, end) {
                Ok(c) => c,
                Err(e) => {
                    clusters.insert(name.clone(), json!({"error": e.to_string()}));
                    continue;
                }
            };
            let wanted = users
                .get(name)
                .or_else(|| users.get("*"))
                .cloned()
                .unwrap_or_default();
            let mut per_user = serde_json::Map::new();
            for user in wanted {
                let total = counts.total(&user);
                grand += total;
                let by_verb: BTreeMap<String, f64> = counts
                    .by_verb(&user)
                    .into_iter()
                    .map(|(v, n)| (v, n as f64 / per))
                    .collect();
                let watches = counts.by_verb(&user).get("watch").copied().unwrap_or(0);
                per_user.insert(
                    user.clone(),
                    json!({
                        "total": total,
                        "per_unit_total": total as f64 / per,
                        "per_unit_excluding_watches": (total - watches) as f64 / per,
                        "per_unit_by_verb": by_verb,
                        "by_verb_and_resource": counts.by_verb_and_resource(&user),
                    }),
                );
            }
            clusters.insert(name.clone(), Value::Object(per_user));
        }
        json!({"per_unit_total": grand as f64 / per, "total": grand, "by_cluster": clusters})
    }

    /// Where this mark ends the log of `cluster`; `from` if it has none.
    fn end_of(&self, cluster: &str, from: u64) -> u64 {
        self.0
            .iter()
            .find(|(n, _, _)| n == cluster)
            .map_or(from, |(_, _, e)| *e)
    }

    /// How a phase went on `cluster`, from `self` to `to`, in buckets of
    /// `bucket_s` seconds from its first request: the CRDs written (not dry
    /// runs, not the API server's own status writes), their dry runs, the
    /// API server's own writes of CRD status (its naming and establishing
    /// controllers: two per CRD, one at a time each) and how long those
    /// took (p50 and max, ms), MRD writes, and all requests. Where the
    /// install waits: for the CRDs to be written, or for the API server to
    /// establish them.
    pub fn timeline(&self, to: &AuditMark, cluster: &str, bucket_s: f64) -> Value {
        let Some((_, path, from)) = self.0.iter().find(|(n, _, _)| n == cluster) else {
            return Value::Null;
        };
        let end = to.end_of(cluster, *from);
        let events = match testenv::audit::timed(path, *from, end) {
            Ok(e) => e,
            Err(e) => return json!({"error": e.to_string()}),
        };
        let Some(start) = events.iter().map(|e| e.received).min() else {
            return Value::Null;
        };
        #[derive(Default, Clone)]
        struct Bucket {
            crds_written: u64,
            crd_dry_runs: u64,
            crd_status_by_api_server: u64,
            crd_status_ms: Vec<f64>,
            mrd_writes: u64,
            requests: u64,
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        for e in &events {
            let at = (e.received - start).num_milliseconds() as f64 / 1000.0;
            let i = (at / bucket_s) as usize;
            if buckets.len() <= i {
                buckets.resize(i + 1, Bucket::default());
            }
            let b = &mut buckets[i];
            b.requests += 1;
            let r = &e.request;
            let writes = matches!(r.verb.as_str(), "create" | "update" | "patch");
            if r.user == "system:apiserver" {
                if r.resource == "customresourcedefinitions/status" && writes {
                    b.crd_status_by_api_server += 1;
                    b.crd_status_ms.push(e.took_ms);
                }
            } else if writes && r.resource == "customresourcedefinitions" {
                if e.dry_run {
                    b.crd_dry_runs += 1;
                } else {
                    b.crds_written += 1;
                }
            } else if writes && r.resource.starts_with("managedresourcedefinitions") {
                b.mrd_writes += 1;
            }
        }
        for b in &mut buckets {
            b.crd_status_ms.sort_by(f64::total_cmp);
        }
        let column = |f: &dyn Fn(&Bucket) -> Value| buckets.iter().map(f).collect::<Vec<_>>();
        // Of a sorted list.
        let quantile = |v: &[f64], q: f64| {
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .map(|x| (x * 10.0).round() / 10.0)
        };
        json!({
            "bucket_s": bucket_s,
            "crds_written": column(&|b| json!(b.crds_written)),
            "crd_dry_runs": column(&|b| json!(b.crd_dry_runs)),
            "crd_status_by_api_server": column(&|b| json!(b.crd_status_by_api_server)),
            "crd_status_ms_p50": column(&|b| json!(quantile(&b.crd_status_ms, 0.5))),
            "crd_status_ms_max": column(&|b| json!(quantile(&b.crd_status_ms, 1.0))),
            "mrd_writes": column(&|b| json!(b.mrd_writes)),
            "requests": column(&|b| json!(b.requests)),
        })
    }
}

/// The pid of `plane`'s process `name` (e.g. `kube-apiserver-control`,
/// `etcd`).
pub fn plane_pid(plane: &testenv::ControlPlane, name: &str) -> u32 {
    plane
        .processes()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no {name} among {:?}", plane.processes()))
}

/// Writes `value` as pretty JSON to `out`, creating its directory.
pub fn write_json(out: &std::path::Path, value: &Value) {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("create the output directory");
    }
    std::fs::write(out, serde_json::to_string_pretty(value).expect("JSON")).expect("write JSON");
}

/// How long a phase waiting on `n` objects may take: a minute, plus 200 ms
/// per object (an order of magnitude slower than the provider has ever
/// been), so 10,000 Objects get about 34 minutes.
pub fn scaled_timeout(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(200) * n as u32
}

/// A client from a kubeconfig.
pub async fn client_of(kubeconfig: kube::config::Kubeconfig) -> kube::Client {
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("a client config");
    kube::Client::try_from(config).expect("a client")
}

/// A client of the control cluster acting as `binary`'s ServiceAccount, as
/// the binaries do: what a null writer writes with.
pub async fn client_as(control: &testenv::Cluster, binary: &str) -> kube::Client {
    let path = e2e::impersonating_kubeconfig_for(control, binary);
    client_of(kube::config::Kubeconfig::read_from(path).expect("the kubeconfig")).await
}

/// Grants `user` cluster-admin in `cluster` (the identity a benchmarked
/// binary uses there through a kubeconfig in a Secret).
pub fn grant_cluster_admin(cluster: &testenv::Cluster, user: &str) {
    let binding = format!("bench:{user}");
    let out = cluster.kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=cluster-admin",
        &format!("--user={user}"),
    ]);
    assert!(
        out.status.success(),
        "granting {user} cluster-admin in the {} cluster: {}",
        cluster.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates (or replaces) Secret `ns/name` in `cluster` holding `kubeconfig`
/// under the key `kubeconfig`.
pub fn kubeconfig_secret(cluster: &testenv::Cluster, ns: &str, name: &str, kubeconfig: &str) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"kubeconfig": kubeconfig},
    });
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], Some(&secret.to_string()));
    assert!(
        out.status.success(),
        "creating Secret {ns}/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Now, UTC, RFC 3339 to the second.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What the machine is: CPUs, their model and memory.
pub fn machine() -> Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let first = |file: &str, key: &str| {
        std::fs::read_to_string(file).ok().and_then(|text| {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
    };
    let mem_kib: f64 = first("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    json!({
        "cpus": cpus,
        "cpu_model": first("/proc/cpuinfo", "model name").unwrap_or_default(),
        "memory_gib": (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
    })
}

/// With the environment variable `var` naming a file, starts an API
/// server's CPU profile (Go pprof, `seconds` long, from `after` into the
/// phase about to begin) written to that name plus `suffix`; read it with
/// `go tool pprof -top FILE`. None without the variable: a run without it
/// asks the API server nothing more.
pub fn profile_server(
    var: &str,
    suffix: &str,
    mut kubectl: std::process::Command,
    after: Duration,
    seconds: u64,
) -> Option<std::thread::JoinHandle<()>> {
    let mut out = std::env::var_os(var)?;
    out.push(suffix);
    let out = PathBuf::from(out);
    Some(std::thread::spawn(move || {
        std::thread::sleep(after);
        let got = kubectl
            .args([
                "get",
                "--raw",
                &format!("/debug/pprof/profile?seconds={seconds}"),
            ])
            .output()
            .expect("kubectl runs");
        std::fs::write(&out, &got.stdout).expect("the profile is written");
        eprintln!(
            "  profile of an API server: {} ({} bytes) {}",
            out.display(),
            got.stdout.len(),
            String::from_utf8_lossy(&got.stderr).trim()
        );
    }))
}
