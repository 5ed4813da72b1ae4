//! The harness every binary runs in: CRD check, metrics/health server, leader
//! election, graceful shutdown; and instrumentation shared by controllers.

use std::{fmt::Debug, hash::Hash, sync::Arc, time::Instant};

use futures::StreamExt;
use kube::{
    Api, Client, Resource, ResourceExt,
    discovery::ApiResource,
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::{net::TcpListener, sync::watch};

use crate::{args::CommonArgs, crds, leader, limits, metrics::Metrics, server};

/// Why a binary stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Metrics could not be registered.
    #[error("failed to register metrics")]
    Metrics(#[from] prometheus::Error),
    /// A CRD is missing.
    #[error(transparent)]
    Crds(#[from] crds::CrdError),
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

    /// Checks the CRDs, starts the HTTP server, then runs `work` (under leader
    /// election when asked) until shutdown.
    pub async fn run<W>(self, kinds: &[ApiResource], work: W) -> Result<(), RunError>
    where
        W: Future<Output = ()>,
    {
        crds::require(&self.client, kinds).await?;
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
        self.health.set_ready(true);
        let result = leader::run(
            self.client.clone(),
            &self.args,
            self.binary,
            &self.metrics,
            work,
            self.shutdown(),
        )
        .await;
        self.health.set_ready(false);
        server.abort();
        result.map_err(RunError::from)
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

    /// Controller config from the flags.
    pub fn controller_config(&self) -> ControllerConfig {
        ControllerConfig::default().concurrency(self.args.concurrency)
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

/// Records one reconcile in the common metrics: in-flight, duration, result.
pub async fn instrument<T, E>(
    metrics: &Metrics,
    controller: &str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let result = measured(metrics, controller, fut).await;
    let outcome = if result.is_ok() { "success" } else { "error" };
    metrics
        .reconciles
        .with_label_values(&[controller, outcome])
        .inc();
    result
}

/// Runs `fut` as one reconcile of `controller`: counted in flight while it
/// runs, its duration observed. The caller counts its result.
async fn measured<O>(metrics: &Metrics, controller: &str, fut: impl Future<Output = O>) -> O {
    let in_flight = metrics.in_flight.with_label_values(&[controller]);
    in_flight.inc();
    let start = Instant::now();
    let output = fut.await;
    in_flight.dec();
    metrics
        .reconcile_duration
        .with_label_values(&[controller])
        .observe(start.elapsed().as_secs_f64());
    output
}

/// An observe-only controller: watches every object of kind `K`, counts and
/// logs what it sees. Binaries whose reconcile logic has not landed run this,
/// so that their wiring (watch, RBAC, metrics, leader election) is exercised.
pub async fn observe<K>(rt: Runtime, controller: &'static str)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
{
    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    rt.metrics.init_controller(controller);
    let api: Api<K> = Api::all(rt.client.clone());
    let rate = limits::RateLimit::per_second(rt.args.max_reconcile_rate);
    let ctx = Arc::new(rt.clone());
    let controller_obj = Controller::new(api, watcher::Config::default());
    let store = controller_obj.store();
    controller_obj
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        .run(
            move |obj: Arc<K>, ctx: Arc<Runtime>| {
                let store = store.clone();
                let rate = rate.clone();
                async move {
                    rate.acquire().await;
                    let metrics = ctx.metrics.clone();
                    instrument(&metrics, controller, async {
                        metrics
                            .pending
                            .with_label_values(&[controller])
                            .set(store.state().len() as i64);
                        tracing::debug!(controller, name = %obj.name_any(), "observed");
                        Ok::<_, Never>(Action::requeue(ctx.args.sync_interval))
                    })
                    .await
                }
            },
            |_obj, _err: &Never, ctx: Arc<Runtime>| Action::requeue(ctx.args.poll_interval),
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// How soon a reconcile that found a cache not yet ready looks again.
pub const CACHE_NOT_READY_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether `store` holds its watch's first complete list. A reconcile must
/// not wait for that: a store fed through `Controller::watches_stream` is
/// filled only while the controller polls its triggers, which it stops doing
/// while every worker is busy, so workers waiting on the store would wait
/// for ever (until --reconcile-timeout). A reconcile that finds it not ready
/// returns `Action::requeue(CACHE_NOT_READY_RETRY)` instead, freeing its
/// worker.
pub async fn cache_ready<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    // A ready store answers at once; a short grace covers the common case of
    // a list that is just completing.
    tokio::time::timeout(
        std::time::Duration::from_millis(20),
        store.wait_until_ready(),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

/// The erased ApiResource of a CRD type, for [`Runtime::run`]'s CRD check.
pub fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// What every reconcile shares: the event reporter, the per-object
/// backoff, the rate limit and the deadline.
#[derive(Clone)]
pub struct Reporting {
    /// Controller name (metric label, event reporter).
    pub controller: &'static str,
    /// Events.
    pub events: crate::events::EventReporter,
    /// Per-object backoff.
    pub backoff: crate::backoff::Backoff,
    /// Metrics.
    pub metrics: Metrics,
    rate: limits::RateLimit,
    deadline: std::time::Duration,
    client: Client,
    field_manager: String,
}

/// Event reason and error category of a reconcile that hit --reconcile-timeout.
pub const REASON_TIMED_OUT: &str = "ReconcileTimedOut";

impl Reporting {
    /// Reporting for one controller of a binary.
    pub fn new(rt: &Runtime, controller: &'static str) -> Self {
        rt.metrics.init_controller(controller);
        Self {
            controller,
            events: crate::events::EventReporter::new(
                rt.client.clone(),
                &format!("crossplane-rs/{}", rt.binary),
                controller,
                rt.args.identity(),
                rt.metrics.clone(),
            ),
            backoff: crate::backoff::Backoff::default(),
            metrics: rt.metrics.clone(),
            rate: limits::RateLimit::per_second(rt.args.max_reconcile_rate),
            deadline: rt.args.reconcile_timeout,
            client: rt.client.clone(),
            field_manager: rt.field_manager(),
        }
    }

    /// Runs one reconcile of `obj`, once the controller's rate limit
    /// (--max-reconcile-rate) lets it, within --reconcile-timeout, with
    /// metrics. Then:
    /// - success: the backoff count is reset;
    /// - a lost race ([`crate::events::ReconcileError::is_conflict`]): the
    ///   object is looked at again after its backoff delay, quietly (no
    ///   event, no error metric; result "conflict");
    /// - failure: a log line, a Warning event and the error metric; the
    ///   error policy then retries with backoff;
    /// - timeout: the same report (category ReconcileTimedOut), and Synced
    ///   becomes False saying so; retried with backoff.
    pub async fn reconcile<K, E>(
        &self,
        obj: &K,
        fut: impl Future<Output = Result<Action, E>>,
    ) -> Result<Action, E>
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
        E: crate::events::ReconcileError + 'static,
    {
        let key = key_of(obj);
        let span = tracing::info_span!(
            "reconcile",
            controller = self.controller,
            object = %display_key(obj)
        );
        self.rate.acquire().await;
        let outcome = tracing::Instrument::instrument(
            measured(
                &self.metrics,
                self.controller,
                tokio::time::timeout(self.deadline, fut),
            ),
            span,
        )
        .await;
        let (label, result) = match outcome {
            Ok(Ok(action)) => {
                self.backoff.succeeded(&key);
                ("success", Ok(action))
            }
            Ok(Err(e)) if e.is_conflict() => {
                tracing::debug!(
                    controller = self.controller,
                    object = %key,
                    error = %crate::events::error_chain(&e),
                    "the object changed while it was reconciled; looking again"
                );
                ("conflict", Ok(Action::requeue(self.backoff.failed(&key))))
            }
            Ok(Err(e)) => {
                self.events.report_error(&obj.object_ref(&()), &e).await;
                ("error", Err(e))
            }
            Err(_) => {
                self.timed_out(obj).await;
                ("error", Ok(Action::requeue(self.backoff.failed(&key))))
            }
        };
        self.metrics
            .reconciles
            .with_label_values(&[self.controller, label])
            .inc();
        self.count_backing_off();
        result
    }

    /// Reports a reconcile abandoned at --reconcile-timeout, and says so in
    /// the object's Synced condition. The condition is applied with a field
    /// manager of its own, so that the controller's own status (applied as a
    /// whole with its manager) is left as it is; the controller's next write
    /// of Synced takes it back.
    async fn timed_out<K>(&self, obj: &K)
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let message = format!(
            "the reconcile did not finish within {} (an API server it talks to did not answer in time); retrying",
            humantime::format_duration(self.deadline)
        );
        self.events
            .report(&obj.object_ref(&()), REASON_TIMED_OUT, message.clone())
            .await;
        let current: Vec<types::common::Condition> = serde_json::to_value(obj)
            .ok()
            .and_then(|v| v.pointer("/status/conditions").cloned())
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        let mut conditions = current;
        crate::conditions::set(
            &mut conditions,
            crate::conditions::reconcile_error(message),
            &crate::conditions::now(),
        );
        let synced: Vec<_> = conditions
            .into_iter()
            .filter(|c| c.type_ == crate::conditions::TYPE_SYNCED)
            .collect();
        let ar = ApiResource::erase::<K>(&());
        let api: Api<kube::api::DynamicObject> = match obj.meta().namespace.as_deref() {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": {"conditions": synced},
        });
        let manager = format!("{}-timeout", self.field_manager);
        if let Err(error) = api
            .patch_status(
                &obj.name_any(),
                &crate::ssa::params(&manager),
                &kube::api::Patch::Apply(&body),
            )
            .await
        {
            tracing::warn!(controller = self.controller, %error, "failed to record the timeout in Synced");
        }
    }

    /// Publishes how many objects are backing off now.
    fn count_backing_off(&self) {
        self.metrics
            .backoff
            .with_label_values(&[self.controller])
            .set(self.backoff.len() as i64);
    }

    /// The error policy: retry this object after its backoff delay.
    pub fn retry<K: Resource>(&self, obj: &K) -> Action {
        let delay = self.backoff.failed(&key_of(obj));
        self.count_backing_off();
        Action::requeue(delay)
    }
}

/// "namespace/name" (or "name"), as logs name an object.
fn display_key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
        _ => meta.name.clone().unwrap_or_default(),
    }
}

fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    meta.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    })
}
