//! Per-object exponential backoff for error policies: a failing object is
//! retried at 1s, 2s, 4s … up to a cap, and never hot-loops; its count
//! resets on the first success.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

/// First retry delay.
pub const BASE: Duration = Duration::from_secs(1);
/// Longest delay between retries of one object.
pub const CAP: Duration = Duration::from_secs(300);

/// Failure counts by object key (namespace/name or UID).
#[derive(Clone, Default)]
pub struct Backoff {
    failures: Arc<Mutex<HashMap<String, u32>>>,
}

impl Backoff {
    /// Records a failure of `key` and returns how long to wait before the
    /// next try.
    pub fn failed(&self, key: &str) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key.to_owned()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        delay(n)
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// How many times `key` failed in a row.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(key).copied())
            .unwrap_or(0)
    }
}

/// The delay after `n` consecutive failures: BASE·2^(n-1), capped.
pub fn delay(n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(20);
    BASE.saturating_mul(1 << exp).min(CAP)
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
