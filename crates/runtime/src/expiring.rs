//! A map whose entries expire a fixed time after they were last written.
//!
//! Controllers keep small per-object or per-cluster notes (failure counts,
//! "created a moment ago", connections reused for a while). Such a note is
//! keyed by something that can disappear without the controller being told
//! (an object deleted while it was failing, a ProviderConfig removed), so a
//! plain map would keep it for ever. Here every entry lives `ttl` after its
//! last write and is then dropped: the map never holds more than what was
//! written within one `ttl`, whatever happens to the owners.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

struct Inner<K, V> {
    entries: HashMap<K, (Instant, V)>,
    last_sweep: Instant,
}

/// Entries that expire `ttl` after their last write; cheap to clone (clones
/// share the entries).
pub struct Expiring<K, V> {
    ttl: Duration,
    inner: Arc<Mutex<Inner<K, V>>>,
}

impl<K, V> Clone for Expiring<K, V> {
    fn clone(&self) -> Self {
        Self {
            ttl: self.ttl,
            inner: self.inner.clone(),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Expiring<K, V> {
    /// An empty map whose entries live `ttl` after their last write.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            inner: Arc::new(Mutex::new(Inner {
                entries: HashMap::new(),
                last_sweep: Instant::now(),
            })),
        }
    }

    /// The value of `key` if it was written less than `ttl` ago.
    pub fn get(&self, key: &K) -> Option<V> {
        self.get_at(key, Instant::now())
    }

    /// Writes `value` under `key`; it lives `ttl` from now.
    pub fn insert(&self, key: K, value: V) {
        self.insert_at(key, value, Instant::now());
    }

    /// Writes `f(current value)` under `key` (None when absent or expired)
    /// and returns what was written.
    pub fn update(&self, key: K, f: impl FnOnce(Option<V>) -> V) -> V {
        self.update_at(key, f, Instant::now())
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &K) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.entries.remove(key);
        }
    }

    /// Forgets every key (alive or expired) for which `gone` holds, and
    /// returns them, e.g. to release what they stood for.
    pub fn remove_where(&self, mut gone: impl FnMut(&K) -> bool) -> Vec<K> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        let keys: Vec<K> = inner.entries.keys().filter(|k| gone(k)).cloned().collect();
        for k in &keys {
            inner.entries.remove(k);
        }
        keys
    }

    /// How many entries are alive now (expired ones are dropped first).
    pub fn len(&self) -> usize {
        self.len_at(Instant::now())
    }

    /// Whether no entry is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get_at(&self, key: &K, now: Instant) -> Option<V> {
        let inner = self.inner.lock().ok()?;
        inner
            .entries
            .get(key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, v)| v.clone())
    }

    fn insert_at(&self, key: K, value: V, now: Instant) {
        self.update_at(key, |_| value, now);
    }

    fn update_at(&self, key: K, f: impl FnOnce(Option<V>) -> V, now: Instant) -> V {
        let current = self.get_at(&key, now);
        let value = f(current);
        if let Ok(mut inner) = self.inner.lock() {
            self.sweep(&mut inner, now, false);
            inner.entries.insert(key, (now, value.clone()));
        }
        value
    }

    fn len_at(&self, now: Instant) -> usize {
        match self.inner.lock() {
            Ok(mut inner) => {
                self.sweep(&mut inner, now, true);
                inner.entries.len()
            }
            Err(_) => 0,
        }
    }

    /// Drops expired entries: when `force`d, else at most once per half
    /// `ttl`, so that writes stay O(1) on average however many entries
    /// there are.
    fn sweep(&self, inner: &mut Inner<K, V>, now: Instant, force: bool) {
        if !force && now.saturating_duration_since(inner.last_sweep) < self.ttl / 2 {
            return;
        }
        inner.last_sweep = now;
        let ttl = self.ttl;
        inner
            .entries
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn an_entry_is_alive_until_its_ttl_has_passed() {
        let m: Expiring<&str, u32> = Expiring::new(TTL);
        let t0 = Instant::now();
        m.insert_at("a", 1, t0);
        assert_eq!(m.get_at(&"a", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(m.get_at(&"a", t0 + TTL), None);
    }

    #[test]
    fn a_write_renews_the_entry() {
        let m: Expiring<&str, u32> = Expiring::new(TTL);
        let t0 = Instant::now();
        m.insert_at("a", 1, t0);
        m.update_at("a", |v| v.unwrap_or(0) + 1, t0 + Duration::from_secs(8));
        assert_eq!(m.get_at(&"a", t0 + Duration::from_secs(16)), Some(2));
    }

    #[test]
    fn entries_of_owners_that_went_away_are_dropped() {
        // Nobody tells the map that "gone-0".."gone-99" were deleted: they
        // are simply never written again, and leave within one ttl.
        let m: Expiring<String, u32> = Expiring::new(TTL);
        let t0 = Instant::now();
        for i in 0..100 {
            m.insert_at(format!("gone-{i}"), 1, t0);
        }
        assert_eq!(m.len_at(t0), 100);
        m.insert_at("alive".to_owned(), 1, t0 + Duration::from_secs(11));
        assert_eq!(m.len_at(t0 + Duration::from_secs(11)), 1);
    }

    #[test]
    fn keys_can_be_forgotten_by_a_rule() {
        let m: Expiring<&str, u32> = Expiring::new(TTL);
        let t0 = Instant::now();
        m.insert_at("a", 1, t0);
        m.insert_at("b", 1, t0);
        assert_eq!(m.remove_where(|k| *k == "a"), vec!["a"]);
        assert_eq!(m.len_at(t0), 1);
    }

    #[test]
    fn an_update_of_an_expired_entry_starts_from_nothing() {
        let m: Expiring<&str, u32> = Expiring::new(TTL);
        let t0 = Instant::now();
        m.insert_at("a", 5, t0);
        let v = m.update_at("a", |v| v.unwrap_or(0) + 1, t0 + Duration::from_secs(30));
        assert_eq!(v, 1);
    }
}
