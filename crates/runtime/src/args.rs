//! Flags every binary shares; each also reads an environment variable.

use std::{net::SocketAddr, time::Duration};

use clap::{Args, ValueEnum};

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Flags shared by every binary (flatten into the binary's own `Args`).
#[derive(Clone, Debug, Args)]
pub struct CommonArgs {
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Run only while holding a coordination.k8s.io Lease, so that replicas > 1
    /// is safe.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "crossplane-system")]
    pub leader_election_namespace: String,

    /// How long a standby replica waits, after it last saw the leader renew
    /// the Lease, before it takes the Lease over. A leader that stops
    /// gracefully releases the Lease, and a standby takes over within a
    /// second instead. At least 1s; the Lease records it in whole seconds,
    /// rounded up.
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// How long the leader goes on while it cannot renew its Lease (the API
    /// server is slow or unreachable). When no renewal has succeeded for
    /// this long, the binary stops its controllers and exits with an error
    /// (its replacement starts as a standby), so it has stopped before any
    /// standby may take the Lease over. At most nine tenths of
    /// --leader-election-lease-duration; the rest is the safety margin.
    /// Default: two thirds of the lease duration. The leader renews every
    /// quarter of this (at most every 2s).
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", value_parser = humantime::parse_duration)]
    pub leader_election_renew_deadline: Option<Duration>,

    /// This replica's identity in the Lease (defaults to the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Upper bound of reconciles per second per controller (a token bucket:
    /// bursts of up to this many, then one every 1/rate seconds); reconciles
    /// beyond it wait their turn. 0 means no bound. A reconcile that finds
    /// nothing to do is answered from watch caches and makes no request; one
    /// that creates or changes something makes about three, so the default
    /// bounds a controller to roughly 600 requests per second in a burst.
    #[arg(long, env = "MAX_RECONCILE_RATE", default_value_t = 200)]
    pub max_reconcile_rate: u32,

    /// How long a remote cluster may be silent (a request to it waiting
    /// with nothing at all coming back) before a reconcile working against
    /// it gives up and reports, in the object's condition, that the cluster
    /// did not answer. Work that is slow while the cluster answers goes on
    /// (bounded by --reconcile-timeout). A cluster that did not answer is then only
    /// probed (one reconcile at a time, after a pause of 5s doubling to 1m)
    /// until it answers again; its other objects fail at once with the same
    /// message, so a stalled cluster holds no workers that other clusters
    /// need.
    #[arg(long, env = "REMOTE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub remote_timeout: Duration,

    /// How long one reconcile may take in all. A reconcile still running
    /// then is abandoned, its object's Synced condition says so, and it is
    /// retried with backoff. Keep it above --remote-timeout, which bounds
    /// the remote part.
    #[arg(long, env = "RECONCILE_TIMEOUT", default_value = "1m", value_parser = humantime::parse_duration)]
    pub reconcile_timeout: Duration,

    /// How many objects each controller reconciles at once.
    #[arg(long, env = "CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,

    /// A safety resync: how often every object is looked at again even
    /// though nothing woke it (±10% per object, so they spread out). Remote
    /// objects and referenced objects are watched, so changes arrive within
    /// a second or two without it; a resync is answered from the watch
    /// caches and costs no request when nothing changed.
    #[arg(long, env = "POLL_INTERVAL", default_value = "10m", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// Watch only this namespace (namespaced kinds); all namespaces when
    /// unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// How often every object is reconciled even when nothing changed.
    #[arg(long, env = "SYNC_INTERVAL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub sync_interval: Duration,

    /// Accept kubeconfigs (from KubernetesCluster and ProviderConfig
    /// Secrets) that set `insecure-skip-tls-verify: true` or use an
    /// `http://` server. Off by default: without verification anyone on the
    /// network path can pose as the remote cluster and receive the
    /// credentials the kubeconfig carries. Turn it on only for test clusters
    /// whose certificates cannot be verified; prefer putting the cluster's CA
    /// under `certificate-authority-data`. Other kubeconfig fields that run
    /// commands or read files (`exec`, `auth-provider`, `tokenFile`, ...)
    /// are refused whatever this says.
    #[arg(long, env = "ALLOW_INSECURE_REMOTE_TLS", default_value_t = false)]
    pub allow_insecure_remote_tls: bool,

    /// How many times within an hour a managed object's fields may be put
    /// back after someone else changed them before its resource says it is
    /// in a drift loop (condition DriftLoop, naming the other manager).
    /// Corrections go on either way: the condition says a fight is on.
    #[arg(long, env = "DRIFT_LOOP_THRESHOLD", default_value_t = 5)]
    pub drift_loop_threshold: u32,
}

impl CommonArgs {
    /// This replica's identity: --identity, else the host name, else a fixed
    /// fallback (two replicas must then be given identities explicitly).
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .unwrap_or_else(|| "crossplane-rs".to_owned())
    }
}
