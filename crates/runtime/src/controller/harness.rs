//! The harness every binary runs in: the control-cluster client, the wait
//! for the API server and the CRDs, the metrics/health server, leader
//! election (standing by and leading again in the same process) and
//! graceful shutdown.

use kube::{
    Api, Client, Resource, discovery::ApiResource, runtime::controller::Config as ControllerConfig,
};
use tokio::{net::TcpListener, sync::watch};

use crate::{args::CommonArgs, crds, leader, limits, metrics::Metrics, server};

/// Why a binary stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Metrics could not be registered.
    #[error("failed to register metrics")]
    Metrics(#[from] prometheus::Error),
    /// The HTTP server could not bind.
    #[error(
        "failed to listen on {addr} for /metrics, /healthz and /readyz (is the port taken? set --metrics-addr)"
    )]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("the metrics server failed")]
    Serve(#[source] std::io::Error),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// No client for the control cluster.
    #[error("cannot build a client for the control cluster (set KUBECONFIG, or run in a pod)")]
    Client(#[source] kube::Error),
}

/// What a binary's controllers share.
#[derive(Clone)]
pub struct Runtime {
    /// Binary name, e.g. "scheduler".
    pub binary: &'static str,
    /// Client for the control cluster.
    pub client: Client,
    /// Common flags.
    pub args: CommonArgs,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Readiness.
    pub health: server::Health,
    /// Deadlines and circuit breakers for the remote clusters this binary
    /// talks to (--remote-timeout).
    pub clusters: limits::Clusters,
    shutdown: watch::Receiver<bool>,
}

impl Runtime {
    /// Sets up metrics, the control-cluster client (from KUBECONFIG or the
    /// pod's service account; its requests are counted as cluster "control")
    /// and the shutdown signal (SIGTERM or Ctrl-C).
    pub async fn new(binary: &'static str, args: CommonArgs) -> Result<Self, RunError> {
        if args.leader_elect {
            // Unsafe leader-election flags stop the binary before it starts.
            leader::Timing::new(
                args.leader_election_lease_duration,
                args.leader_election_renew_deadline,
            )?;
        }
        let metrics = Metrics::new()?;
        let config = kube::Config::infer()
            .await
            .map_err(|e| RunError::Client(kube::Error::InferConfig(e)))?;
        let client = crate::remote::counted_client(config, &metrics).map_err(RunError::Client)?;
        let clusters = limits::Clusters::new(args.remote_timeout, metrics.registry())?;
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown signal received; stopping");
            let _ = tx.send(true);
        });
        Ok(Self {
            binary,
            client,
            args,
            metrics,
            health: server::Health::default(),
            clusters,
            shutdown: rx,
        })
    }

    /// The field manager this binary applies with.
    pub fn field_manager(&self) -> String {
        format!("crossplane-rs/{}", self.binary)
    }

    /// Resolves when the binary is asked to stop.
    pub fn shutdown(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut rx = self.shutdown.clone();
        async move {
            while !*rx.borrow_and_update() {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// Starts the HTTP server, waits for the API server and the CRDs, then
    /// runs the work `build` makes (under leader election when asked: made
    /// again each time this replica leads again) until shutdown. An API
    /// server that does not answer never stops the process: at start it is
    /// waited for, while leading it makes this replica stand by.
    pub async fn run<B, W>(self, kinds: &[ApiResource], build: B) -> Result<(), RunError>
    where
        B: FnMut() -> W,
        W: Future<Output = Result<(), RunError>>,
    {
        let addr = self.args.metrics_addr;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Bind { addr, source })?;
        tracing::info!(binary = self.binary, %addr, "serving /metrics, /healthz and /readyz");
        let server = tokio::spawn(server::serve(
            listener,
            self.metrics.clone(),
            self.health.clone(),
            self.shutdown(),
        ));
        let started = tokio::select! {
            () = crds::wait_for(&self.client, kinds) => true,
            () = self.shutdown() => false,
        };
        let result = if started {
            self.health.set_ready(true);
            leader::run(
                self.client.clone(),
                &self.args,
                self.binary,
                &self.metrics,
                build,
                self.shutdown(),
            )
            .await
        } else {
            Ok(())
        };
        self.health.set_ready(false);
        server.abort();
        result
    }

    /// The Api for a namespaced kind: one namespace with --watch-namespace,
    /// else all.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.args.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Controller config: the kube-rs runner hands every due object at
    /// once to [`crate::reconciler::drive`]'s queue, which gives the
    /// --concurrency workers their turns in the order objects became due.
    /// Measured with 100 GitLab applications at once (an application's
    /// resources are created together, so in that order each application
    /// is done before the next): p50 Submitted 278 s -> 114 s against the
    /// hash order a bounded runner takes what it held back in.
    pub fn controller_config(&self) -> ControllerConfig {
        ControllerConfig::default().concurrency(0)
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The erased ApiResource of a CRD type, for [`Runtime::run`]'s CRD check.
pub fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}
