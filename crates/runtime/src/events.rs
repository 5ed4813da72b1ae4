//! Events and the reconcile reporter: one place turns a reconcile result into
//! a log line, a Kubernetes Event and metrics.

use std::{
    error::Error as StdError,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};

use crate::{lru::Lru, metrics::Metrics};

/// How long an event repeated counts in the first one's series instead of
/// making another Event (what client-go and kube-rs use).
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How many recent events a controller remembers for series, whatever it
/// publishes: a burst of one event per object (an Activated per MRD, 5000
/// for 50 Providers of 100 kinds) must not cost memory per object. The
/// least recently published is forgotten first; repeating it then makes a
/// new Event, not a wrong count.
const REMEMBERED: usize = 1024;

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

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// An Event published lately, for its series: what it is called and how
/// many times it was seen. Its key is a hash of what makes events the same
/// (type, reason, regarding object), not a copy of them.
struct Sent {
    name: String,
    count: i32,
    at: Instant,
}

/// Publishes `events.k8s.io/v1` Events, counting an event repeated within
/// [`SERIES_WINDOW`] in the first one's series (a patch of its count)
/// instead of making another. Unlike kube-rs's recorder it remembers at
/// most [`REMEMBERED`] events, each as a name and a count, and never holds
/// its lock across a request.
#[derive(Clone)]
struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    hasher: RandomState,
    sent: Arc<Mutex<Lru<u64, Sent>>>,
}

impl Recorder {
    fn new(client: Client, controller: String, instance: String) -> Self {
        Self {
            client,
            controller,
            instance,
            hasher: RandomState::new(),
            sent: Arc::new(Mutex::new(Lru::new(REMEMBERED))),
        }
    }

    /// What makes two events one series: the same type and reason about
    /// the same object (its note may differ: the series keeps the first,
    /// as client-go's does).
    fn key(&self, type_: EventType, reason: &str, regarding: &ObjectReference) -> u64 {
        self.hasher.hash_one((
            type_,
            reason,
            &regarding.api_version,
            &regarding.kind,
            &regarding.namespace,
            &regarding.name,
            &regarding.uid,
        ))
    }

    /// The events remembered (what they forget is dropped by the caller
    /// after the guard, outside the lock).
    fn sent(&self) -> MutexGuard<'_, Lru<u64, Sent>> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The series an event with `key` continues, counted once more.
    fn repeat(&self, key: u64, now: Instant) -> Option<(String, i32)> {
        let mut sent = self.sent();
        let s = sent.get(&key)?;
        if now.duration_since(s.at) > SERIES_WINDOW {
            sent.remove(&key);
            return None;
        }
        s.count += 1;
        s.at = now;
        Some((s.name.clone(), s.count))
    }

    async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        note: String,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        // A cluster-scoped object's events go to "default", as kubectl
        // describe looks for them.
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let key = self.key(type_, reason, regarding);
        let now = Timestamp::now();
        if let Some((name, count)) = self.repeat(key, Instant::now()) {
            let series = serde_json::json!({"series": {
                "count": count,
                "lastObservedTime": MicroTime(now),
            }});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (its TTL, or deleted): a new Event starts a series.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    let gone = self.sent().remove(&key);
                    drop(gone);
                }
                Err(e) => return Err(e),
            }
        }
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            action: Some("Reconcile".to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note),
            type_: Some(type_.as_str().to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let made = events.create(&PostParams::default(), &event).await?;
        let sent = Sent {
            name: made.metadata.name.unwrap_or_default(),
            count: 1,
            at: Instant::now(),
        };
        let forgotten = self.sent().insert(key, sent);
        drop(forgotten);
        Ok(())
    }
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
        Self {
            recorder: Recorder::new(client, reporter.to_owned(), instance),
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
        let note = truncate(types::printable(&note).into_owned(), 1000);
        if let Err(error) = self.recorder.publish(type_, reason, note, object).await {
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

    fn recorder() -> Recorder {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Recorder::new(client, "crossplane-rs/test".into(), "test-0".into())
    }

    fn object(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("pkg.crossplane.io/v1".into()),
            kind: Some("Provider".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    #[tokio::test]
    async fn a_repeated_event_counts_in_its_series_within_the_window_only() {
        let r = recorder();
        let a = object("a", "1");
        let key = r.key(EventType::Warning, "CannotPull", &a);
        assert_eq!(key, r.key(EventType::Warning, "CannotPull", &a));
        for other in [
            r.key(EventType::Normal, "CannotPull", &a),
            r.key(EventType::Warning, "Installed", &a),
            r.key(EventType::Warning, "CannotPull", &object("b", "2")),
            r.key(EventType::Warning, "CannotPull", &object("a", "3")),
        ] {
            assert_ne!(key, other, "a different event is another series");
        }
        let t0 = Instant::now();
        assert_eq!(r.repeat(key, t0), None, "nothing published yet");
        r.sent.lock().unwrap().insert(
            key,
            Sent {
                name: "a.1".into(),
                count: 1,
                at: t0,
            },
        );
        assert_eq!(r.repeat(key, t0), Some(("a.1".into(), 2)));
        let later = t0 + SERIES_WINDOW - Duration::from_secs(1);
        assert_eq!(r.repeat(key, later), Some(("a.1".into(), 3)));
        let past = later + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(r.repeat(key, past), None, "too old: a new Event");
        assert!(r.sent.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_burst_of_events_is_remembered_up_to_a_bound() {
        let r = recorder();
        let t0 = Instant::now();
        for n in 0..(REMEMBERED * 3) {
            let key = r.key(
                EventType::Normal,
                "Activated",
                &object(&format!("m{n}"), "u"),
            );
            r.sent.lock().unwrap().insert(
                key,
                Sent {
                    name: format!("m{n}.1"),
                    count: 1,
                    at: t0,
                },
            );
        }
        assert_eq!(r.sent.lock().unwrap().len(), REMEMBERED);
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let s = "é".repeat(600);
        assert!(truncate(s, 1000).len() <= 1000);
    }
}
