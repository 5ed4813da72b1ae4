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
}

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventReporter {
    recorder: Recorder,
    controller: String,
    metrics: Metrics,
}

impl EventReporter {
    /// A reporter named after the controller, with this replica's identity.
    pub fn new(client: Client, controller: &str, instance: String, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
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
            note: Some(truncate(note, 1000)),
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

    async fn report(&self, object: &ObjectReference, category: &'static str, note: String) {
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

fn truncate(mut s: String, max: usize) -> String {
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

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let s = "é".repeat(600);
        assert!(truncate(s, 1000).len() <= 1000);
    }
}
