//! Status writes that follow a burst wait for it to settle.
//!
//! Some status fields only mirror another system's churn: a remote
//! Deployment's status, which its own controller rewrites several times in a
//! second while it rolls out; an application's count of submitted resources,
//! which moves once per resource. Writing each step costs the control
//! cluster a request (and wakes every watcher of the kind) for a state that
//! is gone a moment later. A controller marks such changes
//! ([`crate::reconciler::Reconciler::may_wait`]); the skeleton then holds the
//! write back until [`Coalesce::window`] after the first change it held,
//! looks again then (or sooner, when something wakes the object) and writes
//! whatever the status has become by then: one write per window, the last
//! state at most one window late. A change that is not marked (a new state,
//! a failure) is written at once and takes whatever was held with it. While
//! a change is held, the object is not reconciled again before the window
//! ends (each wake would only find the same status to hold) unless its
//! generation changed or it is being deleted: the burst costs one reconcile
//! per wake less, and the reconcile at the window's end sees everything.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use types::common::Condition;

use crate::{conditions, expiring::Expiring};

/// The objects whose status write is being held back, by UID, with the
/// moment the first held change was seen. Cheap to clone (clones share).
#[derive(Clone)]
pub struct Coalesce {
    window: Duration,
    held: Arc<Expiring<String, (Instant, Option<i64>)>>,
}

impl Coalesce {
    /// Holds marked status changes back for up to `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            // An entry outlives its window only when its object went away
            // without a write: dropped a few windows later.
            held: Arc::new(Expiring::new(window * 4)),
        }
    }

    /// How long a held change waits at most.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// For a marked change of `uid` (at `generation`) seen now:
    /// `Some(wait)` while its window runs (look again after `wait`, write
    /// nothing now), None once it is over (write now).
    pub fn hold(&self, uid: &str, generation: Option<i64>) -> Option<Duration> {
        self.hold_at(uid, generation, Instant::now())
    }

    /// `Some(wait)` while a change of `uid` is held and its generation is
    /// still `generation`: nothing to reconcile before the window ends.
    pub fn waiting(&self, uid: &str, generation: Option<i64>) -> Option<Duration> {
        self.waiting_at(uid, generation, Instant::now())
    }

    fn hold_at(&self, uid: &str, generation: Option<i64>, now: Instant) -> Option<Duration> {
        let first = match self.held.get(&uid.to_owned()) {
            Some((first, _)) => first,
            None => {
                self.held.insert(uid.to_owned(), (now, generation));
                now
            }
        };
        let due = first + self.window;
        (now < due).then(|| due - now)
    }

    fn waiting_at(&self, uid: &str, generation: Option<i64>, now: Instant) -> Option<Duration> {
        let (first, held_at) = self.held.get(&uid.to_owned())?;
        let due = first + self.window;
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
        let c = Coalesce::new(Duration::from_secs(1));
        let (t0, g) = (Instant::now(), Some(1));
        assert_eq!(c.waiting_at("a", g, t0), None);
        assert_eq!(c.hold_at("a", g, t0), Some(Duration::from_secs(1)));
        // Later changes in the same burst do not push the write back, and
        // need no reconcile of their own until then.
        let t = t0 + Duration::from_millis(600);
        assert_eq!(c.waiting_at("a", g, t), Some(Duration::from_millis(400)));
        assert_eq!(c.hold_at("a", g, t), Some(Duration::from_millis(400)));
        // A new generation is reconciled at once.
        assert_eq!(c.waiting_at("a", Some(2), t), None);
        let end = t0 + Duration::from_secs(1);
        assert_eq!(c.waiting_at("a", g, end), None);
        assert_eq!(c.hold_at("a", g, end), None);
        // Other objects have windows of their own.
        assert_eq!(
            c.hold_at("b", None, t0 + Duration::from_millis(700)),
            Some(Duration::from_secs(1))
        );
        // After a write, the next change opens a new window.
        c.release("a");
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(c.hold_at("a", g, t1), Some(Duration::from_secs(1)));
        assert_eq!(c.held(), 2);
    }
}
