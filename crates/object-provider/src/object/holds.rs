//! Which Objects carry each referrer finalizer, kept from the Objects'
//! watch: an Object that stops referencing (or is deleted) finds the
//! Objects it holds by looking them up, not by reading every cached Object
//! (which made each create, update and delete cost a little more with
//! every Object there is).
//!
//! The index names candidates; the cache is the truth (a caller checks
//! that each still carries the finalizer). After a relist the index is
//! rebuilt from the relist, so Objects deleted while the watch was down do
//! not linger in it.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
};

use kube::{ResourceExt, runtime::watcher};
use types::kubernetes::v1alpha1::Object;

/// Prefix of the finalizers referrers put on referenced Objects.
pub const REFERRED_BY: &str = "referred-by.kubernetes.crossplane.io/";

/// A relation kept both ways: each key's values, and each value's keys.
#[derive(Default)]
pub struct Relation {
    forward: HashMap<String, BTreeSet<String>>,
    backward: HashMap<String, BTreeSet<String>>,
}

impl Relation {
    /// `key` now relates to `values` (none: it is forgotten).
    pub fn set(&mut self, key: &str, values: BTreeSet<String>) {
        let old = self.forward.remove(key).unwrap_or_default();
        for v in old.difference(&values) {
            if let Some(keys) = self.backward.get_mut(v) {
                keys.remove(key);
                if keys.is_empty() {
                    self.backward.remove(v);
                }
            }
        }
        for v in values.difference(&old) {
            self.backward
                .entry(v.clone())
                .or_default()
                .insert(key.to_owned());
        }
        if !values.is_empty() {
            self.forward.insert(key.to_owned(), values);
        }
    }

    /// The keys that relate to `value`.
    pub fn keys_of(&self, value: &str) -> Option<&BTreeSet<String>> {
        self.backward.get(value)
    }
}

/// Objects (keys) and the referrer finalizers they carry (values).
#[derive(Default)]
struct State {
    current: Relation,
    /// Being rebuilt from a relist (between Init and InitDone).
    next: Option<Relation>,
}

/// The referrer-finalizer index, shared by the watch that keeps it and the
/// reconciles that read it.
#[derive(Clone, Default)]
pub struct Holds(Arc<Mutex<State>>);

/// The referrer finalizers `obj` carries.
fn referrer_finalizers(obj: &Object) -> BTreeSet<String> {
    obj.finalizers()
        .iter()
        .filter(|f| f.starts_with(REFERRED_BY))
        .cloned()
        .collect()
}

impl Holds {
    /// Takes in one event of the Objects' watch.
    pub fn event(&self, event: &watcher::Event<Object>) {
        let Ok(mut state) = self.0.lock() else {
            return;
        };
        match event {
            watcher::Event::Init => state.next = Some(Relation::default()),
            watcher::Event::InitApply(o) => {
                let (name, carried) = (o.name_any(), referrer_finalizers(o));
                match state.next.as_mut() {
                    Some(next) => next.set(&name, carried),
                    None => state.current.set(&name, carried),
                }
            }
            watcher::Event::InitDone => {
                if let Some(next) = state.next.take() {
                    state.current = next;
                }
            }
            watcher::Event::Apply(o) => state.current.set(&o.name_any(), referrer_finalizers(o)),
            watcher::Event::Delete(o) => state.current.set(&o.name_any(), BTreeSet::new()),
        }
    }

    /// The names of the Objects carrying `finalizer`, as the watch last
    /// showed them.
    pub fn carrying(&self, finalizer: &str) -> Vec<String> {
        self.0
            .lock()
            .ok()
            .and_then(|s| s.current.keys_of(finalizer).cloned())
            .map(|set| set.into_iter().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(name: &str, finalizers: &[&str]) -> Object {
        serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {"forProvider": {"manifest": {}}},
        }))
        .unwrap()
    }

    fn by(referrer: &str) -> String {
        format!("{REFERRED_BY}{referrer}")
    }

    #[test]
    fn the_index_follows_finalizers_as_the_watch_shows_them() {
        let holds = Holds::default();
        let (a, b) = (by("a"), by("b"));
        holds.event(&watcher::Event::Apply(object(
            "t1",
            &[&a, "finalizer.managedresource.crossplane.io"],
        )));
        holds.event(&watcher::Event::Apply(object("t2", &[&a, &b])));
        assert_eq!(holds.carrying(&a), ["t1", "t2"]);
        assert_eq!(holds.carrying(&b), ["t2"]);
        // A finalizer removed, an Object deleted.
        holds.event(&watcher::Event::Apply(object("t2", &[&b])));
        assert_eq!(holds.carrying(&a), ["t1"]);
        holds.event(&watcher::Event::Delete(object("t2", &[&b])));
        assert!(holds.carrying(&b).is_empty());
        assert!(
            holds
                .carrying("finalizer.managedresource.crossplane.io")
                .is_empty()
        );
    }

    #[test]
    fn a_relist_replaces_the_index_once_it_is_done() {
        let holds = Holds::default();
        let a = by("a");
        holds.event(&watcher::Event::Apply(object("gone-while-down", &[&a])));
        holds.event(&watcher::Event::Init);
        holds.event(&watcher::Event::InitApply(object("t1", &[&a])));
        // Until the relist is done, the last complete view answers.
        assert_eq!(holds.carrying(&a), ["gone-while-down"]);
        holds.event(&watcher::Event::InitDone);
        assert_eq!(holds.carrying(&a), ["t1"]);
    }
}
