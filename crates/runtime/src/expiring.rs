//! A map whose entries expire a fixed time after they were last written.
//!
//! Controllers keep small per-object or per-cluster notes (failure counts,
//! "created a moment ago", connections reused for a while). Such a note is
//! keyed by something that can disappear without the controller being told
//! (an object deleted while it was failing, a ProviderConfig removed), so a
//! plain map would keep it for ever. Here every entry lives `ttl` after its
//! last write and is then dropped: the map never holds more than what was
//! written within one and a half `ttl`, whatever happens to the owners.
//! Expired entries go at the next write, and, made inside a Tokio runtime,
//! from a task every half `ttl`, so a burst's notes (a status writer's text
//! of thousands of statuses) do not outlive it in a controller that goes
//! idle and writes nothing more.

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

impl<K: Hash + Eq + Clone + Send + 'static, V: Clone + Send + 'static> Expiring<K, V> {
    /// An empty map whose entries live `ttl` after their last write.
    pub fn new(ttl: Duration) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            entries: HashMap::new(),
            last_sweep: Instant::now(),
        }));
        sweep_while_alive(&inner, ttl);
        Self { ttl, inner }
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
            sweep(&mut inner, self.ttl, now, false);
            inner.entries.insert(key, (now, value.clone()));
        }
        value
    }

    fn len_at(&self, now: Instant) -> usize {
        match self.inner.lock() {
            Ok(mut inner) => {
                sweep(&mut inner, self.ttl, now, true);
                inner.entries.len()
            }
            Err(_) => 0,
        }
    }
}

/// Drops expired entries: when `force`d, else at most once per half `ttl`,
/// so that writes stay O(1) on average however many entries there are.
fn sweep<K, V>(inner: &mut Inner<K, V>, ttl: Duration, now: Instant, force: bool) {
    if !force && now.saturating_duration_since(inner.last_sweep) < ttl / 2 {
        return;
    }
    inner.last_sweep = now;
    inner
        .entries
        .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
}

/// Inside a Tokio runtime, sweeps `inner` every half `ttl` until the map is
/// dropped (the task holds it weakly). Outside one (a unit test) the map is
/// swept by its writes only.
fn sweep_while_alive<K, V>(inner: &Arc<Mutex<Inner<K, V>>>, ttl: Duration)
where
    K: Send + 'static,
    V: Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak = Arc::downgrade(inner);
    let every = (ttl / 2).max(Duration::from_millis(100));
    runtime.spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if let Ok(mut inner) = inner.lock() {
                sweep(&mut inner, ttl, Instant::now(), true);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries held, expired or not (`len` sweeps first).
    fn held<K, V>(m: &Expiring<K, V>) -> usize {
        m.inner.lock().map(|i| i.entries.len()).unwrap_or(0)
    }

    #[tokio::test]
    async fn an_idle_map_drops_what_expired_without_a_write() {
        let ttl = Duration::from_millis(500);
        let m: Expiring<String, u32> = Expiring::new(ttl);
        let t0 = Instant::now();
        m.insert("a".into(), 1);
        // Nothing is written again: only the map's own task can drop it,
        // once it expired and before half a ttl more has passed.
        let deadline = t0 + ttl * 10;
        while held(&m) > 0 {
            assert!(Instant::now() < deadline, "the expired entry is still held");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gone = t0.elapsed();
        assert!(gone >= ttl, "dropped after {gone:?}, before it expired");
        assert!(gone < ttl * 3, "dropped only after {gone:?}");
    }

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
