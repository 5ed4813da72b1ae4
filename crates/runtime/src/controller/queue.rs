//! The work queue behind every controller's workers
//! ([`crate::reconciler::drive`]): objects due for a reconcile wait in the
//! order they became due, each at most once; an object due again while its
//! reconcile runs goes to the back when it ends (never two reconciles of one
//! object at once); a reconcile's requeue waits in a timer list until it is
//! due, or until a change makes the object due sooner.
//!
//! kube-rs's own controller runner does this too, but a runner bounded to
//! the workers takes the objects it held back in hash order (an object whose
//! hash comes late waits while others keep coming), and an unbounded one
//! keeps every due object as a future that it polls whenever any of them
//! finishes: with 2000 resources due in a burst, a third of the
//! resource-controller's CPU. Here waiting costs a place in a list, and
//! taking the next object is O(1).

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    hash::Hash,
    time::Duration,
};

use kube::runtime::controller::Action;
use tokio::time::Instant;

/// Objects due for a reconcile, running, and waiting for a requeue.
#[derive(Debug)]
pub struct Queue<T> {
    /// Due now, in the order they became due.
    due: VecDeque<T>,
    /// What `due` holds, to take each object once.
    queued: HashSet<T>,
    /// Reconciles running.
    running: HashSet<T>,
    /// Running, and due again when they end.
    again: HashSet<T>,
    /// Requeues, by when they are due (and a sequence number, for ties).
    later: BTreeMap<(Instant, u64), T>,
    /// Each requeue's key in `later`.
    when: HashMap<T, (Instant, u64)>,
    sequence: u64,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            due: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            again: HashSet::new(),
            later: BTreeMap::new(),
            when: HashMap::new(),
            sequence: 0,
        }
    }
}

impl<T: Hash + Eq + Clone> Queue<T> {
    /// `t` is due now: it joins the back of the line (unless it waits in
    /// it already), or, while its reconcile runs, is due again when that
    /// ends. A requeue it waited for is dropped: it runs sooner, and its
    /// reconcile says when next.
    pub fn due(&mut self, t: T) {
        if let Some(key) = self.when.remove(&t) {
            self.later.remove(&key);
        }
        if self.running.contains(&t) {
            self.again.insert(t);
        } else if self.queued.insert(t.clone()) {
            self.due.push_back(t);
        }
    }

    /// The object whose turn it is, now running.
    pub fn take(&mut self) -> Option<T> {
        let t = self.due.pop_front()?;
        self.queued.remove(&t);
        self.running.insert(t.clone());
        Some(t)
    }

    /// `t`'s reconcile ended and asked to run again `after` (from `now`),
    /// or only on a change (None). Due again meanwhile: it is due now.
    pub fn done(&mut self, t: &T, after: Option<Duration>, now: Instant) {
        self.running.remove(t);
        if self.again.remove(t) {
            self.due(t.clone());
            return;
        }
        let Some(at) = after.and_then(|d| now.checked_add(d)) else {
            return;
        };
        self.sequence += 1;
        let key = (at, self.sequence);
        if let Some(old) = self.when.insert(t.clone(), key) {
            self.later.remove(&old);
        }
        self.later.insert(key, t.clone());
    }

    /// Requeues due by `now` join the line, earliest first.
    pub fn expire(&mut self, now: Instant) {
        while let Some(entry) = self.later.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let t = entry.remove();
            self.when.remove(&t);
            self.due(t);
        }
    }

    /// When the next requeue is due.
    pub fn next_requeue(&self) -> Option<Instant> {
        self.later.first_key_value().map(|((at, _), _)| *at)
    }

    /// How many wait for a worker.
    pub fn waiting(&self) -> usize {
        self.due.len()
    }

    /// How many reconciles run.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Nothing more is taken (shutdown): what waits is dropped.
    pub fn close(&mut self) {
        self.due.clear();
        self.queued.clear();
        self.again.clear();
        self.later.clear();
        self.when.clear();
    }
}

/// When `action` asks to reconcile again: None for "only on a change".
///
/// kube-rs keeps an [`Action`]'s delay private, with no getter; its Debug
/// form shows it (`Action { requeue_after: Some(15s) }`). The delay read
/// from it is checked against the Action it came from (`Action::requeue` of
/// it must equal `action`), so a different form is never misread: it gives
/// [`UNREADABLE_REQUEUE`] instead, and a warning.
pub fn requeue_after(action: &Action) -> Option<Duration> {
    if *action == Action::await_change() {
        return None;
    }
    let text = format!("{action:?}");
    let read = text
        .strip_prefix("Action { requeue_after: Some(")
        .and_then(|rest| rest.strip_suffix(") }"))
        .and_then(parse_debug_duration);
    match read {
        Some(d) if Action::requeue(d) == *action => Some(d),
        _ => {
            tracing::warn!(action = %text, "cannot read a reconcile's requeue delay; requeueing after {UNREADABLE_REQUEUE:?}");
            Some(UNREADABLE_REQUEUE)
        }
    }
}

