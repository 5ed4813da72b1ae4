//! An index of a watched kind, kept from its watch's events: which objects
//! carry each value of one of their properties (their controller, a
//! finalizer). A controller that needs "the objects with this value" looks
//! them up instead of reading every cached object, which would make each
//! event cost a little more with every object there is.
//!
//! The index names candidates; the cache is the truth (a caller checks
//! each object it gets from the cache). After a relist the index is
//! rebuilt from the relist, so objects deleted while the watch was down do
//! not linger in it.

use std::{
    collections::{BTreeSet, HashMap},
    hash::Hash,
    sync::{Arc, Mutex},
};

use kube::{
    Resource, ResourceExt,
    runtime::{reflector::ObjectRef, watcher},
};

/// An object as the index names it: its namespace and name.
type Key = (Option<String>, String);

/// A relation kept both ways: each key's values, and each value's keys
/// (the objects that carry it).
pub struct Relation<T> {
    forward: HashMap<T, BTreeSet<String>>,
    backward: HashMap<String, BTreeSet<T>>,
}

impl<T> Default for Relation<T> {
    fn default() -> Self {
        Self {
            forward: HashMap::new(),
            backward: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + Hash + Ord> Relation<T> {
    /// `key` now relates to `values` (none: it is forgotten).
    pub fn set(&mut self, key: T, values: BTreeSet<String>) {
        let old = self.forward.remove(&key).unwrap_or_default();
        for v in old.difference(&values) {
            if let Some(keys) = self.backward.get_mut(v) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.backward.remove(v);
                }
            }
        }
        for v in values.difference(&old) {
            self.backward
                .entry(v.clone())
                .or_default()
                .insert(key.clone());
        }
        if !values.is_empty() {
            self.forward.insert(key, values);
        }
    }

    /// The keys that relate to `value`.
    pub fn keys_of(&self, value: &str) -> Option<&BTreeSet<T>> {
        self.backward.get(value)
    }
}

struct State {
    current: Relation<Key>,
    /// Being rebuilt from a relist (between Init and InitDone).
    next: Option<Relation<Key>>,
}

/// The index of `K` by the values `values` reads from each object; shared
/// (cloned) by the watch that keeps it and the reconciles that read it.
pub struct Index<K> {
    state: Arc<Mutex<State>>,
    values: fn(&K) -> BTreeSet<String>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            values: self.values,
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> Key {
    (obj.meta().namespace.clone(), obj.name_any())
}

impl<K> Index<K>
where
    K: Resource,
    K::DynamicType: Default,
{
    /// An empty index of the values `values` reads from each object.
    pub fn new(values: fn(&K) -> BTreeSet<String>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                current: Relation::default(),
                next: None,
            })),
            values,
        }
    }

    /// Takes in one event of the watch.
    pub fn event(&self, event: &watcher::Event<K>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match event {
            watcher::Event::Init => state.next = Some(Relation::default()),
            watcher::Event::InitApply(o) => {
                let (key, values) = (key_of(o), (self.values)(o));
                match state.next.as_mut() {
                    Some(next) => next.set(key, values),
                    None => state.current.set(key, values),
                }
            }
            watcher::Event::InitDone => {
                if let Some(next) = state.next.take() {
                    state.current = next;
                }
            }
            watcher::Event::Apply(o) => state.current.set(key_of(o), (self.values)(o)),
            watcher::Event::Delete(o) => state.current.set(key_of(o), BTreeSet::new()),
        }
    }

    /// The objects that carry `value`, as the watch last showed them, by
    /// namespace and name.
    pub fn objects_with(&self, value: &str) -> Vec<ObjectRef<K>> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        state
            .current
            .keys_of(value)
            .map(|keys| {
                keys.iter()
                    .map(|(ns, name)| match ns {
                        Some(ns) => ObjectRef::new(name).within(ns),
                        None => ObjectRef::new(name),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    fn cm(ns: &str, name: &str, labels: &[&str]) -> ConfigMap {
        let labels: serde_json::Map<_, _> =
            labels.iter().map(|l| (l.to_string(), json!(""))).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
        }))
        .unwrap()
    }

    fn label_keys(c: &ConfigMap) -> BTreeSet<String> {
        c.labels().keys().cloned().collect()
    }

    fn names(index: &Index<ConfigMap>, value: &str) -> Vec<String> {
        index
            .objects_with(value)
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    #[test]
    fn the_index_follows_the_values_as_the_watch_shows_them() {
        let index = Index::new(label_keys);
        index.event(&watcher::Event::Apply(cm("a", "one", &["x"])));
        index.event(&watcher::Event::Apply(cm("b", "one", &["x", "y"])));
        assert_eq!(names(&index, "x"), ["a/one", "b/one"]);
        assert_eq!(names(&index, "y"), ["b/one"]);
        // A value dropped, an object deleted.
        index.event(&watcher::Event::Apply(cm("b", "one", &["y"])));
        assert_eq!(names(&index, "x"), ["a/one"]);
        index.event(&watcher::Event::Delete(cm("b", "one", &["y"])));
        assert!(names(&index, "y").is_empty());
        assert!(names(&index, "z").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_once_it_is_done() {
        let index = Index::new(label_keys);
        index.event(&watcher::Event::Apply(cm("a", "gone-while-down", &["x"])));
        index.event(&watcher::Event::Init);
        index.event(&watcher::Event::InitApply(cm("a", "one", &["x"])));
        // Until the relist is done, the last complete view answers.
        assert_eq!(names(&index, "x"), ["a/gone-while-down"]);
        index.event(&watcher::Event::InitDone);
        assert_eq!(names(&index, "x"), ["a/one"]);
    }
}
