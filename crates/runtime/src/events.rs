//! Events and the reconcile reporter: one place turns a reconcile result into
//! a log line, a Kubernetes Event and metrics.

use std::error::Error as StdError;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

use crate::metrics::Metrics;

/// An error a reconcile can fail with: it names its category, a bounded
/// label used as the Event reason and the metric label.
pub trait ReconcileError: StdError {
    /// A short CamelCase category, e.g. "CannotConnectToCluster".
    fn category(&self) -> &'static str;

    /// Whether the reconcile lost a race rather than failed: a write guarded
    /// by what was read (a status written at a resourceVersion, a finalizer
    /// patch that tests the list) found the object changed. The skeleton
    /// retries such a reconcile quietly, without an event or an error
    /// metric. By default: a 409 Conflict anywhere in the source chain.
    fn is_conflict(&self) -> bool
    where
        Self: Sized + 'static,
    {
        is_conflict(self)
    }

    /// The longest a retry of this failure may wait, when the failure says
    /// when trying again makes sense: a cluster whose breaker is open is
    /// probed at least every [`crate::limits::PROBE_CAP`], so its objects
    /// must not sit out a longer per-object backoff once it answers again.
    /// By default: no bound beyond the backoff's own cap.
    fn retry_within(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Whether `error` or one of its sources is an API server's 409 Conflict
/// ("the object has been modified"). AlreadyExists, also a 409, is not a
/// conflict: it is an answer.
pub fn is_conflict(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        let status = e
            .downcast_ref::<kube::core::Status>()
            .or_else(|| e.downcast_ref::<Box<kube::core::Status>>().map(|b| &**b))
            .or_else(|| match e.downcast_ref::<kube::Error>() {
                Some(kube::Error::Api(s)) => Some(&**s),
                _ => None,
            })
            .or_else(
                || match e.downcast_ref::<Box<kube::Error>>().map(|b| &**b) {
                    Some(kube::Error::Api(s)) => Some(&**s),
                    _ => None,
                },
            );
        if let Some(s) = status {
            return s.code == 409 && s.reason == "Conflict";
        }
        next = e.source();
    }
    false
}

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventReporter {
    recorder: Recorder,
    controller: String,
    metrics: Metrics,
}

impl EventReporter {
    /// A reporter for `controller` (its name in metrics and logs) whose
    /// events come from `reporter` (e.g. "crossplane-rs/scheduler"), with this
    /// replica's identity.
    pub fn new(
        client: Client,
        reporter: &str,
        controller: &str,
        instance: String,
        metrics: Metrics,
    ) -> Self {
        let reporter = Reporter {
            controller: reporter.to_owned(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            controller: controller.to_owned(),
            metrics,
        }
    }

    /// A Normal event, e.g. reason "Scheduled".
    pub async fn normal(&self, object: &ObjectReference, reason: &str, note: String) {
        self.publish(object, EventType::Normal, reason, note).await;
    }

    /// A Warning event.
    pub async fn warning(&self, object: &ObjectReference, reason: &str, note: String) {
        self.publish(object, EventType::Warning, reason, note).await;
    }

    async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(types::printable(&note).into_owned(), 1000)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, object).await {
            // An event that cannot be published must not fail the reconcile.
            tracing::warn!(%error, reason, "failed to publish event");
        }
    }

    /// Reports a failed reconcile: a log line, a Warning event whose reason is
    /// the category and whose note is the error's source chain, and the error
    /// metric.
    pub fn report_error<'a>(
        &'a self,
        object: &'a ObjectReference,
        error: &dyn ReconcileError,
    ) -> impl Future<Output = ()> + Send + 'a {
        let note = error_chain(error);
        let category = error.category();
        self.report(object, category, note)
    }

    /// Reports a failure of `category` (the Event reason and metric label):
    /// a log line, the error metric and a Warning event with `note`.
    pub async fn report(&self, object: &ObjectReference, category: &'static str, note: String) {
        tracing::warn!(controller = %self.controller, category, error = %note, "reconcile failed");
        self.metrics
            .errors
            .with_label_values(&[&self.controller, category])
            .inc();
        self.warning(object, category, note).await;
    }
}

/// "a: b: c" for an error and its sources.
pub fn error_chain(error: &dyn StdError) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to connect to cluster")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_names_every_source_once() {
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(
            error_chain(&e),
            "failed to connect to cluster: connection refused"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("failed to write status")]
    struct Write(#[source] kube::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("failed to write status")]
    struct BoxedWrite(#[source] Box<kube::Error>);

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_conflict_anywhere_in_the_chain_is_a_lost_race() {
        assert!(is_conflict(&Write(api_error(409, "Conflict"))));
        assert!(is_conflict(&BoxedWrite(Box::new(api_error(
            409, "Conflict"
        )))));
        assert!(is_conflict(&api_error(409, "Conflict")));
    }

    #[test]
    fn other_answers_are_failures() {
        assert!(!is_conflict(&Write(api_error(409, "AlreadyExists"))));
        assert!(!is_conflict(&Write(api_error(422, "Invalid"))));
        assert!(!is_conflict(&Write(api_error(500, "InternalError"))));
        assert!(!is_conflict(&Outer(std::io::Error::other("timed out"))));
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let s = "é".repeat(600);
        assert!(truncate(s, 1000).len() <= 1000);
    }
}
