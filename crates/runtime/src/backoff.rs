//! Per-object exponential backoff for error policies: a failing object is
//! retried at 1s, 2s, 4s … up to a cap, and never hot-loops; its count
//! resets on the first success.
//!
//! Counts are kept in an [`Expiring`] map: an object that has not failed for
//! twice the longest delay is no longer failing (it would have been retried
//! and failed again within the cap), so its entry goes, also when the object
//! was deleted while failing and no success ever cleared it.

use std::time::Duration;

use crate::expiring::Expiring;

/// First retry delay.
pub const BASE: Duration = Duration::from_secs(1);
/// Longest delay between retries of one object.
pub const CAP: Duration = Duration::from_secs(300);
/// How long a failure count is kept without a new failure.
pub const FORGET_AFTER: Duration = Duration::from_secs(CAP.as_secs() * 2);

/// Failure counts by object key (namespace/name or UID).
#[derive(Clone)]
pub struct Backoff {
    failures: Expiring<String, u32>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            failures: Expiring::new(FORGET_AFTER),
        }
    }
}

impl Backoff {
    /// Records a failure of `key` and returns how long to wait before the
    /// next try.
    pub fn failed(&self, key: &str) -> Duration {
        let n = self
            .failures
            .update(key.to_owned(), |n| n.unwrap_or(0).saturating_add(1));
        delay(n)
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        self.failures.remove(&key.to_owned());
    }

    /// How many times `key` failed in a row.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.get(&key.to_owned()).unwrap_or(0)
    }

    /// How many objects are failing now (have a count).
    pub fn len(&self) -> usize {
        self.failures.len()
    }

    /// Whether no object is failing.
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The delay after `n` consecutive failures: BASE·2^(n-1), capped.
pub fn delay(n: u32) -> Duration {
    doubling(BASE, CAP, n)
}

/// `base` doubled per failure after the first of `n` (base·2^(n-1)), at most
/// `cap`.
pub fn doubling(base: Duration, cap: Duration, n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(20);
    base.saturating_mul(1 << exp).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_one_second() {
        assert_eq!(delay(1), Duration::from_secs(1));
        assert_eq!(delay(2), Duration::from_secs(2));
        assert_eq!(delay(4), Duration::from_secs(8));
    }

    #[test]
    fn delays_are_capped() {
        assert_eq!(delay(30), CAP);
        assert_eq!(delay(u32::MAX), CAP);
    }

    #[test]
    fn a_success_resets_the_count() {
        let b = Backoff::default();
        b.failed("a");
        assert_eq!(b.failed("a"), Duration::from_secs(2));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_secs(1));
    }
}
