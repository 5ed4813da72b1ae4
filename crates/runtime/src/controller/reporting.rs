//! The reporting of reconciles: rate limit, deadline, metrics, a log line,
//! a Warning event and the per-object backoff, in a `tracing` span per
//! reconcile.

use std::time::Instant;

use kube::{
    Api, Client, Resource, ResourceExt, discovery::ApiResource, runtime::controller::Action,
};

use crate::{limits, metrics::Metrics};

use super::Runtime;

/// Runs `fut` as one reconcile of `controller`: counted in flight while it
/// runs, its duration observed (and returned). The caller counts its result.
async fn measured<O>(
    metrics: &Metrics,
    controller: &str,
    fut: impl Future<Output = O>,
) -> (O, std::time::Duration) {
    // Counted down when the reconcile ends or is dropped (its controller
    // stopped: this replica stood down).
    let in_flight = InFlight::new(metrics.in_flight.with_label_values(&[controller]));
    let start = Instant::now();
    let output = fut.await;
    drop(in_flight);
    let took = start.elapsed();
    metrics
        .reconcile_duration
        .with_label_values(&[controller])
        .observe(took.as_secs_f64());
    (output, took)
}

/// One reconcile counted in flight while it lives.
struct InFlight(prometheus::IntGauge);

impl InFlight {
    fn new(gauge: prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
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
    /// How many reconciles run at once (--concurrency; 0: no bound).
    pub concurrency: u16,
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
            concurrency: rt.args.concurrency,
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
        let (outcome, took) = tracing::Instrument::instrument(
            measured(
                &self.metrics,
                self.controller,
                tokio::time::timeout(self.deadline, fut),
            ),
            span.clone(),
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
                match e.retry_within() {
                    // Reported like any failure, but retried no later than
                    // the failure says (the error policy is not asked).
                    Some(bound) => (
                        "error",
                        Ok(Action::requeue(self.backoff.failed(&key).min(bound))),
                    ),
                    None => ("error", Err(e)),
                }
            }
            Err(_) => {
                self.timed_out(obj).await;
                ("error", Ok(Action::requeue(self.backoff.failed(&key))))
            }
        };
        tracing::debug!(
            parent: &span,
            outcome = label,
            took_ms = took.as_millis(),
            "reconciled"
        );
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
            let controller = self.controller;
            tracing::warn!(controller, %error, "failed to record the timeout in Synced");
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
