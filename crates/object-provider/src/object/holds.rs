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

use std::collections::BTreeSet;

use super::kind::ObjectKind;
use kube::{
    ResourceExt,
    runtime::{reflector::ObjectRef, watcher},
};
use runtime::index::Index;

/// Prefix of the finalizers referrers put on referenced Objects.
pub const REFERRED_BY: &str = "referred-by.kubernetes.crossplane.io/";

/// The referrer-finalizer index, shared by the watch that keeps it and the
/// reconciles that read it.
#[derive(Clone)]
pub struct Holds<K: ObjectKind>(Index<K>);

impl<K: ObjectKind> Default for Holds<K> {
    fn default() -> Self {
        Self(Index::new(referrer_finalizers))
    }
}

/// The referrer finalizers `obj` carries.
fn referrer_finalizers<K: ObjectKind>(obj: &K) -> BTreeSet<String> {
    obj.finalizers()
        .iter()
        .filter(|f| is_referrer_finalizer(f))
        .cloned()
        .collect()
}

/// Whether `finalizer` is one a referrer put on the Object it refers to.
pub fn is_referrer_finalizer(finalizer: &str) -> bool {
    finalizer.starts_with(REFERRED_BY)
}

impl<K: ObjectKind> Holds<K> {
    /// Takes in one event of the Objects' watch.
    pub fn event(&self, event: &watcher::Event<K>) {
        self.0.event(event);
    }

    /// The Objects carrying `finalizer`, as the watch last showed them.
    pub fn carrying(&self, finalizer: &str) -> Vec<ObjectRef<K>> {
        self.0.objects_with(finalizer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    fn object(name: &str, finalizers: &[&str]) -> Object {
        serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {"forProvider": {"manifest": {}}},
        }))
        .unwrap()
    }

    fn names(refs: Vec<ObjectRef<Object>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    fn by(referrer: &str) -> String {
        format!("{REFERRED_BY}{referrer}")
    }

    #[test]
    fn the_index_follows_finalizers_as_the_watch_shows_them() {
        let holds = Holds::<Object>::default();
        let (a, b) = (by("a"), by("b"));
        holds.event(&watcher::Event::Apply(object(
            "t1",
            &[&a, "finalizer.managedresource.crossplane.io"],
        )));
        holds.event(&watcher::Event::Apply(object("t2", &[&a, &b])));
        assert_eq!(names(holds.carrying(&a)), ["t1", "t2"]);
        assert_eq!(names(holds.carrying(&b)), ["t2"]);
        // A finalizer removed, an Object deleted.
        holds.event(&watcher::Event::Apply(object("t2", &[&b])));
        assert_eq!(names(holds.carrying(&a)), ["t1"]);
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
        let holds = Holds::<Object>::default();
        let a = by("a");
        holds.event(&watcher::Event::Apply(object("gone-while-down", &[&a])));
        holds.event(&watcher::Event::Init);
        holds.event(&watcher::Event::InitApply(object("t1", &[&a])));
        // Until the relist is done, the last complete view answers.
        assert_eq!(names(holds.carrying(&a)), ["gone-while-down"]);
        holds.event(&watcher::Event::InitDone);
        assert_eq!(names(holds.carrying(&a)), ["t1"]);
    }
}
