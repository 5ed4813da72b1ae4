//! Status writes that follow a burst wait for it to settle.
//!
//! Some status fields only mirror another system's churn: a remote
//! Deployment's status, which its own controller rewrites several times in a
//! second while it rolls out; an application's count of submitted resources,
//! which moves once per resource. Writing each step costs the control
//! cluster a request (and wakes every watcher of the kind) for a state that
//! is gone a moment later. A controller marks such changes and says how
//! long each may wait ([`crate::reconciler::Reconciler::may_wait`]); the
//! skeleton then holds the write back until that long after the first
//! change it held, looks again then (or sooner, when something wakes the
//! object) and writes whatever the status has become by then: one write per
//! window, the last state at most one window late. A change that is not
//! marked (a new state, a failure) is written at once and takes whatever
//! was held with it. While a change is held, the object is not reconciled
//! again before the window ends (each wake would only find the same status
//! to hold) unless its generation changed or it is being deleted: the burst
//! costs one reconcile per wake less, and the reconcile at the window's end
//! sees everything.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use types::common::Condition;

use crate::{conditions, expiring::Expiring};

/// The objects whose status write is being held back, by UID, with the
/// moment their window ends. Cheap to clone (clones share).
#[derive(Clone)]
pub struct Coalesce {
    longest: Duration,
    held: Arc<Expiring<String, (Instant, Option<i64>)>>,
}

impl Coalesce {
    /// Holds marked status changes back, each for up to the window its
    /// controller gives it and never longer than `longest`.
    pub fn new(longest: Duration) -> Self {
        Self {
            longest,
            // An entry outlives its window only when its object went away
            // without a write: dropped a few windows later.
            held: Arc::new(Expiring::new(longest * 4)),
        }
    }

    /// How long a held change waits at most.
    pub fn longest(&self) -> Duration {
        self.longest
    }

    /// For a marked change of `uid` (at `generation`) seen now that may
    /// wait up to `window` from the first held one: `Some(wait)` while that
    /// window runs (look again after `wait`, write nothing now), None once
    /// it is over (write now). A later change does not move the window.
    pub fn hold(&self, uid: &str, generation: Option<i64>, window: Duration) -> Option<Duration> {
        self.hold_at(uid, generation, window, Instant::now())
    }

    /// `Some(wait)` while a change of `uid` is held and its generation is
    /// still `generation`: nothing to reconcile before the window ends.
    pub fn waiting(&self, uid: &str, generation: Option<i64>) -> Option<Duration> {
        self.waiting_at(uid, generation, Instant::now())
    }

    fn hold_at(
        &self,
        uid: &str,
        generation: Option<i64>,
        window: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let due = match self.held.get(&uid.to_owned()) {
            Some((due, _)) => due,
            None => {
                let due = now + window.min(self.longest);
                self.held.insert(uid.to_owned(), (due, generation));
                due
            }
        };
        (now < due).then(|| due - now)
    }

    fn waiting_at(&self, uid: &str, generation: Option<i64>, now: Instant) -> Option<Duration> {
        let (due, held_at) = self.held.get(&uid.to_owned())?;
        (held_at == generation && now < due).then(|| due - now)
    }

    /// The status of `uid` was written (or needs no write any more):
    /// nothing is held for it.
    pub fn release(&self, uid: &str) {
        self.held.remove(&uid.to_owned());
    }

    /// How many objects have a change held back now.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// Whether two condition lists are the same but for Ready: a change of
/// Ready alone may follow the churn of what it reports on.
pub fn same_but_ready(a: &[Condition], b: &[Condition]) -> bool {
    let others = |cs: &[Condition]| -> Vec<Condition> {
        cs.iter()
            .filter(|c| c.type_ != conditions::TYPE_READY)
            .cloned()
            .collect()
    };
    others(a) == others(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_change_waits_one_window_from_the_first_change_then_is_written() {
        let w = Duration::from_secs(1);
        let c = Coalesce::new(w);
        let (t0, g) = (Instant::now(), Some(1));
        assert_eq!(c.waiting_at("a", g, t0), None);
        assert_eq!(c.hold_at("a", g, w, t0), Some(w));
        // Later changes in the same burst do not push the write back, and
        // need no reconcile of their own until then.
        let t = t0 + Duration::from_millis(600);
        assert_eq!(c.waiting_at("a", g, t), Some(Duration::from_millis(400)));
        assert_eq!(c.hold_at("a", g, w, t), Some(Duration::from_millis(400)));
        // A new generation is reconciled at once.
        assert_eq!(c.waiting_at("a", Some(2), t), None);
        let end = t0 + Duration::from_secs(1);
        assert_eq!(c.waiting_at("a", g, end), None);
        assert_eq!(c.hold_at("a", g, w, end), None);
        // Other objects have windows of their own.
        assert_eq!(
            c.hold_at("b", None, w, t0 + Duration::from_millis(700)),
            Some(w)
        );
        // After a write, the next change opens a new window.
        c.release("a");
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(c.hold_at("a", g, w, t1), Some(w));
        assert_eq!(c.held(), 2);
    }

    #[test]
    fn each_change_waits_the_window_it_was_given_up_to_the_longest() {
        let c = Coalesce::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let short = Duration::from_secs(2);
        assert_eq!(c.hold_at("a", None, short, t0), Some(short));
        // The window is the first held change's: a later one asking for
        // more does not stretch it.
        let t = t0 + Duration::from_secs(1);
        assert_eq!(
            c.hold_at("a", None, Duration::from_secs(10), t),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            c.hold_at("b", None, Duration::from_secs(8), t0),
            Some(Duration::from_secs(8))
        );
        assert_eq!(
            c.hold_at("c", None, Duration::from_secs(60), t0),
            Some(Duration::from_secs(10)),
            "never longer than the longest"
        );
    }
}