/// The requeue delay when an [`Action`]'s cannot be read (see
/// [`requeue_after`]).
pub const UNREADABLE_REQUEUE: Duration = Duration::from_secs(10);

/// A [`Duration`] from its Debug form: a decimal number and a unit (`15s`,
/// `1.5s`, `250ms`, `12.000001ms`, `3µs`, `7ns`).
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let (number, nanos_per_unit) = [
        ("ns", 1u128),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ]
    .into_iter()
    .find_map(|(unit, n)| text.strip_suffix(unit).map(|number| (number, n)))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) || fraction.len() > 9 {
        return None;
    }
    let mut nanos = whole.parse::<u128>().ok()?.checked_mul(nanos_per_unit)?;
    if !fraction.is_empty() {
        let digits = fraction.parse::<u128>().ok()?;
        let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        nanos = nanos.checked_add(digits.checked_mul(nanos_per_unit)? / scale)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    Some(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Queue<&'static str> {
        Queue::default()
    }

    fn taken(q: &mut Queue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| q.take()).collect()
    }

    #[test]
    fn objects_are_taken_in_the_order_they_became_due_and_once() {
        let mut q = queue();
        for t in ["c", "a", "b", "a", "c"] {
            q.due(t);
        }
        assert_eq!(q.waiting(), 3);
        assert_eq!(taken(&mut q), ["c", "a", "b"]);
        assert_eq!((q.waiting(), q.running()), (0, 3));
    }

    #[test]
    fn an_object_due_while_it_runs_runs_again_after_and_never_twice_at_once() {
        let mut q = queue();
        q.due("a");
        q.due("b");
        assert_eq!(q.take(), Some("a"));
        q.due("a");
        q.due("a");
        assert_eq!(taken(&mut q), ["b"], "a runs: it is not taken again");
        q.due("c");
        let now = Instant::now();
        q.done(&"a", Some(Duration::from_secs(60)), now);
        assert_eq!(
            taken(&mut q),
            ["c", "a"],
            "due again while running: behind what was due before it ended"
        );
        assert_eq!(q.next_requeue(), None, "it runs now, not in a minute");
    }

    #[test]
    fn a_requeue_waits_until_it_is_due_or_a_change_comes_first() {
        let mut q = queue();
        let now = Instant::now();
        for t in ["a", "b", "c"] {
            q.due(t);
        }
        assert_eq!(taken(&mut q), ["a", "b", "c"]);
        q.done(&"a", Some(Duration::from_secs(30)), now);
        q.done(&"b", Some(Duration::from_secs(10)), now);
        q.done(&"c", None, now);
        assert_eq!(q.next_requeue(), Some(now + Duration::from_secs(10)));
        q.expire(now + Duration::from_secs(9));
        assert_eq!(q.waiting(), 0, "nothing is due yet");
        q.expire(now + Duration::from_secs(10));
        assert_eq!(taken(&mut q), ["b"]);
        q.due("a");
        assert_eq!(q.next_requeue(), None, "a change made a due now");
        assert_eq!(taken(&mut q), ["a"]);
        q.expire(now + Duration::from_secs(60));
        assert_eq!(taken(&mut q), Vec::<&str>::new(), "its requeue is gone");
    }

    #[test]
    fn a_later_requeue_replaces_the_earlier_one() {
        let mut q = queue();
        let now = Instant::now();
        q.due("a");
        q.take();
        q.done(&"a", Some(Duration::from_secs(5)), now);
        // Taken by its requeue, then asked for a longer one.
        q.expire(now + Duration::from_secs(5));
        q.take();
        q.done(&"a", Some(Duration::from_secs(50)), now);
        assert_eq!(q.next_requeue(), Some(now + Duration::from_secs(50)));
        assert_eq!(q.later.len(), 1);
    }

    #[test]
    fn a_closed_queue_drops_what_waits() {
        let mut q = queue();
        let now = Instant::now();
        q.due("a");
        q.due("b");
        q.take();
        q.due("a");
        q.close();
        q.done(&"a", None, now);
        assert_eq!((q.waiting(), q.running(), q.next_requeue()), (0, 0, None));
    }

    #[test]
    fn a_requeue_delay_is_read_back_from_its_action() {
        for d in [
            Duration::from_nanos(1),
            Duration::from_nanos(999),
            Duration::from_micros(3),
            Duration::from_micros(1500),
            Duration::from_millis(250),
            Duration::from_millis(12) + Duration::from_nanos(1),
            Duration::from_secs(1),
            Duration::from_secs_f64(1.5),
            Duration::new(15, 1),
            Duration::new(599, 987_654_321),
            Duration::from_secs(86_400 * 30 * 6),
        ] {
            assert_eq!(requeue_after(&Action::requeue(d)), Some(d), "{d:?}");
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
    }

    #[test]
    fn a_duration_text_that_is_not_one_is_not_read() {
        for text in ["", "s", ".5s", "1.s5", "-1s", "1.0000000001s", "1h", "1 s"] {
            assert_eq!(parse_debug_duration(text), None, "{text:?}");
        }
    }
}
