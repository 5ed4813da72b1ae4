//! A map of bounded size that forgets the least recently used entry first:
//! for caches of things that are cheap to read again and must not grow
//! with what users create (remote clients per owner, what a package digest
//! owns). Not synchronized: callers hold it in their own lock.

use std::{
    borrow::Borrow,
    collections::{BTreeMap, HashMap},
    hash::Hash,
};

/// At most `capacity` entries; inserting one more forgets the least
/// recently used (read with [`Lru::get`] or written with [`Lru::insert`]).
#[derive(Debug)]
pub struct Lru<K, V> {
    /// Each key's value and when it was last used.
    entries: HashMap<K, (u64, V)>,
    /// Keys by when they were last used.
    used: BTreeMap<u64, K>,
    clock: u64,
    capacity: usize,
}

impl<K: Clone + Eq + Hash, V> Lru<K, V> {
    /// An empty map of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            used: BTreeMap::new(),
            clock: 0,
            capacity: capacity.max(1),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The value of `key`, marked used.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.tick();
        let (at, value) = self.entries.get_mut(key)?;
        if let Some(k) = self.used.remove(at) {
            self.used.insert(now, k);
        }
        *at = now;
        Some(value)
    }

    /// Sets `key` to `value`, marked used; returns what it replaced and
    /// what was forgotten to make room (to drop outside the caller's lock).
    pub fn insert(&mut self, key: K, value: V) -> Vec<V> {
        let now = self.tick();
        let mut gone: Vec<V> = self.remove(&key).into_iter().collect();
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.used.pop_first() else {
                break;
            };
            gone.extend(self.entries.remove(&oldest).map(|(_, v)| v));
        }
        self.used.insert(now, key.clone());
        self.entries.insert(key, (now, value));
        gone
    }

    /// Forgets `key`, returning its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (at, value) = self.entries.remove(key)?;
        self.used.remove(&at);
        Some(value)
    }

    /// Forgets every entry `keep` rejects, returning their values.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) -> Vec<V> {
        let gone: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, (_, v))| !keep(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|k| self.remove(k)).collect()
    }

    /// Whether `key` has an entry (not marking it used).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.contains_key(key)
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_is_forgotten_first() {
        let mut lru = Lru::new(3);
        for n in 0..3 {
            assert!(lru.insert(n, format!("v{n}")).is_empty());
        }
        // 0 is used again: 1 is now the oldest.
        assert_eq!(lru.get(&0).cloned(), Some("v0".to_owned()));
        assert_eq!(lru.insert(3, "v3".into()), vec!["v1".to_owned()]);
        assert_eq!(lru.get(&1), None);
        assert_eq!(lru.len(), 3);
        // Writing a key again replaces it and does not grow the map.
        assert_eq!(lru.insert(3, "w3".into()), vec!["v3".to_owned()]);
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.used.len(), 3);
        // 2 is the oldest now.
        assert_eq!(lru.insert(4, "v4".into()), vec!["v2".to_owned()]);
        assert_eq!(lru.retain(|k, _| *k != 0), vec!["v0".to_owned()]);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.used.len(), 2);
        assert_eq!(lru.remove(&4), Some("v4".to_owned()));
        assert!(lru.contains_key(&3) && !lru.is_empty());
    }
}
