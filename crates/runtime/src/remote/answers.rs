//! When a cluster last answered, as its clients saw it: what
//! [`crate::limits::Clusters`] reads to tell a cluster that does not answer
//! from work that is slow for other reasons (this binary's own start-up
//! burst, requests queued behind each other, waits on its own watches).
//!
//! Every client of a cluster (requests and watches alike) carries the
//! [`super::CountingLayer`], which records here when a request is sent,
//! when its response headers arrive (an answer, whatever its status), when
//! bytes of a response body arrive (a long list, an open watch's events:
//! the cluster is answering even while no request ends), and when a
//! request fails without any answer (connection refused, TLS, timeout).

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The instant every [`Answers`] counts its milliseconds from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`], plus one so that 0 can mean "never".
fn stamp(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Time from a [`stamp`] to `now` (zero for "never" or the future).
fn since(stamp: u64, now: Instant) -> Duration {
    if stamp == 0 {
        return Duration::MAX;
    }
    let now = self::stamp(now);
    Duration::from_millis(now.saturating_sub(stamp))
}

/// How one cluster has been answering; shared by its clients (and clones
/// of its [`super::RemoteCluster`]).
#[derive(Debug, Default)]
pub struct Answers {
    /// When response headers last arrived.
    answered: AtomicU64,
    /// Requests sent and neither answered nor failed yet.
    pending: AtomicU32,
    /// When `pending` last went from 0 to 1: since then someone has been
    /// waiting on the cluster.
    asked: AtomicU64,
    /// When a request last failed without an answer.
    failed: AtomicU64,
}

impl Answers {
    /// The answers of the control cluster, recorded by the client of
    /// [`super::counted_client`].
    pub fn control() -> Arc<Answers> {
        static CONTROL: OnceLock<Arc<Answers>> = OnceLock::new();
        CONTROL.get_or_init(Arc::default).clone()
    }

    /// A request is sent at `now`; what to call when it ends.
    pub(crate) fn ask(self: &Arc<Self>, now: Instant) -> Asking {
        if self.pending.fetch_add(1, Ordering::AcqRel) == 0 {
            self.asked.store(stamp(now), Ordering::Release);
        }
        Asking {
            answers: self.clone(),
            done: false,
        }
    }

    /// How long someone has been waiting on the cluster with nothing coming
    /// back: zero when no request is waiting, else the time since the later
    /// of the last answer and the start of the wait.
    pub fn silent_for(&self, now: Instant) -> Duration {
        if self.pending.load(Ordering::Acquire) == 0 {
            return Duration::ZERO;
        }
        let last = self
            .answered
            .load(Ordering::Acquire)
            .max(self.asked.load(Ordering::Acquire));
        since(last, now)
    }

    /// Whether a request failed with nothing from the cluster (refused,
    /// TLS, a connect or read timeout) at or after `start`.
    pub fn failed_since(&self, start: Instant) -> bool {
        let failed = self.failed.load(Ordering::Acquire);
        failed != 0 && failed >= stamp(start)
    }

    /// Whether anything came back from the cluster at or after `start`.
    pub fn answered_since(&self, start: Instant) -> bool {
        let answered = self.answered.load(Ordering::Acquire);
        answered != 0 && answered >= stamp(start)
    }
}

impl Answers {
    /// Bytes of a response body (a list's items, a watch's events) arrived:
    /// the cluster is answering, though no request ends.
    pub(crate) fn heard(&self, now: Instant) {
        self.answered.fetch_max(stamp(now), Ordering::AcqRel);
    }
}

/// One request in flight; dropped unfinished (cancelled), it only stops
/// counting as waiting.
pub(crate) struct Asking {
    answers: Arc<Answers>,
    done: bool,
}

impl Asking {
    /// Response headers arrived.
    pub(crate) fn answered(mut self, now: Instant) {
        self.answers
            .answered
            .fetch_max(stamp(now), Ordering::AcqRel);
        self.end();
    }

    /// The request failed with nothing from the cluster.
    pub(crate) fn failed(mut self, now: Instant) {
        self.answers.failed.fetch_max(stamp(now), Ordering::AcqRel);
        self.end();
    }

    fn end(&mut self) {
        if !self.done {
            self.done = true;
            self.answers.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nobody_waiting_is_not_silence() {
        let a = Arc::new(Answers::default());
        let t0 = Instant::now();
        assert_eq!(a.silent_for(t0 + Duration::from_secs(60)), Duration::ZERO);
        let asking = a.ask(t0);
        assert_eq!(
            a.silent_for(t0 + Duration::from_secs(12)),
            Duration::from_secs(12)
        );
        asking.answered(t0 + Duration::from_secs(1));
        assert_eq!(a.silent_for(t0 + Duration::from_secs(60)), Duration::ZERO);
        assert!(a.answered_since(t0));
    }

    #[test]
    fn an_answer_to_any_request_ends_the_silence() {
        let a = Arc::new(Answers::default());
        let t0 = Instant::now();
        let slow = a.ask(t0);
        let quick = a.ask(t0 + Duration::from_secs(1));
        quick.answered(t0 + Duration::from_secs(8));
        assert_eq!(
            a.silent_for(t0 + Duration::from_secs(11)),
            Duration::from_secs(3)
        );
        drop(slow);
        assert_eq!(a.silent_for(t0 + Duration::from_secs(30)), Duration::ZERO);
    }

    #[test]
    fn bytes_of_a_body_end_the_silence_though_no_request_ends() {
        let a = Arc::new(Answers::default());
        let t0 = Instant::now();
        let waiting = a.ask(t0);
        a.heard(t0 + Duration::from_secs(9));
        assert_eq!(
            a.silent_for(t0 + Duration::from_secs(10)),
            Duration::from_secs(1)
        );
        drop(waiting);
    }

    #[test]
    fn a_failure_is_remembered_apart_from_answers() {
        let a = Arc::new(Answers::default());
        let t0 = Instant::now();
        a.ask(t0).failed(t0 + Duration::from_secs(5));
        assert!(a.failed_since(t0));
        assert!(!a.failed_since(t0 + Duration::from_secs(6)));
        assert!(!a.answered_since(t0));
        assert_eq!(a.silent_for(t0 + Duration::from_secs(60)), Duration::ZERO);
    }
}
